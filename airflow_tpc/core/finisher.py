"""The one seam between deciding and finishing: plan an epoch's roll-forward, carry it out.

Flink's Sink V2 splits a sink into the writer (which stages and pre-commits) and the
committer (which carries a decided committable out, idempotently, and is the only part
a restore runs again).  Here the decision is one ``decision.json``; everything after it
is this module's.  A :class:`Finisher` is built from a :class:`~airflow_tpc.core.sink.Sink`
and offers two calls:

- :meth:`Finisher.plan` reads the epoch's ledger (the same checked reads as before:
  a damaged decision raises here, before anything is written) and returns a
  :class:`FinishPlan`: a typed, printable list of :class:`FinishStep` — ``publish`` the
  winning commit (switch the table or swap the folders, write the marker, record
  ``published.json``), ``abort`` an undecided attempt below it (a superseded one),
  ``discard`` the staging of an attempt aborted earlier and close it, ``clean`` the
  staging of a lower commit it displaced (then ``superseded.json``), ``leave`` an
  undecided group member below it to its group.
- :meth:`Finisher.carry_out` does exactly those steps, in that order, and returns a
  :class:`FinishReport` naming the steps done.

Every path that finishes an epoch goes through it: ``Sink.commit`` (the commit's own
epoch and the roll-forward of others), ``Sink.recover``, a group's member switch
(:mod:`airflow_tpc.group.finish`).  A dry run is the plan printed instead of carried
out, so it cannot miss a branch the real run takes: there is one list of branches.

The one thing a plan cannot foresee is a race: a higher attempt that began and
committed after the plan's listing and is already what readers see.  Then the
publish step is refused by :mod:`airflow_tpc.core.promote` and :meth:`carry_out` plans the
epoch again from a fresh listing (once) and carries that plan out instead.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from ..errors import GroupMemberError, LedgerError
from . import promote as _promote
from .faults import crashpoint
from .ledger import AttemptRecords
from .manifest import Manifest
from .member_guard import check_member_commit, kept_for_group
from .records import (
    BEGIN,
    DISPLACED_DONE_KINDS,
    PUBLISHED,
    SUPERSEDED,
    AbortDecision,
    Begin,
    CommitDecision,
    needs_finishing,
)

if TYPE_CHECKING:
    from ..storage import Storage
    from .layout import Layout
    from .ledger import Ledger
    from .records import Decision

__all__ = ["FinishPlan", "FinishReport", "FinishStep", "Finisher", "FinishingSink", "STEP_KINDS"]

#: What each step does (the order of :attr:`FinishPlan.steps` is the order of doing).
STEP_KINDS = {
    "publish": "switch the winning commit in for readers and record published.json",
    "abort": "decide abort of an undecided attempt below the winner, remove its staging",
    "discard": "remove the staging of an attempt aborted earlier, record closed.json",
    "clean": "remove the staging of a lower commit, record superseded.json",
    "leave": "an undecided group member below the winner: its group decides it",
}


@dataclass(frozen=True)
class FinishStep:
    """One step of finishing an epoch: its kind (:data:`STEP_KINDS`), the attempt it
    acts on, why, and what it publishes (files and bytes, from the decision)."""

    kind: str
    epoch: str
    attempt: int
    reason: str = ""
    files: int | None = None
    bytes: int | None = None

    def __str__(self) -> str:
        size = f", {self.files} file(s), {self.bytes} bytes" if self.files is not None else ""
        why = f": {self.reason}" if self.reason else ""
        return f"{self.kind} epoch {self.epoch} attempt {self.attempt}{size}{why}"


@dataclass
class FinishPlan:
    """What finishing ``epoch`` does, read from its ledger; nothing was written.

    ``winner``: the attempt readers see once it is carried out (None: the epoch has
    no commit); ``rolls_forward``: that commit was decided but not yet finished (a
    lost notification).  ``attempts`` is the listing the plan read (carried out from)."""

    epoch: str
    winner: int | None
    rolls_forward: bool
    steps: list[FinishStep]
    attempts: dict[int, AttemptRecords] = field(repr=False, compare=False)
    decision: CommitDecision | None = field(default=None, repr=False, compare=False)

    def __str__(self) -> str:
        return "\n".join(map(str, self.steps)) or f"epoch {self.epoch}: nothing to do"


@dataclass
class FinishReport:
    """What :meth:`Finisher.carry_out` did: the winner and the steps done.  A clean-up
    that failed (best effort: a later commit, recover or gc retries it) is not among
    ``done``; ``replanned`` when a higher attempt overtook the plan (see module doc)."""

    epoch: str
    winner: int | None
    done: list[FinishStep]
    replanned: bool = False


class FinishingSink(Protocol):
    """What a finisher needs of the sink whose epochs it finishes: its ledger and store,
    and the sink's own checked reads and single-attempt steps.

    :class:`~airflow_tpc.core.sink_finish.SinkFinish` provides them (so every sink, table
    sinks with their overrides).  They are named here instead of importing the sink:
    the sink builds its finisher, so the finisher stands below it, and this list is
    the whole of what finishing may do to a target."""

    ledger: Ledger
    layout: Layout
    storage: Storage
    namespace: str

    def _winner(self, epoch: str, attempts: dict[int, AttemptRecords]
                ) -> tuple[int, CommitDecision] | None: ...

    def _decision(self, epoch: str, attempt: int, rec: AttemptRecords) -> Decision | None: ...

    def _decided_manifest(self, epoch: str, attempt: int, decision: CommitDecision
                          ) -> Manifest: ...

    def _abort(self, epoch: str, attempt: int, reason: str, expired: bool = False,
               best_effort: bool = False, by_group: bool = False) -> bool: ...

    def _remove_aborted(self, epoch: str, attempt: int, decision: AbortDecision,
                        best_effort: bool, group_checked: bool = False) -> bool: ...

    def _clean_staging(self, epoch: str, attempt: int) -> bool: ...

    def _close(self, epoch: str, attempt: int, rec: AttemptRecords | None = None) -> None: ...


class Finisher:
    """Plans and carries out the finishing of a sink's epochs (module docstring)."""

    def __init__(self, sink: FinishingSink) -> None:
        self.sink = sink

    # -------------------------------------------------------------------- plan
    def plan(self, epoch: str, attempts: dict[int, AttemptRecords] | None = None
             ) -> FinishPlan:
        """The steps that finish ``epoch``; ``attempts``: its listing, when the caller
        has one (its records cache is used and updated), else it is listed here."""
        sink = self.sink
        if attempts is None:
            attempts = sink.ledger.scan(epoch).get(epoch, {})
        won = sink._winner(epoch, attempts)
        steps: list[FinishStep] = []
        if won is None:
            for attempt, rec in attempts.items():
                if not needs_finishing(rec.kinds):
                    continue
                decision = sink._decision(epoch, attempt, rec)
                if isinstance(decision, AbortDecision) \
                        and not kept_for_group(sink, epoch, attempt):
                    steps.append(FinishStep("discard", epoch, attempt, decision.reason))
            return FinishPlan(epoch, None, False, steps, attempts)
        attempt, decision = won
        if PUBLISHED not in attempts[attempt].kinds:
            steps.append(FinishStep("publish", epoch, attempt, "", decision.totals.files,
                                    decision.totals.bytes))
        for other, orec in attempts.items():
            if other >= attempt or orec.kinds & DISPLACED_DONE_KINDS:
                continue
            odecision = sink._decision(epoch, other, orec)
            if odecision is None:
                begin = sink.ledger.get(epoch, other, orec, BEGIN)
                member = isinstance(begin, Begin) and begin.group is not None
                steps.append(FinishStep("leave" if member else "abort", epoch, other,
                                        f"superseded by committed attempt {attempt}"))
            elif isinstance(odecision, AbortDecision):
                steps.append(FinishStep("discard", epoch, other, odecision.reason))
            else:
                steps.append(FinishStep("clean", epoch, other,
                                        f"superseded by committed attempt {attempt}"))
        return FinishPlan(epoch, attempt, needs_finishing(attempts[attempt].kinds), steps,
                          attempts, decision)

    # --------------------------------------------------------------- carry out
    def carry_out(self, plan: FinishPlan, known: Manifest | None = None,
                  rescan: bool = True) -> FinishReport:
        """Do the plan's steps in order.  ``known``: the manifest the caller validated
        staging against and decided moments ago (no second parse or listing when it
        is the winner's)."""
        sink, epoch, attempts = self.sink, plan.epoch, plan.attempts
        done: list[FinishStep] = []
        for step in plan.steps:
            rec = attempts[step.attempt]
            if step.kind == "publish":
                if not self._publish(plan, known):
                    # A higher attempt is already what readers see: it began and
                    # committed after the plan's listing.  Plan again from a fresh one.
                    again = sink.ledger.scan(epoch).get(epoch, {})
                    if not rescan or max(again, default=step.attempt) <= step.attempt:
                        raise LedgerError(
                            f"epoch {epoch}: the published marker names a higher attempt "
                            f"than {step.attempt}, but the ledger holds no higher commit "
                            "(the ledger was lost or damaged). Nothing was changed: readers "
                            "keep the published attempt; restore the ledger, or commit a "
                            "new attempt of the epoch.")
                    attempts.clear()
                    attempts.update(again)
                    report = self.carry_out(self.plan(epoch, attempts), rescan=False)
                    report.replanned = True
                    return report
            elif step.kind == "abort":
                # A group member's is left to its group (group recover aborts it).
                with contextlib.suppress(GroupMemberError):
                    sink._abort(epoch, step.attempt, step.reason, best_effort=True)
            elif step.kind == "discard":
                decision = sink._decision(epoch, step.attempt, rec)
                if not sink._remove_aborted(epoch, step.attempt, decision,  # type: ignore[arg-type]
                                            best_effort=True, group_checked=True):
                    continue
                sink._close(epoch, step.attempt, rec)
            elif step.kind == "clean":
                # A lower commit: its published files went with the swap above; its
                # staging (kept by "manifest" mode or never promoted) goes now, and only
                # then is it marked superseded (a failed clean-up is retried).
                if not sink._clean_staging(epoch, step.attempt):
                    continue
                sink.ledger.create_or_get(epoch, step.attempt, SUPERSEDED,
                                          {"by": plan.winner})
                rec.kinds.add(SUPERSEDED)
            done.append(step)
        return FinishReport(epoch, plan.winner, done)

    def _publish(self, plan: FinishPlan, known: Manifest | None) -> bool:
        """Promote the plan's winner and record ``published.json``; False when a higher
        attempt is already published (the caller plans again)."""
        sink, epoch, attempt, decision = self.sink, plan.epoch, plan.winner, plan.decision
        assert attempt is not None and decision is not None
        rec = plan.attempts[attempt]
        # a group member's copy must be its group's decision (§14.3): never promote one
        # the group did not make
        check_member_commit(sink, epoch, attempt, decision.manifest_digest, rec)
        fresh = known is not None and known.attempt == attempt \
            and known.digest == decision.manifest_digest

        def load() -> Manifest:
            return known if fresh else sink._decided_manifest(  # type: ignore[return-value]
                epoch, attempt, decision)

        if not _promote.promote(sink.layout, epoch, attempt, decision, load,
                                staging_verified=fresh):
            return False
        crashpoint("commit.before_published")
        # A fact, not a decision: a concurrent promoter's record is just as good.
        sink.ledger.create_or_get(epoch, attempt, PUBLISHED, {
            "published_at": time.time(), "txn_id": decision.txn_id,
            "manifest_digest": decision.manifest_digest})
        rec.kinds.add(PUBLISHED)
        return True

    def finish(self, epoch: str, attempts: dict[int, AttemptRecords] | None = None,
               known: Manifest | None = None) -> FinishReport:
        """``carry_out(plan(epoch))``: the real run of what a dry run prints."""
        return self.carry_out(self.plan(epoch, attempts), known)
