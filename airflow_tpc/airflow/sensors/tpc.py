"""PrecommitSensor: the "checkpoint complete" notification of the batch two-phase commit."""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import PokeReturnValue

from airflow_tpc.airflow.hooks.tpc import PrecommitCheck
from airflow_tpc.airflow.operators.base import TpcBaseSensor, tpc_template_fields
from airflow_tpc.airflow.operators.tpc import pull_txn
from airflow_tpc.airflow.triggers.tpc import PrecommitTrigger
from airflow_tpc.airflow.utils.metrics import health_at_end

if TYPE_CHECKING:
    from airflow.sdk import Context


class PrecommitFailed(RuntimeError):
    """The awaited attempt can never be committed (job failed, aborted, fenced, expired)."""


class PrecommitSensor(TpcBaseSensor):
    """Wait until the run's transaction is pre-committed; push a small pointer to it.

    The pointer (manifest URI, digest, counts, txn id) is a few hundred bytes however
    many files were written: the manifest itself stays in storage, where the commit
    re-reads and re-verifies it against the digest validated here.

    Every poke (and every poll of the trigger) is :meth:`TpcHook.check_precommit`: one
    listing of the epoch's ledger and two or three small reads, however many attempts
    the epoch has had; a "ready" poke builds the pointer from what that check read.

    Modes: ``deferrable=True`` polls from the triggerer (no worker slot held);
    otherwise ``mode="poke"`` or ``mode="reschedule"`` as any sensor.

    The sink arguments (``target``, ``namespace``, ``storage_conn_id``,
    ``storage_options``, ``sink_config``) are :class:`TpcBaseOperator`'s.

    :param submit_task_id: the :class:`StagedSparkSubmitOperator` that began the txn.
    :param allow_empty: accept a manifest listing no files (default: refuse, since an
        empty epoch more often means a broken job than an empty day).
    """

    template_fields: Sequence[str] = tpc_template_fields("submit_task_id")
    ui_color = "#cde4f7"

    def __init__(self, *, submit_task_id: str, allow_empty: bool = False,
                 deferrable: bool = False, **kwargs: Any) -> None:
        kwargs.setdefault("poke_interval", 10)
        kwargs.setdefault("timeout", 6 * 3600)
        super().__init__(**kwargs)
        self.submit_task_id = submit_task_id
        self.allow_empty = allow_empty
        self.deferrable = deferrable

    def _txn_doc(self, context: Context) -> dict[str, Any]:
        doc = pull_txn(context, self.submit_task_id)
        if not doc:
            raise PrecommitFailed(f"task {self.submit_task_id!r} began no transaction in this run")
        return doc

    def execute(self, context: Context) -> Any:
        if not self.deferrable:
            return super().execute(context)
        doc = self._txn_doc(context)
        check = self.tpc_hook.check_precommit(doc)
        if check.status != "waiting":
            return self._ended(check)
        self.log.info("%s; deferring to the triggerer", check.message)
        self.defer(
            trigger=PrecommitTrigger(
                txn=doc, **self.sink_args.serialize(), poll_interval=float(self.poke_interval),
                deadline=time.time() + float(self.timeout)),
            method_name="execute_complete",
            timeout=timedelta(seconds=float(self.timeout) + 60))

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> Any:
        with health_at_end(self.tpc_hook):  # the wait ended: the target's gauges
            return self._complete(context, event or {})

    def _complete(self, context: Context, event: dict[str, Any]) -> Any:
        if event.get("status") == "ready":
            # The triggerer saw it ready; look once more here, where the pointer is built
            # from what this process read (nothing crosses the trigger event but a status).
            check = self.tpc_hook.check_precommit(self._txn_doc(context))
            if check.status != "ready":
                raise PrecommitFailed(check.message)
            return self._pointer(check)
        if event.get("status") == "timeout":
            raise PrecommitFailed(f"no pre-commit within {self.timeout} s: {event.get('message')}")
        raise PrecommitFailed(str(event.get("message") or f"unexpected trigger event {event!r}"))

    def poke(self, context: Context) -> PokeReturnValue | bool:
        check = self.tpc_hook.check_precommit(self._txn_doc(context))
        self.log.info("%s", check.message)
        if check.status == "waiting":
            return False
        return PokeReturnValue(True, self._ended(check))

    def _ended(self, check: PrecommitCheck) -> dict[str, Any]:
        """The wait is over (ready, or failed: raised): the pointer, and the target's
        health gauges however it ended (``metrics.health_at_end``), not on every poke."""
        with health_at_end(self.tpc_hook):
            if check.status == "failed":
                raise PrecommitFailed(check.message)
            return self._pointer(check)

    def _pointer(self, check: PrecommitCheck) -> dict[str, Any]:
        """Refuse an empty epoch unless allowed; reduce the validated manifest to a pointer
        (no further storage request: the check already read and validated it)."""
        txn, sealed = check.txn, check.sealed
        if sealed is not None and sealed.total_files == 0 and not self.allow_empty:
            raise PrecommitFailed(f"{txn.txn_id} pre-committed no files; pass allow_empty=True if "
                                  "an empty epoch is legitimate")
        pointer = self.tpc_hook.precommit_pointer(check)
        self.log.info("Validated pre-commit of %s: %d files, %d bytes, %s rows, digest %s",
                      txn.txn_id, pointer["files"], pointer["bytes"], pointer["rows"],
                      pointer["digest"])
        return pointer
