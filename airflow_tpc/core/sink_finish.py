"""After the decision: finishing an epoch, rolling forward, and the abort decision.

Everything here is idempotent and is finished by whoever comes next — a retried
commit, the commit of a later epoch, or recover.  Decisions are read back checked
(:meth:`SinkFinish._decision`); the highest commit of an epoch wins
(:meth:`SinkFinish._winner`) and is promoted (:mod:`airflow_tpc.core.promote`), and the
attempts it displaced are aborted, closed or marked superseded once their staging
is gone.  An abort is one put-if-absent decision, then its staging is removed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import GroupMemberError, InvalidState, LedgerError, ManifestError, StorageError
from .faults import crashpoint
from .finisher import Finisher
from .ledger import AttemptRecords, epoch_sort_key
from .manifest import MANIFEST_NAME, Manifest
from .member_guard import kept_for_group
from .records import (
    ABANDONED,
    BEGIN,
    CLOSED,
    DECISION,
    FINISHED_KINDS,
    PUBLISHED,
    AbortDecision,
    Begin,
    CommitDecision,
    Decision,
    needs_finishing,
)
from .sink_claim import SinkClaim

log = logging.getLogger("airflow_tpc")


@dataclass(frozen=True)
class PendingSoon:
    """The pending index being listed since a commit's decision, and the epoch's
    attempts already finished when it was started."""

    listed: Callable[[], dict[str, set[int]] | None]
    finished: frozenset[int]


class SinkFinish(SinkClaim):
    """The steps after an attempt is decided, shared by commit, a group's commit,
    recover and the queries (which read decisions the same checked way)."""

    # -------------------------------------------------------------- decisions
    def _decision(self, epoch: str, attempt: int, rec: AttemptRecords) -> Decision | None:
        """The attempt's decision, checked against its path and its begin record.

        The ledger checks epoch, attempt, target and staging; the namespace a commit
        decision names must also be the one its transaction began with.
        """
        decision = self.ledger.get(epoch, attempt, rec, DECISION)
        if not isinstance(decision, CommitDecision):
            return decision  # type: ignore[return-value]
        begin = self.ledger.get(epoch, attempt, rec, BEGIN)
        if isinstance(begin, Begin) and decision.namespace != begin.namespace:
            raise LedgerError(
                f"ledger record {self.storage.uri(self.layout.record(epoch, attempt, DECISION))}"
                f" commits a manifest of namespace {decision.namespace!r}, but attempt {attempt} "
                f"of epoch {epoch} began in namespace {begin.namespace!r}; it was copied from "
                "elsewhere or edited. Nothing was promoted or deleted on its account.")
        return decision

    def _winner(self, epoch: str, attempts: dict[int, AttemptRecords]
                ) -> tuple[int, CommitDecision] | None:
        """The highest attempt of the epoch decided as commit (and not abandoned)."""
        for attempt in sorted(attempts, reverse=True):
            rec = attempts[attempt]
            if ABANDONED in rec.kinds:
                continue
            decision = self._decision(epoch, attempt, rec)
            if isinstance(decision, CommitDecision):
                return attempt, decision
        return None

    def _decided_manifest(self, epoch: str, attempt: int, decision: CommitDecision) -> Manifest:
        """The manifest a commit decision names: embedded (version 1 records) or the one
        sealed in staging, which must have exactly the decided digest."""
        where = f"decision of {self.namespace}/{epoch}/{attempt}"
        staging_uri = self.storage.uri(self.layout.staging(epoch, attempt))
        if decision.embedded is not None:
            manifest = Manifest.parse(decision.embedded, where=where)
        else:
            self.layout.check_staging(epoch, attempt)
            seal = self.layout.sealed(epoch, attempt)
            raw = self.storage.read_bytes(self.storage.join(seal, MANIFEST_NAME))
            if raw is None:
                raise ManifestError(
                    f"cannot promote epoch {epoch} attempt {attempt}: its sealed manifest "
                    f"{self.storage.uri(seal)}/{MANIFEST_NAME} is gone although the commit "
                    f"was decided (digest {decision.manifest_digest}); staging was changed outside "
                    "airflow-tpc. Restore it and run recover again.")
            manifest = Manifest.parse(raw, where=f"sealed manifest of {epoch}/{attempt}")
        if manifest.digest != decision.manifest_digest:
            raise ManifestError(
                f"cannot promote epoch {epoch} attempt {attempt}: its sealed manifest has digest "
                f"{manifest.digest}, but the decision commits {decision.manifest_digest}; it "
                "changed after the commit was decided. Nothing was published or deleted.")
        manifest.check_transaction(namespace=decision.namespace, target=self.target,
                                   epoch=epoch, attempt=attempt, staging=staging_uri)
        return manifest

    # ---------------------------------------------------------- finish epoch
    @property
    def finisher(self) -> Finisher:
        """The seam between deciding and finishing (:mod:`airflow_tpc.core.finisher`): plans
        an epoch's roll-forward and carries it out; every finishing path uses it."""
        return Finisher(self)

    def _finish_epoch(self, epoch: str, attempts: dict[int, AttemptRecords],
                      known: Manifest | None = None) -> int | None:
        """Roll the epoch forward to its winning commit and clean what it displaced
        (``finisher.carry_out(finisher.plan(...))``); the winner, None without one.

        ``known``: the manifest this call validated staging against and decided
        moments ago; reused (no second parse, no second listing) when it is the
        winner's.  Attempts whose records say they are finished are not read.
        """
        return self.finisher.finish(epoch, attempts, known).winner

    def _list_pending_soon(self, attempts: dict[int, AttemptRecords]) -> PendingSoon:
        """Start listing the pending index for :meth:`_roll_forward_pending` now, once
        the epoch's decision is known: the listing then runs beside its promotion (a
        read, on no write's path) instead of after it."""
        return PendingSoon(self.ledger.pending_soon(), frozenset(
            a for a, r in attempts.items() if r.kinds & FINISHED_KINDS))

    def _roll_forward_pending(self, epoch: str, attempts: dict[int, AttemptRecords],
                              soon: PendingSoon | None = None) -> list[tuple[str, int]]:
        """After a commit of ``epoch``: finish every other epoch the pending index names.

        One listing of the index and one of each epoch it names, so the cost follows
        unfinished work, not history.  Entries of finished (or unknown) attempts are
        dropped on the way.  A target without a complete index (written before it
        existed) gets one full scan, after which the index is built.

        ``soon``: the index as listed since the decision (:meth:`_list_pending_soon`).
        Each epoch it names is listed afresh here, after the promotion, as before, so
        only an entry written meanwhile by another writer is missed (that writer, the
        next commit or recover finishes it); and an entry of this epoch's attempts
        finished since it was started was just removed by this call, not again.
        """
        listed = soon.listed() if soon is not None else self.ledger.pending()
        done_here = {a for a, r in attempts.items() if r.kinds & FINISHED_KINDS} \
            - soon.finished if soon is not None else set()
        if listed is None:
            scan = self.ledger.scan()
            scan[epoch] = attempts
            rolled = self._roll_forward(scan, skip={epoch})
            self.ledger.sync_pending(scan, self.ledger.pending() or {})
            return rolled
        scan = {epoch: attempts}
        for other in listed:
            if other != epoch:
                scan[other] = self.ledger.scan(other).get(other, {})
        rolled = self._roll_forward(scan, skip={epoch})
        for other, numbers in listed.items():
            known = scan[other]
            for attempt in numbers:
                if other == epoch and attempt in done_here:
                    continue  # removed by this call after the index was listed
                rec = known.get(attempt)
                # Unknown to a listing made after the index was: never a live attempt
                # (entries follow begin.json).  This epoch was listed before, so an
                # attempt unknown here may have begun since: left to the next commit.
                if (rec is None and other != epoch) or (rec and rec.kinds & FINISHED_KINDS):
                    self.ledger.unmark_pending(other, attempt)
        return rolled

    def _roll_forward(self, scan: dict[str, dict[int, AttemptRecords]],
                      skip: set[str] = frozenset()  # type: ignore[assignment]
                      ) -> list[tuple[str, int]]:
        """Finish every epoch with a decided-but-unfinished attempt (lost notifications).

        Which epochs need it is judged from the listing alone (:func:`needs_finishing`),
        so finished history costs no reads.
        """
        done = []
        for epoch in sorted(scan, key=epoch_sort_key):
            if epoch in skip:
                continue
            attempts = scan[epoch]
            pending = {a for a, r in attempts.items()
                       if needs_finishing(r.kinds) and PUBLISHED not in r.kinds}
            if not pending:
                continue
            won = self._finish_epoch(epoch, attempts)
            if won is not None and won in pending:
                log.warning("rolled forward epoch %s attempt %d: its commit was decided but "
                            "not carried out", epoch, won)
                done.append((epoch, won))
        return done

    # ------------------------------------------------------------------ abort
    def _abort(self, epoch: str, attempt: int, reason: str, expired: bool = False,
               best_effort: bool = False, by_group: bool = False) -> bool:
        """Record the abort decision, then remove staging (``best_effort``: see
        :meth:`_clean_staging`; an explicit abort raises, so its caller retries).
        A group member's attempt is aborted only ``by_group`` (its group decided so):
        otherwise :class:`GroupMemberError`, and nothing is written.

        Throwing away a complete pre-committed attempt is never quiet: a WARNING
        names what is discarded (see :meth:`_discarded`).
        """
        begin = self.ledger.read(epoch, attempt, BEGIN)
        if isinstance(begin, Begin) and begin.group is not None and not by_group \
                and self.ledger.read(epoch, attempt, DECISION) is None:
            raise GroupMemberError(
                f"abort refused for {self.namespace}/{epoch}/{attempt}: it is member "
                f"{begin.group['member']!r} of group transaction {begin.group['uri']}, "
                "decided only with its group: abort the group (airflow_tpc.group.Group.abort)")
        if isinstance(begin, Begin) and begin.group is not None and not by_group \
                and isinstance(self.ledger.read(epoch, attempt, DECISION), AbortDecision) \
                and self._kept_for_group(epoch, attempt):
            raise GroupMemberError(
                f"abort refused for {self.namespace}/{epoch}/{attempt}: it is member "
                f"{begin.group['member']!r} of group transaction {begin.group['uri']}, whose "
                "ledger does not confirm its abort from here: abort or recover the group")
        doc = AbortDecision(reason, expired, time.time()).to_doc(
            begin.namespace if isinstance(begin, Begin) else self.namespace, self.target,
            epoch, attempt)
        crashpoint("abort.before_decision")
        winner = self.ledger.read(epoch, attempt, DECISION)
        if isinstance(winner, CommitDecision):  # refused before anything is written
            raise InvalidState(f"cannot abort {self.namespace}/{epoch}/{attempt}: it is "
                               "COMMITTED (use a new run of the epoch to replace its output)")
        sealed = self._discarded(epoch, attempt)
        created, winner = self.ledger.create_or_get(epoch, attempt, DECISION, doc)
        if isinstance(winner, CommitDecision):
            raise InvalidState(f"cannot abort {self.namespace}/{epoch}/{attempt}: it is "
                               "COMMITTED (use a new run of the epoch to replace its output)")
        if created and sealed:
            log.warning("DISCARDING %s/%s/%d, PRE-COMMITTED %s: %s. That output is never "
                        "published.", self.namespace, epoch, attempt, sealed, reason)
        crashpoint("abort.after_decision")
        if best_effort:
            cleaned = self._clean_staging(epoch, attempt)
        else:
            self.layout.remove_staging(epoch, attempt)
            cleaned = True
        crashpoint("abort.after_cleanup")
        if cleaned:
            self._close(epoch, attempt)
        if created:
            log.info("aborted %s/%s/%d: %s", self.namespace, epoch, attempt, reason)
        return created

    def _discarded(self, epoch: str, attempt: int) -> str:
        """What an abort of (epoch, attempt) throws away, if it was pre-committed: the
        file count, bytes, digest and first file names; "" if it was not sealed."""
        try:
            self.layout.check_staging(epoch, attempt)
            raw = self.storage.read_bytes(self.storage.join(self.layout.sealed(epoch, attempt),
                                                            MANIFEST_NAME))
        except StorageError as exc:
            return f"(its staging cannot be inspected: {exc})"
        if raw is None:
            return ""
        try:
            m = Manifest.parse(raw)
        except ManifestError:
            return "(its staged manifest is invalid)"
        first = ", ".join(f.path for f in m.files[:3]) + (", ..." if len(m.files) > 3 else "")
        return (f"({m.total_files} files, {m.total_bytes} bytes, digest {m.digest}"
                + (f"; files {first})" if first else ")"))

    def _remove_aborted(self, epoch: str, attempt: int, decision: AbortDecision,
                        best_effort: bool, group_checked: bool = False) -> bool:
        """Remove the staging of an attempt aborted earlier.  If it still holds a sealed
        manifest (an abort whose cleanup died, or a damaged ledger), say so: pre-committed
        data is never thrown away without a WARNING naming it.  A group member's is kept
        unless its group's ledger confirms the group did not decide commit
        (:meth:`_kept_for_group`; ``group_checked``: the caller settled that, or a
        higher commit of the epoch won here); False when kept."""
        if not group_checked and self._kept_for_group(epoch, attempt):
            return False
        sealed = self._discarded(epoch, attempt)  # "" when nothing sealed is left
        if sealed:
            log.warning("DISCARDING %s/%s/%d, PRE-COMMITTED %s: it was aborted earlier "
                        "(%s). That output is never published.", self.namespace, epoch,
                        attempt, sealed, decision.reason)
        if best_effort:
            return self._clean_staging(epoch, attempt)
        self.layout.remove_staging(epoch, attempt)
        return True

    def _kept_for_group(self, epoch: str, attempt: int) -> bool:
        """:func:`~airflow_tpc.core.member_guard.kept_for_group`: never remove the staging of
        a group member whose group decided commit."""
        return kept_for_group(self, epoch, attempt)

    def _clean_staging(self, epoch: str, attempt: int) -> bool:
        """Remove a displaced attempt's staging; a failure is logged, not raised.

        The attempt's fate is already recorded; only its files remain.  Its fenced
        job may still be writing there (Spark task committers create folders and
        files until the job dies), so removal can fail or the folder can come back.
        That must not fail the commit that displaced it: the next commit of the
        epoch, ``recover`` or ``gc`` removes what is left.
        """
        try:
            self.layout.remove_staging(epoch, attempt)
            return True
        except StorageError as exc:
            log.warning("staging of %s/%s/%d not removed yet (%s); a later commit of the "
                        "epoch, recover or gc removes it", self.namespace, epoch, attempt, exc)
            return False

    def _close(self, epoch: str, attempt: int, rec: AttemptRecords | None = None) -> None:
        """Record that an aborted attempt is finished (its staging is gone), so later
        commits skip it without reading its decision."""
        self.ledger.create_or_get(epoch, attempt, CLOSED, {"closed_at": time.time()})
        if rec is not None:
            rec.kinds.add(CLOSED)
