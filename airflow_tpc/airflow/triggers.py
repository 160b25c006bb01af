"""PrecommitTrigger: waits for a pre-commit manifest in the triggerer, holding no worker slot.

Its kwargs are stored in the metadata DB, so they carry only public data: the
transaction (no secrets in it), the target, public storage options and the *name*
of the credentials connection, resolved inside the triggerer.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_tpc.airflow.hooks import TpcHook


def sealed_manifest(sink: Any, txn: Any) -> Any:
    """The attempt's manifest while staged; after the commit, its digest and totals."""
    return sink.sealed(txn)


def check_precommit(hook: TpcHook, txn_doc: dict[str, Any]) -> tuple[str, str]:
    """One look at storage: ("ready"|"waiting"|"failed", message).  Blocking.

    Failure signals are the ledger's: the attempt was aborted or expired (the job,
    an operator or a person gave up on it), a higher attempt has begun (this one is
    fenced: its manifest would never be committed), or it passed its timeout.
    """
    from airflow_tpc import ManifestError, TxnState

    sink = hook.get_sink()
    txn = hook.transaction(txn_doc)
    try:
        status = sink.poll(txn)  # one ledger listing and one or two reads, not describe()
    except ManifestError as exc:
        return "failed", f"invalid pre-commit manifest for {txn.txn_id}: {exc}"
    if status.state is TxnState.COMMITTED:
        # A cleared sensor re-running after the commit: the pre-commit it waits for
        # happened (the decision records its digest and totals).
        return "ready", f"{txn.txn_id} is already COMMITTED"
    if status.state in (TxnState.ABORTED, TxnState.EXPIRED, TxnState.ABANDONED):
        return "failed", f"{txn.txn_id} was {status.state} ({status.reason}): the job failed " \
                         "or the attempt was given up"
    if status.highest_attempt > txn.attempt:
        return "failed", f"{txn.txn_id} is fenced: attempt {status.highest_attempt} of epoch " \
                         f"{txn.epoch} has begun since, so this attempt can never be committed"
    manifest = status.manifest
    if manifest is not None:
        return "ready", f"{txn.txn_id} pre-committed: {manifest.total_files} files, digest " \
                        f"{manifest.digest}"
    if txn.expired():
        return "failed", f"{txn.txn_id} passed its {txn.timeout_s:.0f} s transaction timeout " \
                         "without a pre-commit"
    return "waiting", f"{txn.txn_id} not pre-committed yet"


class PrecommitTrigger(BaseTrigger):
    """Poll storage until the attempt is pre-committed, fails, or ``deadline`` passes."""

    def __init__(self, *, txn: dict[str, Any], target: str, namespace: str,
                 storage_conn_id: str | None = None,
                 storage_options: dict[str, Any] | None = None,
                 sink_config: dict[str, Any] | None = None,
                 poll_interval: float = 10.0, deadline: float | None = None) -> None:
        super().__init__()
        self.txn = txn
        self.target = target
        self.namespace = namespace
        self.storage_conn_id = storage_conn_id
        self.storage_options = storage_options
        self.sink_config = sink_config
        self.poll_interval = poll_interval
        self.deadline = deadline

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}", {
            "txn": self.txn, "target": self.target, "namespace": self.namespace,
            "storage_conn_id": self.storage_conn_id, "storage_options": self.storage_options,
            "sink_config": self.sink_config, "poll_interval": self.poll_interval,
            "deadline": self.deadline})

    async def run(self) -> AsyncIterator[TriggerEvent]:
        connection = None
        if self.storage_conn_id:
            connection = await TpcHook.aget_connection(self.storage_conn_id)
        hook = TpcHook(self.target, self.namespace, storage_conn_id=self.storage_conn_id,
                       storage_options=self.storage_options, config=self.sink_config,
                       connection=connection)
        while True:
            try:
                status, message = await asyncio.to_thread(check_precommit, hook, self.txn)
            except Exception as exc:  # storage hiccup: report it, the sensor fails clearly
                status, message = "failed", f"could not check the pre-commit: {exc}"
            if status != "waiting":
                yield TriggerEvent({"status": status, "message": message})
                return
            if self.deadline is not None and time.time() >= self.deadline:
                yield TriggerEvent({"status": "timeout", "message": f"timed out: {message}"})
                return
            self.log.info("%s; next look in %.0f s", message, self.poll_interval)
            await asyncio.sleep(self.poll_interval)
