"""PrecommitSensor: the "checkpoint complete" notification of the batch two-phase commit."""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseSensorOperator, PokeReturnValue

from airflow_tpc import SinkConfig
from airflow_tpc.airflow.hooks import TpcHook, check_public
from airflow_tpc.airflow.operators import pull_txn
from airflow_tpc.airflow.triggers import PrecommitTrigger, check_precommit, sealed_manifest

if TYPE_CHECKING:
    from airflow.sdk import Context


class PrecommitFailed(RuntimeError):
    """The awaited attempt can never be committed (job failed, aborted, fenced, expired)."""


class PrecommitSensor(BaseSensorOperator):
    """Wait until the run's transaction is pre-committed; push a small pointer to it.

    The pointer (manifest URI, digest, counts, txn id) is a few hundred bytes however
    many files were written: the manifest itself stays in storage, where the commit
    re-reads and re-verifies it against the digest validated here.

    Modes: ``deferrable=True`` polls from the triggerer (no worker slot held);
    otherwise ``mode="poke"`` or ``mode="reschedule"`` as any sensor.

    :param submit_task_id: the :class:`StagedSparkSubmitOperator` that began the txn.
    :param allow_empty: accept a manifest listing no files (default: refuse, since an
        empty epoch more often means a broken job than an empty day).
    """

    template_fields: Sequence[str] = ("target", "namespace", "submit_task_id")
    ui_color = "#cde4f7"

    def __init__(self, *, target: str, namespace: str, submit_task_id: str,
                 storage_conn_id: str | None = None,
                 storage_options: dict[str, Any] | None = None,
                 sink_config: SinkConfig | dict[str, Any] | None = None,
                 allow_empty: bool = False, deferrable: bool = False,
                 **kwargs: Any) -> None:
        kwargs.setdefault("poke_interval", 10)
        kwargs.setdefault("timeout", 6 * 3600)
        super().__init__(**kwargs)
        self.target = target
        self.namespace = namespace
        self.submit_task_id = submit_task_id
        self.storage_conn_id = storage_conn_id
        self.storage_options = check_public(storage_options, "PrecommitSensor")
        self.sink_config = sink_config
        self.allow_empty = allow_empty
        self.deferrable = deferrable

    def _hook(self) -> TpcHook:
        return TpcHook(self.target, self.namespace, storage_conn_id=self.storage_conn_id,
                       storage_options=self.storage_options, config=self.sink_config)

    def _txn_doc(self, context: Context) -> dict[str, Any]:
        doc = pull_txn(context, self.submit_task_id)
        if not doc:
            raise PrecommitFailed(f"task {self.submit_task_id!r} began no transaction in this run")
        return doc

    def execute(self, context: Context) -> Any:
        if not self.deferrable:
            return super().execute(context)
        doc = self._txn_doc(context)
        status, message = check_precommit(self._hook(), doc)
        if status == "ready":
            return self._pointer(doc)
        if status == "failed":
            raise PrecommitFailed(message)
        config = self.sink_config
        if isinstance(config, SinkConfig):
            config = {k: getattr(config, k) for k in config.__dataclass_fields__}
        self.log.info("%s; deferring to the triggerer", message)
        self.defer(
            trigger=PrecommitTrigger(
                txn=doc, target=self.target, namespace=self.namespace,
                storage_conn_id=self.storage_conn_id, storage_options=self.storage_options,
                sink_config=config, poll_interval=float(self.poke_interval),
                deadline=time.time() + float(self.timeout)),
            method_name="execute_complete",
            timeout=timedelta(seconds=float(self.timeout) + 60))

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> Any:
        event = event or {}
        if event.get("status") == "ready":
            return self._pointer(self._txn_doc(context))
        if event.get("status") == "timeout":
            raise PrecommitFailed(f"no pre-commit within {self.timeout} s: {event.get('message')}")
        raise PrecommitFailed(str(event.get("message") or f"unexpected trigger event {event!r}"))

    def poke(self, context: Context) -> PokeReturnValue | bool:
        doc = self._txn_doc(context)
        status, message = check_precommit(self._hook(), doc)
        self.log.info("%s", message)
        if status == "failed":
            raise PrecommitFailed(message)
        if status == "waiting":
            return False
        return PokeReturnValue(True, self._pointer(doc))

    def _pointer(self, doc: dict[str, Any]) -> dict[str, Any]:
        """Validate the manifest once more and reduce it to a small pointer."""
        hook = self._hook()
        sink = hook.get_sink()
        txn = hook.transaction(doc)
        manifest = sealed_manifest(sink, txn)
        if manifest is None:  # pragma: no cover - checked just before
            raise PrecommitFailed(f"{txn.txn_id}: manifest disappeared")
        if manifest.total_files == 0 and not self.allow_empty:
            raise PrecommitFailed(f"{txn.txn_id} pre-committed no files; pass allow_empty=True if "
                                  "an empty epoch is legitimate")
        pointer = {"txn_id": txn.txn_id, "epoch": txn.epoch, "attempt": txn.attempt,
                   "manifest_uri": sink.manifest_uri(txn), "digest": manifest.digest,
                   "files": manifest.total_files, "bytes": manifest.total_bytes,
                   "rows": manifest.total_rows}
        self.log.info("Validated pre-commit of %s: %d files, %d bytes, %s rows, digest %s",
                      txn.txn_id, manifest.total_files, manifest.total_bytes,
                      manifest.total_rows, manifest.digest)
        return pointer
