"""The group's pre-commit trigger, and the one question it shares with the sensor.

One question, asked by the poking sensor and by the trigger alike
(:func:`check_group_precommit`): the group attempt's own state (aborted, fenced by a
newer group attempt), then each member's pre-commit as a single target's sensor asks it
(:meth:`TpcHook.check_precommit`: aborted, expired, fenced, a table refusing the files),
and an empty member refused unless ``allow_empty``.  Ready: a pointer naming each
member's validated manifest (digest, counts), which the commit task commits against.
It lives with the trigger (the sensor imports it) so the triggerer, which loads only
this module, needs no sensor.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_tpc.airflow.hooks.tpc import PrecommitStatus, TpcHook
from airflow_tpc.airflow.operators.group_base import GroupArgs, _loaded
from airflow_tpc.airflow.triggers.tpc import poll_until


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
