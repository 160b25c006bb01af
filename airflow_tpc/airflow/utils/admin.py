"""Operator actions on a target's ledger, shared by the admin DAG and the UI plugin.

Each action returns a JSON-safe dict (it becomes an XCom or an HTTP response), so it
never includes storage options: only ids, states and counts.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from airflow_tpc import InvalidState, Sink, TxnState
from airflow_tpc.tables import history

log = logging.getLogger(__name__)

ACTIONS = ("status", "abort", "recover", "expire")
OPEN_STATES = (TxnState.OPEN, TxnState.PRECOMMITTED)
#: Aborted by an operator or expired: a second abort has nothing to decide.
DONE_STATES = (TxnState.ABORTED, TxnState.EXPIRED)


def status(sink: Sink, epoch: str | None = None) -> dict[str, Any]:
    """Every transaction; a table target named by its URI (its location beside it), each
    commit with the snapshot / version it made (``tables.history``)."""
    return {**history.where(sink), "namespace": sink.namespace,
            "transactions": history.describe(sink, epoch),
            "committed_epochs": sorted(sink.committed_files(
                [epoch] if epoch else None).keys())}


def abort(sink: Sink, epoch: str, attempt: int | None = None,
          reason: str = "aborted by an operator") -> dict[str, Any]:
    """Abort one attempt, or every open/pre-committed attempt of the epoch.

    ``aborted`` lists what this call decided; ``already_aborted`` what an earlier abort
    or expiry had decided, also one that landed while this call ran (the ledger's
    put-if-absent says who was first) — nothing is written for those but the removal of
    staging a crashed abort left; ``refused`` what cannot be aborted (COMMITTED)."""
    if not epoch:
        raise ValueError("abort needs an epoch")
    aborted, already, refused = [], [], []
    for info in sink.describe(epoch):
        if attempt is not None and info.attempt != attempt:
            continue
        if attempt is None and info.state not in OPEN_STATES:
            continue
        if info.state in DONE_STATES and not info.staging_files:
            already.append(info.txn_id)  # decided and clean: nothing to write
            continue
        try:
            txn = sink.transaction(epoch, info.attempt)
            created = sink.abort(txn, reason)
        except InvalidState as exc:
            refused.append({"txn_id": info.txn_id, "error": str(exc)})
            continue
        if _stop_application(sink, epoch, info.attempt):  # after the decision (spark_app)
            sink.abort(txn, reason)  # idempotent: removes what the job wrote meanwhile
        (aborted if created else already).append(info.txn_id)
    return {"action": "abort", "aborted": aborted, "already_aborted": already,
            "refused": refused}


def _stop_application(sink: Sink, epoch: str, attempt: int) -> bool:
    """Stop the application the attempt's runtime record names (run page, admin DAG);
    True when it was alive."""
    from airflow_tpc.airflow.utils.spark_app import stop_recorded

    what = stop_recorded(sink, epoch, attempt)
    if what:
        log.info("%s/%s/%d: %s", sink.namespace, epoch, attempt, what)
    return bool(what and what.startswith("spark application stopped"))


def recover(sink: Sink, abort_undecided: bool = False,
            ignore_failures_after_timeout: bool = False) -> dict[str, Any]:
    report = sink.recover(abort_undecided=abort_undecided,
                          ignore_failures_after_timeout=ignore_failures_after_timeout)
    return {"action": "recover", **report.to_dict()}


def expire(sink: Sink, epoch: str | None = None) -> dict[str, Any]:
    """Abort open/pre-committed attempts older than their transaction timeout, as EXPIRED
    would: they are listed (with what they had pre-committed) before being thrown away."""
    now = time.time()
    expired = []
    for info in sink.describe(epoch):
        txn = sink.transaction(info.epoch, info.attempt)
        if info.state in OPEN_STATES and txn.expired(now):
            sink.abort(txn, f"expired by an operator: {txn.age(now):.0f} s old, timeout "
                            f"{txn.timeout_s:.0f} s (had {info.files} files pre-committed)")
            expired.append(info.txn_id)
    return {"action": "expire", "expired": expired}


def run_action(sink: Sink, action: str, *, epoch: str | None = None, attempt: int | None = None,
               reason: str = "aborted by an operator", abort_undecided: bool = False
               ) -> dict[str, Any]:
    if action not in ACTIONS:
        raise ValueError(f"unknown action {action!r}; one of {ACTIONS}")
    if action == "status":
        return status(sink, epoch or None)
    if action == "abort":
        return abort(sink, epoch or "", attempt, reason)
    if action == "recover":
        return recover(sink, abort_undecided=abort_undecided)
    return expire(sink, epoch or None)
