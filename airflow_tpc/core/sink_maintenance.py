"""Maintenance of a sink's target: recover (Flink's restore) and gc.

Recover lists the whole ledger once: it rolls every decided commit forward, aborts
what is stale (superseded or past its timeout), brings the pending index up to date
and removes the staging that finished transactions left.  gc does only the last.
Both act on the word of records that check out: an epoch with a damaged record is
left exactly as it is.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from ..errors import LedgerError, TpcError
from . import promote as _promote
from .faults import crashpoint
from .ledger import AttemptRecords, epoch_sort_key
from .records import (
    ABANDONED,
    BEGIN,
    DECISION,
    PUBLISHED,
    SUPERSEDED,
    AbortDecision,
    Begin,
    CommitDecision,
    needs_finishing,
)
from .sink_finish import SinkFinish
from .transaction import RecoveryReport

#: ``progress(epoch, k, n)``: a long verb reached the k-th of its n epochs.
Progress = Callable[[str, int, int], None]

log = logging.getLogger("airflow_tpc")


class SinkMaintenance(SinkFinish):
    """``recover`` and ``gc``: the verbs run when no single transaction is in hand."""

    # ---------------------------------------------------------------- recover
    def recover(self, *, ignore_failures_after_timeout: bool = False,
                abort_undecided: bool = False, now: float | None = None,
                progress: Progress | None = None, dry_run: bool = False) -> RecoveryReport:
        """Flink's restore: roll every decided commit forward, abort what is stale.

        Stale means superseded by a higher attempt or past the transaction timeout.
        ``abort_undecided=True`` is Flink's ``recoverAndAbort``: use it when no writer
        of the target can still be alive (the pipeline restarted) — every attempt
        without a decision is aborted, pre-committed or not.  Every pre-committed
        attempt thrown away is named in a WARNING.

        Raises :class:`TpcError` (with ``.report``) if a decided commit still cannot be
        carried out, or a ledger record of an epoch is damaged, so the failure
        surfaces on every restore; such an epoch is left exactly as it is.  With
        ``ignore_failures_after_timeout`` a commit that keeps failing is given up —
        loudly — once it is past its timeout (never on a damaged record).
        ``progress(epoch, k, n)`` is called as each of the n epochs is reached.

        ``dry_run=True`` reads what recover reads and writes nothing: the report says
        which decided commits it would roll forward, which attempts it would abort
        (the undecided ones below a winning commit too, as ``superseded``) and which
        finished attempts' staging it would remove; ``report.dry_run`` is set.
        """
        self._check_claim("recover")
        now = time.time() if now is None else now
        report = RecoveryReport(dry_run=dry_run)
        scan = self.ledger.scan()
        damaged: set[str] = set()
        lost = self._report_lost_group_attempts(scan, report)
        for k, epoch in enumerate(sorted(scan, key=epoch_sort_key), 1):
            if progress is not None:
                progress(epoch, k, len(scan))
            attempts = scan[epoch]
            try:
                self._check_published_claims(epoch, attempts)
                won = self._finish_epoch_recording(epoch, attempts, report, dry_run)
            except LedgerError as exc:
                log.error("recover leaves epoch %s of %s untouched: %s", epoch, self.target, exc)
                report.errors.append((epoch, -1, str(exc)))
                damaged.add(epoch)
                continue
            except TpcError as exc:
                self._commit_failed(epoch, attempts, exc, report, now,
                                    ignore_failures_after_timeout)
                continue
            top = max(attempts)
            for attempt in sorted(attempts):
                rec = attempts[attempt]
                if DECISION in rec.kinds:
                    continue
                if won is not None and attempt < won:
                    continue  # handled by _finish_epoch
                crashpoint("recover.before_abort")
                begin = self.ledger.get(epoch, attempt, rec, BEGIN)
                started = begin.started_at if isinstance(begin, Begin) else now
                timeout = begin.timeout_s if isinstance(begin, Begin) else self.config.timeout_s
                abort = self._abort if not dry_run else _no_abort
                if self._is_member(epoch, attempt, rec):
                    log.info("%s/%s/%d is undecided and a member of group %s: its group's "
                             "recover decides it", self.namespace, epoch, attempt,
                             begin.group["uri"])
                    continue
                if attempt < top:
                    abort(epoch, attempt, f"superseded by attempt {top}")
                    report.aborted.append((epoch, attempt, "superseded"))
                elif abort_undecided:
                    abort(epoch, attempt, "undecided at restore (abort_undecided)")
                    report.aborted.append((epoch, attempt, "restore"))
                elif now - started > timeout:
                    abort(epoch, attempt, f"expired after {now - started:.0f} s (timeout "
                          f"{timeout:.0f} s)", expired=True)
                    report.aborted.append((epoch, attempt, "expired"))
                elif now - started > self.config.warn_fraction * timeout:
                    log.warning("%s/%s/%d is %.0f s old (timeout %.0f s)", self.namespace,
                                epoch, attempt, now - started, timeout)
        # Bring the pending index up to date with this full listing (and build it on a
        # target written before it existed), so commits list only unfinished work.
        if not dry_run:
            self.ledger.sync_pending(scan, self.ledger.pending(), skip=damaged)
        crashpoint("recover.before_cleanup")
        report.cleaned = self._clean_finished_staging(scan, skip=damaged, dry_run=dry_run)
        if report.errors:
            first = report.errors[0]
            failed = len(report.errors) - len(damaged) - lost
            what = [f"could not finish {failed} decided commit(s)"] if failed else []
            if lost:
                what.append(f"found {lost} member attempt(s) whose group folder does not "
                            "hold them (their group cannot decide them)")
            if damaged:
                what.append(f"left {len(damaged)} epoch(s) with damaged ledger records untouched")
            err = TpcError(f"recover of {self.target} {' and '.join(what)}; first: epoch "
                           f"{first[0]}" + (f" attempt {first[1]}" if first[1] > 0 else "") +
                           f": {first[2]}. Nothing was lost: decisions and staged files are "
                           "kept and the next recover retries.")
            err.report = report  # type: ignore[attr-defined]
            raise err
        return report

    def _report_lost_group_attempts(self, scan: dict[str, dict[int, AttemptRecords]],
                                    report: RecoveryReport) -> int:
        """Each undecided member attempt whose group folder lost it is an error of this
        recover (it is left undecided: only its group decides it), so the loss surfaces
        on every restore instead of the decided commit vanishing without a word."""
        lost = self.lost_group_attempts(scan=scan)
        for item in lost:
            log.error("recover of %s: %s", self.target, item.problem)
            report.errors.append((item.epoch, item.attempt, item.problem))
        return len(lost)

    def _finish_epoch_recording(self, epoch: str, attempts: dict[int, AttemptRecords],
                                report: RecoveryReport, dry_run: bool) -> int | None:
        """Finish the epoch through the finisher (:mod:`airflow_tpc.core.finisher`); a dry run
        plans it and carries nothing out: one list of branches for both.  The report
        gets the winner rolled forward, the finishing steps (planned, or done), and in
        a dry run the undecided attempts below the winner it would abort."""
        plan = self.finisher.plan(epoch, attempts)
        if dry_run:
            if plan.rolls_forward:
                report.rolled_forward.append((epoch, plan.winner))  # type: ignore[arg-type]
            report.aborted.extend((epoch, s.attempt, "superseded")
                                  for s in sorted(plan.steps, key=lambda s: s.attempt)
                                  if s.kind == "abort")
            report.finishing.extend(plan.steps)
            return plan.winner
        pending = {a for a, r in attempts.items() if needs_finishing(r.kinds)}
        done = self.finisher.carry_out(plan)
        if done.winner is not None and done.winner in pending:
            report.rolled_forward.append((epoch, done.winner))
        report.finishing.extend(done.done)
        return done.winner

    def _is_member(self, epoch: str, attempt: int, rec: AttemptRecords) -> bool:
        """Whether the attempt belongs to a group (decided only by its group)."""
        begin = self.ledger.get(epoch, attempt, rec, BEGIN)
        return isinstance(begin, Begin) and begin.group is not None

    def _commit_failed(self, epoch: str, attempts: dict[int, AttemptRecords], exc: Exception,
                       report: RecoveryReport, now: float, ignore: bool) -> None:
        won = self._winner(epoch, attempts)
        attempt = won[0] if won else -1
        begin = self.ledger.get(epoch, attempt, attempts[attempt], BEGIN) if won else None
        started = begin.started_at if isinstance(begin, Begin) else now
        timeout = begin.timeout_s if isinstance(begin, Begin) else self.config.timeout_s
        if ignore and won and now - started > timeout:
            log.error("GIVING UP the commit of %s/%s/%d after its %.0f s timeout "
                      "(ignore_failures_after_timeout=True): POSSIBLE DATA LOSS — its output "
                      "is not published. Last error: %s", self.namespace, epoch, attempt,
                      timeout, exc)
            self.ledger.create(epoch, attempt, ABANDONED, {"at": now, "error": str(exc)})
            attempts[attempt].kinds.add(ABANDONED)
            report.abandoned.append((epoch, attempt, str(exc)))
            return
        log.error("recover could not finish the commit of %s/%s/%d: %s", self.namespace, epoch,
                  attempt, exc)
        report.errors.append((epoch, attempt, str(exc)))

    def _check_published_claims(self, epoch: str, attempts: dict[int, AttemptRecords]) -> None:
        """Recover does not take ``published.json`` on trust: if the marker does not name
        that attempt (or a higher one), the claim is dropped and the commit is promoted
        again (promotion is idempotent and re-verifies staging).  Also refuses to treat
        the attempt readers see as undecided when its decision record is lost."""
        marker = _promote.read_marker(self.layout, epoch, files=False)
        seen = marker["attempt"] if marker else 0
        for attempt, rec in attempts.items():
            if PUBLISHED in rec.kinds and attempt > seen \
                    and not rec.kinds & {SUPERSEDED, ABANDONED}:
                log.warning("epoch %s attempt %d: published.json is there but the published "
                            "marker names attempt %s; promoting it again", epoch, attempt,
                            seen or "none")
                rec.kinds.discard(PUBLISHED)
            if attempt == seen and DECISION not in rec.kinds:
                decision = self.ledger.read(epoch, attempt, DECISION)
                if decision is not None:  # decided after our listing (a live committer)
                    rec.kinds.add(DECISION)
                    rec.docs[DECISION] = decision
                    continue
                raise LedgerError(
                    f"epoch {epoch}: readers see attempt {attempt}, but its decision record "
                    f"{self.storage.uri(self.layout.record(epoch, attempt, DECISION))} is "
                    "missing (the ledger was damaged); it is never treated as undecided. "
                    "Nothing was changed; restore the record, or commit a new attempt.")

    # --------------------------------------------------------------------- gc
    def gc(self, *, progress: Progress | None = None,
           dry_run: bool = False) -> list[tuple[str, int]]:
        """Remove staging of finished transactions (what recover cleans, without the rest).
        ``progress(epoch, k, n)`` is called as each of the n staged epochs is reached;
        ``dry_run=True`` removes nothing and returns what it would remove."""
        self._check_claim("gc")
        return self._clean_finished_staging(self.ledger.scan(), progress=progress,
                                            dry_run=dry_run)

    def _clean_finished_staging(self, scan: dict[str, dict[int, AttemptRecords]],
                                skip: set[str] = frozenset(),  # type: ignore[assignment]
                                progress: Progress | None = None,
                                dry_run: bool = False) -> list[tuple[str, int]]:
        """Remove staging left by finished transactions (e.g. a zombie's late writes).

        Only on the word of records that check out: an epoch with a damaged record
        (``skip``, or found here) keeps all of its staging.  ``dry_run``: only say which.
        """
        cleaned = []
        staged = _promote.staging_dirs(self.layout)
        for k, (epoch, attempts) in enumerate(sorted(staged.items(),
                                                     key=lambda e: epoch_sort_key(e[0])), 1):
            if progress is not None:
                progress(epoch, k, len(staged))
            if epoch in skip:
                continue
            known = scan.get(epoch, {})
            for attempt in attempts:
                rec = known.get(attempt)
                if rec is None or DECISION not in rec.kinds:
                    continue  # unknown (begin in flight) or still open: not ours to remove
                try:
                    decision = self._decision(epoch, attempt, rec)
                except LedgerError as exc:
                    log.error("staging of %s/%s/%d kept: %s", self.namespace, epoch, attempt,
                              exc)
                    break
                keep = False
                if isinstance(decision, CommitDecision):
                    # the live output of "manifest" mode, or a commit still to be promoted
                    keep = (decision.mode == "manifest"
                            and not rec.kinds & {SUPERSEDED, ABANDONED}) \
                        or not rec.kinds & {PUBLISHED, SUPERSEDED}
                if isinstance(decision, CommitDecision) and not keep \
                        and SUPERSEDED not in rec.kinds and not self._marker_at_least(epoch,
                                                                                     attempt):
                    # published.json says done, the marker disagrees: never delete on it.
                    log.error("staging of %s/%s/%d kept: the ledger says it was published, "
                              "but the published marker names no attempt at or above it",
                              self.namespace, epoch, attempt)
                    keep = True
                if not keep and isinstance(decision, AbortDecision):
                    try:  # a group member's is kept unless its group decided abort
                        keep = self._kept_for_group(epoch, attempt)
                    except LedgerError as exc:
                        log.error("staging of %s/%s/%d kept: %s", self.namespace, epoch,
                                  attempt, exc)
                        keep = True
                if not keep and dry_run:
                    cleaned.append((epoch, attempt))
                elif not keep:
                    if isinstance(decision, AbortDecision):
                        self._remove_aborted(epoch, attempt, decision, best_effort=False,
                                             group_checked=True)
                        self._close(epoch, attempt, rec)
                    else:
                        self.layout.remove_staging(epoch, attempt)
                    cleaned.append((epoch, attempt))
        return cleaned

    def _marker_at_least(self, epoch: str, attempt: int) -> bool:
        marker = _promote.read_marker(self.layout, epoch, files=False)
        return marker is not None and marker["attempt"] >= attempt


def _no_abort(epoch: str, attempt: int, reason: str, expired: bool = False) -> None:
    """Stands in for :meth:`Sink._abort` in recover's dry run: nothing is written."""
