"""A group's maintenance and read-only queries (``airflow_tpc.group``), apart from the
protocol's verbs: :meth:`recover` (Flink's restore: finish every decided group attempt
on every member, abort the stale undecided ones) and the questions readers and waiting
tasks ask (:meth:`poll`, :meth:`stable_epochs`, :meth:`committed_files`).
"""

from __future__ import annotations

import logging
import time

from ..core.faults import crashpoint
from ..core.finisher import FinishStep
from ..core.group_records import (
    GroupAbort,
    GroupCommit,
    GroupLedger,
    GroupRecoveryReport,
    GroupStatus,
    GroupTransaction,
)
from ..core.layout import epoch_sort_key
from ..core.ledger import AttemptRecords
from ..core.records import BEGIN, CLOSED, DECISION, PUBLISHED, Begin
from ..core.sink import Sink
from ..errors import InvalidState, TpcError
from .cut import MovedOn, consistent_cut

log = logging.getLogger("airflow_tpc")


class GroupMaintenance:
    """Mixed into :class:`~airflow_tpc.group.Group`, which provides what is declared
    here: its ledger and members, and the two steps recover repeats."""

    uri: str
    namespace: str
    sinks: dict[str, Sink]
    ledger: GroupLedger

    def _decide_abort(self, epoch: str, attempt: int, reason: str,
                      expired: bool = False) -> bool:
        raise NotImplementedError

    def _finish(self, epoch: str, attempt: int, rec: AttemptRecords) -> None:
        raise NotImplementedError

    def _claim(self, create: bool = False) -> None:
        raise NotImplementedError

    # ---------------------------------------------------------------- recover
    def recover(self, *, abort_undecided: bool = False, now: float | None = None,
                ignore_failures_after_timeout: bool = False,
                dry_run: bool = False) -> GroupRecoveryReport:
        """Finish every decided group attempt on every member; abort the undecided ones
        that are superseded, expired, or (``abort_undecided``) all of them; then each
        member's own recover (its other epochs, staging left behind).

        First of all, the members are checked against ``group.json`` (names and
        targets): a Group given a subset of them, or another target under a member's
        name, is refused before anything is written.

        ``dry_run=True`` writes nothing: the report (``dry_run`` set) names the attempts
        it would roll forward and abort, and in ``finishing`` the steps on the members
        (``switch``/``abort`` per member) the real recover then reports done; each
        member's own recover runs as a dry run too (only its errors are reported)."""
        self._claim()
        now = time.time() if now is None else now
        report = GroupRecoveryReport(dry_run=dry_run)
        scan = self.ledger.scan()
        for epoch in sorted(scan, key=epoch_sort_key):
            attempts = scan[epoch]
            top = max(attempts)
            for attempt in sorted(attempts):
                rec = attempts[attempt]
                if rec.kinds & {PUBLISHED, CLOSED}:
                    continue
                try:
                    if DECISION not in rec.kinds:
                        why = self._why_abort(epoch, attempt, rec, top, abort_undecided, now)
                        if why is None:
                            continue
                        if dry_run:
                            report.aborted.append((epoch, attempt, why))
                            report.finishing.extend(self._abort_steps(epoch, attempt))
                            continue
                        try:
                            self._decide_abort(epoch, attempt, f"{why} (group recover)",
                                               expired=why == "expired")
                            report.aborted.append((epoch, attempt, why))
                        except InvalidState:
                            pass  # a live committer decided commit meanwhile: finish it
                        rec.kinds.add(DECISION)
                    decision = self.ledger.get(epoch, attempt, rec, DECISION)
                    if isinstance(decision, GroupCommit):
                        report.rolled_forward.append((epoch, attempt))
                    steps = [FinishStep("switch", epoch, attempt, f"member {n}")
                             for n in sorted(decision.members)] \
                        if isinstance(decision, GroupCommit) \
                        else self._abort_steps(epoch, attempt)
                    if not dry_run:
                        self._finish(epoch, attempt, rec)
                    report.finishing.extend(steps)
                except TpcError as exc:
                    log.error("group recover could not finish %s/%s/%d: %s", self.namespace,
                              epoch, attempt, exc)
                    report.errors.append((epoch, attempt, str(exc)))
        if scan and not dry_run:  # nothing to index: never recreate a lost group folder
            # Epochs left with an error are left exactly as they are (pending index too).
            self.ledger.sync_pending(scan, self.ledger.pending(),
                                     skip={str(e) for e, _, _ in report.errors})
        for name, sink in self.sinks.items():
            try:
                sink.recover(now=now, ignore_failures_after_timeout=ignore_failures_after_timeout,
                             dry_run=dry_run)
            except TpcError as exc:
                report.errors.append((name, -1, str(exc)))
        if report.errors:
            first = report.errors[0][2].rstrip(".")
            err = TpcError(f"recover of group {self.uri} left {len(report.errors)} problem(s); "
                           f"first: {first}. Nothing was lost: the next recover retries.")
            err.report = report  # type: ignore[attr-defined]
            raise err
        return report

    def _abort_steps(self, epoch: str, attempt: int) -> list[FinishStep]:
        """A group abort's steps: each member that began the attempt (what
        ``_abort_members`` carries it out on); read only."""
        steps = []
        for name, sink in self.sinks.items():
            begin = sink.ledger.read(epoch, attempt, BEGIN)
            if isinstance(begin, Begin) and begin.group is not None \
                    and begin.group.get("uri", "").rstrip("/") == self.uri:
                steps.append(FinishStep("abort", epoch, attempt, f"member {name}"))
        return steps

    def _why_abort(self, epoch: str, attempt: int, rec: AttemptRecords, top: int,
                   abort_undecided: bool, now: float) -> str | None:
        """Why recover aborts an undecided group attempt, or None to leave it open."""
        if attempt < top:
            return "superseded"
        if abort_undecided:
            return "restore"
        begin = self.ledger.get(epoch, attempt, rec, BEGIN)
        if not isinstance(begin, GroupTransaction) or now - begin.started_at > begin.timeout_s:
            return "expired"
        return None

    # ---------------------------------------------------------------- readers
    def poll(self, gtxn: GroupTransaction) -> GroupStatus:
        """The cheap question a waiting task asks: one listing of the epoch's group
        ledger, and the attempt's decision if it has one."""
        attempts = self.ledger.scan(gtxn.epoch).get(gtxn.epoch, {})
        rec = attempts.get(gtxn.attempt, AttemptRecords())
        decision = self.ledger.get(gtxn.epoch, gtxn.attempt, rec, DECISION)
        return GroupStatus(decision.outcome if decision is not None else None,
                           max(attempts, default=gtxn.attempt), PUBLISHED in rec.kinds,
                           decision.reason if isinstance(decision, GroupAbort) else None)

    def stable_epochs(self) -> dict[str, int]:
        """epoch -> the group attempt every member publishes: the group's winning
        (highest) commit, once ``published.json`` says every member switched AND every
        member's own winning attempt of the epoch is still that one.  An epoch whose
        newest commit is still switching, or where a member moved on (another group or
        a single-target commit re-committed it), is left out (PROTOCOL §14.4)."""
        return consistent_cut(self.ledger, self.sinks)[0]

    def moved_on(self) -> list[MovedOn]:
        """The members that keep a published epoch out of the cut: each one's winning
        attempt of the epoch, and whether another group or a single-target commit made
        it (what ``airflow-tpc group status`` shows)."""
        return consistent_cut(self.ledger, self.sinks)[1]

    def committed_files(self) -> dict[str, dict[str, list[str]]]:
        """member -> epoch -> file URIs, for the stable epochs only, read as one cut: an
        epoch whose cut changed while the members were read (a re-run switching, or a
        member re-committed meanwhile) is left out rather than shown half old, half new.
        (A member's files change only after a commit decision on it, which the second
        look sees.)"""
        before = self.stable_epochs()
        files = {name: sink.committed_files(list(before))
                 for name, sink in self.sinks.items()}
        crashpoint("group.cut.between_looks")  # tests: a member re-committed mid-read
        after = self.stable_epochs()
        cut = {e for e, a in before.items() if after.get(e) == a
               and all(e in per_epoch for per_epoch in files.values())}
        return {name: {e: f for e, f in per_epoch.items() if e in cut}
                for name, per_epoch in files.items()}

