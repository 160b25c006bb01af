"""The group's pre-commit sensor: every member sealed, or a clear failure.

It asks the question its trigger asks (:func:`~airflow_tpc.airflow.triggers.group.
check_group_precommit`), poking or deferred to the triggerer.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseSensorOperator, PokeReturnValue

from airflow_tpc.airflow.hooks.tpc import GROUP_XCOM_KEY
from airflow_tpc.airflow.operators.group_base import GROUP_TEMPLATE_FIELDS, GroupTaskMixin
from airflow_tpc.airflow.sensors.tpc import PrecommitFailed
from airflow_tpc.airflow.triggers.group import (  # noqa: F401 (the 0.1 path group_sensor)
    GroupCheck,
    GroupPrecommitTrigger,
    check_group_precommit,
)
from airflow_tpc.airflow.utils.metrics import emit_health

if TYPE_CHECKING:
    from airflow.sdk import Context


class GroupPrecommitSensor(GroupTaskMixin, BaseSensorOperator):
    """Wait until every member of the run's group attempt is sealed (and each table
    member's files fit its table): :func:`check_group_precommit`.  Fails (so the abort
    task runs) on any failure signal.  ``deferrable``: wait in the triggerer
    (:class:`GroupPrecommitTrigger`), holding no worker slot.  XCom: the pointer."""

    template_fields: Sequence[str] = (*GROUP_TEMPLATE_FIELDS, "submit_task_id")
    ui_color = "#fde2a7"

    def __init__(self, *, targets: Mapping[str, Any], namespace: str, submit_task_id: str,
                 group_uri: str | None = None, storage_conn_id: str | None = None,
                 storage_options: dict[str, Any] | None = None, sink_config: Any = None,
                 catalog_conn_id: str | None = None, allow_empty: bool = False,
                 deferrable: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.submit_task_id = submit_task_id
        self.allow_empty = allow_empty
        self.deferrable = deferrable
        self._init_group(targets, namespace, group_uri, storage_conn_id, storage_options,
                         sink_config, catalog_conn_id)

    def _check(self, context: Context) -> GroupCheck:
        doc = context["ti"].xcom_pull(task_ids=self.submit_task_id, key=GROUP_XCOM_KEY)
        if not doc:
            raise PrecommitFailed(f"task {self.submit_task_id!r} began no group transaction "
                                  "in this run")
        args = self.group_args
        hooks = args.hooks()
        check = check_group_precommit(args, hooks, doc, self.allow_empty)
        if check.status != "waiting":  # the wait is over: each member's health gauges
            emit_health(hooks.values())
        return check

    def poke(self, context: Context) -> PokeReturnValue | bool:
        check = self._check(context)
        self.log.info("%s", check.message)
        if check.status == "failed":
            raise PrecommitFailed(check.message)
        if check.status == "waiting":
            return False
        return PokeReturnValue(is_done=True, xcom_value=check.pointer)

    def execute(self, context: Context) -> Any:
        if not self.deferrable:
            return super().execute(context)
        check = self._check(context)
        if check.status == "ready":
            return check.pointer
        if check.status == "failed":
            raise PrecommitFailed(check.message)
        self.log.info("%s; deferring to the triggerer", check.message)
        doc = context["ti"].xcom_pull(task_ids=self.submit_task_id, key=GROUP_XCOM_KEY)
        self.defer(trigger=GroupPrecommitTrigger(
            txn={"epoch": doc["epoch"], "attempt": doc["attempt"]},
            **self.group_args.serialize(), allow_empty=self.allow_empty,
            poll_interval=float(self.poke_interval),
            deadline=time.time() + float(self.timeout)),
            method_name="execute_complete",
            timeout=timedelta(seconds=float(self.timeout) + 60))

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> Any:
        event = event or {}
        if event.get("status") == "ready":
            # Seen ready in the triggerer; the pointer is built from what this process
            # reads (nothing crosses the trigger event but a status).
            check = self._check(context)
            if check.status != "ready":
                raise PrecommitFailed(check.message)
            return check.pointer
        if event.get("status") == "timeout":
            raise PrecommitFailed(f"no pre-commit within {self.timeout} s: {event.get('message')}")
        raise PrecommitFailed(str(event.get("message") or f"unexpected trigger event {event!r}"))
