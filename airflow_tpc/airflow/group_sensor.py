"""The group's pre-commit sensor and its trigger: every member sealed, or a clear failure.

One question, asked by the poking sensor and by the trigger alike
(:func:`check_group_precommit`): the group attempt's own state (aborted, fenced by a
newer group attempt), then each member's pre-commit as a single target's sensor asks it
(:meth:`TpcHook.check_precommit`: aborted, expired, fenced, a table refusing the files),
and an empty member refused unless ``allow_empty``.  Ready: a pointer naming each
member's validated manifest (digest, counts), which the commit task commits against.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseSensorOperator, PokeReturnValue
from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_tpc.airflow.group_base import (
    GROUP_TEMPLATE_FIELDS,
    GROUP_XCOM_KEY,
    GroupArgs,
    GroupTaskMixin,
    _loaded,
)
from airflow_tpc.airflow.hooks import PrecommitStatus, TpcHook
from airflow_tpc.airflow.metrics import emit_health
from airflow_tpc.airflow.sensors import PrecommitFailed
from airflow_tpc.airflow.triggers import poll_until

if TYPE_CHECKING:
    from airflow.sdk import Context


@dataclass(frozen=True)
class GroupCheck:
    status: PrecommitStatus  # "ready" | "waiting" | "failed"
    message: str
    pointer: dict[str, Any] | None = None


def check_group_precommit(args: GroupArgs, hooks: Mapping[str, TpcHook],
                          doc: Mapping[str, Any], allow_empty: bool = False) -> GroupCheck:
    """Is every member of the group attempt ``doc`` names pre-committed?  One look."""
    group = args.group(hooks)
    gtxn = _loaded(group, doc, "the submit task")
    status = group.poll(gtxn)
    if status.outcome == "abort":
        return GroupCheck("failed", f"group {gtxn.txn_id} was aborted ({status.reason})")
    if status.highest_attempt > gtxn.attempt:
        return GroupCheck("failed", f"group {gtxn.txn_id} is fenced: group attempt "
                                    f"{status.highest_attempt} of epoch {gtxn.epoch} has begun")
    pointers = {}
    for name, hook in hooks.items():
        check = hook.check_precommit(gtxn.member(name).to_dict())
        if check.status != "ready":
            return GroupCheck(check.status, f"member {name!r} of group {gtxn.txn_id}: "
                                            f"{check.message}")
        if check.sealed is not None and check.sealed.total_files == 0 and not allow_empty:
            return GroupCheck("failed", f"member {name!r} of group {gtxn.txn_id} pre-committed "
                                        "no files; pass allow_empty=True if an empty epoch "
                                        "is legitimate")
        pointers[name] = hook.precommit_pointer(check)
    sealed = ", ".join(f"{n} {p['files']} files" for n, p in pointers.items())
    return GroupCheck("ready", f"group {gtxn.txn_id}: every member sealed ({sealed})", {
        "txn_id": gtxn.txn_id, "group": group.uri, "epoch": gtxn.epoch,
        "attempt": gtxn.attempt, "members": pointers})


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


class GroupPrecommitTrigger(BaseTrigger):
    """Poll until every member is sealed, one fails, or ``deadline`` passes.  Its kwargs
    (stored in the metadata DB) are public: the group's arguments with connections by
    name only (:meth:`GroupArgs.serialize`), and the attempt's epoch and number."""

    def __init__(self, *, txn: dict[str, Any], poll_interval: float = 10.0,
                 deadline: float | None = None, allow_empty: bool = False,
                 **group_args: Any) -> None:
        super().__init__()
        self.txn = dict(txn)
        self.args = GroupArgs.deserialize(group_args, where=type(self).__name__)
        self.allow_empty = allow_empty
        self.poll_interval = poll_interval
        self.deadline = deadline

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}", {
            "txn": self.txn, **self.args.serialize(), "allow_empty": self.allow_empty,
            "poll_interval": self.poll_interval, "deadline": self.deadline})

    async def _hooks(self) -> dict[str, TpcHook]:
        hooks = {}
        for name, sink_args in self.args.members:
            connection = catalog = None
            if sink_args.storage_conn_id:
                connection = await TpcHook.aget_connection(sink_args.storage_conn_id)
            if sink_args.catalog_conn_id:
                catalog = await TpcHook.aget_connection(sink_args.catalog_conn_id)
            hooks[name] = sink_args.hook(connection=connection, catalog_connection=catalog)
        return hooks

    async def run(self) -> AsyncIterator[TriggerEvent]:
        hooks = await self._hooks()
        async for event in poll_until(self, lambda: check_group_precommit(
                self.args, hooks, self.txn, self.allow_empty)):
            yield event
