"""The shared base of the group tasks: which group a task addresses (:class:`GroupArgs`)
and the arguments every group task declares (:class:`GroupTaskMixin`).

Apart from the operators because the group's sensor and trigger
(:mod:`airflow_tpc.airflow.sensors.group`) and the run page stand on it too, as the single
target's tasks stand on :class:`~airflow_tpc.airflow.hooks.tpc.SinkArgs`: one declaration of
the members, the group's folder and the shared sink arguments, checked once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from airflow.sdk import Asset

from airflow_tpc import InvalidState, TpcError
from airflow_tpc.airflow.hooks.tpc import SinkArgs, TpcHook, is_table_target
from airflow_tpc.airflow.operators.tpc import target_asset
from airflow_tpc.group import Group, GroupTransaction
from airflow_tpc.storage import storage_class

#: Sink arguments a member may set for itself (the rest are the group's).
MEMBER_KEYS = ("target", "ledger_uri", "replace_where", "write_mode", "add_columns",
               "catalog_conn_id")
#: Templated on every group task.
GROUP_TEMPLATE_FIELDS = ("targets", "namespace", "group_uri", "storage_conn_id",
                         "catalog_conn_id")


def default_group_uri(targets: Mapping[str, Any], namespace: str) -> str | None:
    """``<parent>/_tpc_groups/<namespace>`` beside the first folder member (or the first
    table member's ``ledger_uri``): on the same store, apart from every target."""
    for spec in targets.values():
        spec = {"target": spec} if isinstance(spec, str) else spec
        uri = spec.get("ledger_uri") or spec.get("target")
        if not isinstance(uri, str) or (is_table_target(uri) and not spec.get("ledger_uri")):
            continue
        parent = uri.rstrip("/").rsplit("/", 1)[0]
        if parent and not parent.endswith(":/"):
            return f"{parent}/_tpc_groups/{namespace}"
    return None


@dataclass(frozen=True)
class GroupArgs:
    """Which group a task addresses: every member's :class:`SinkArgs` and the group's
    folder.  Built from the task's (rendered) arguments, checked like a target's (no
    secret in ``storage_options``)."""

    group_uri: str
    namespace: str
    members: tuple[tuple[str, SinkArgs], ...]

    @classmethod
    def of(cls, targets: Mapping[str, Any], namespace: str, group_uri: str | None, *,
           storage_conn_id: str | None = None, storage_options: dict[str, Any] | None = None,
           sink_config: Any = None, catalog_conn_id: str | None = None,
           where: str = "group") -> GroupArgs:
        if not isinstance(targets, Mapping) or not targets:
            raise TpcError(f"{where}: targets must map member names to targets")
        members = []
        for name, spec in targets.items():
            spec = {"target": spec} if isinstance(spec, str) else dict(spec)
            unknown = set(spec) - set(MEMBER_KEYS)
            if unknown or not isinstance(spec.get("target"), str):
                raise TpcError(f"{where}: member {name!r} must be a target URI or a dict of "
                               f"{list(MEMBER_KEYS)} with 'target'; got {sorted(spec)}")
            members.append((str(name), SinkArgs(
                spec["target"], namespace, storage_conn_id, storage_options, sink_config,
                spec.get("catalog_conn_id")
                or (catalog_conn_id if is_table_target(spec["target"]) else None),
                spec.get("ledger_uri") or None,
                spec.get("replace_where"), spec.get("write_mode") or "replace",
                bool(spec.get("add_columns")), where=where)))
        uri = group_uri or default_group_uri(targets, namespace)
        if not uri:
            raise TpcError(f"{where}: give group_uri, a folder of the group's own (no member "
                           "is a folder to put it beside)")
        return cls(uri, namespace, tuple(members))

    def hooks(self) -> dict[str, TpcHook]:
        return {name: args.hook() for name, args in self.members}

    def group(self, hooks: Mapping[str, TpcHook]) -> Group:
        """The core group over the members' sinks; the group's folder is reached with the
        members' storage connection when it lies on a store that takes credentials."""
        first = next(iter(hooks.values()))
        options = first.storage_options() if storage_class(self.group_uri).takes_credentials \
            else None
        return Group({n: h.get_sink() for n, h in hooks.items()}, self.group_uri,
                     storage_options=options)

    def serialize(self) -> dict[str, Any]:
        """JSON-safe (a trigger's kwargs): names and public options only."""
        return {"group_uri": self.group_uri, "namespace": self.namespace,
                "members": {n: args.serialize() for n, args in self.members}}

    @classmethod
    def deserialize(cls, doc: Mapping[str, Any], where: str = "group") -> GroupArgs:
        return cls(str(doc["group_uri"]), str(doc["namespace"]), tuple(
            (str(n), SinkArgs(**a, where=where)) for n, a in doc["members"].items()))

    def xcom(self, gtxn: GroupTransaction) -> dict[str, Any]:
        """What a group's submit task pushes under ``tpc_group_txn``: the transaction and,
        beside it, the group's arguments — names and public options only (SinkArgs
        refuses secrets) — from which the run page opens the group of a run.  A custom
        submit task (:func:`~airflow_tpc.airflow.utils.task_group.exactly_once_group_tasks`)
        pushes the same."""
        first = self.members[0][1]
        return {**gtxn.to_dict(), "group_uri": self.group_uri,
                "storage_conn_id": first.storage_conn_id,
                "storage_options": dict(first.storage_options or {}),
                "catalog_conn_id": next((a.catalog_conn_id for _, a in self.members
                                         if a.catalog_conn_id), None),
                "member_args": {n: a.serialize() for n, a in self.members}}

    def assets(self) -> list[Asset]:
        return [target_asset(args.target) for _, args in self.members]


class GroupTaskMixin:
    """The arguments every group task shares, and the group they address."""

    targets: dict[str, Any]
    namespace: str
    group_uri: str | None

    def _init_group(self, targets: Mapping[str, Any], namespace: str, group_uri: str | None,
                    storage_conn_id: str | None, storage_options: dict[str, Any] | None,
                    sink_config: Any, catalog_conn_id: str | None) -> None:
        self.targets = dict(targets)
        self.namespace = namespace
        self.group_uri = group_uri
        self.storage_conn_id = storage_conn_id
        self.group_storage_options = storage_options
        self.group_sink_config = sink_config
        self.catalog_conn_id = catalog_conn_id
        self.group_args  # noqa: B018 - checked when the DAG is parsed (no secret, members)

    @property
    def group_args(self) -> GroupArgs:
        return GroupArgs.of(self.targets, self.namespace, self.group_uri,
                            storage_conn_id=self.storage_conn_id or None,
                            storage_options=self.group_storage_options,
                            sink_config=self.group_sink_config,
                            catalog_conn_id=self.catalog_conn_id or None,
                            where=type(self).__name__)

    def open_group(self) -> tuple[Group, dict[str, TpcHook]]:
        args = self.group_args
        hooks = args.hooks()
        return args.group(hooks), hooks


def _loaded(group: Group, doc: Mapping[str, Any] | None, what: str) -> GroupTransaction:
    """The group transaction an XCom names (its epoch and attempt), re-read from the
    group's ledger: the XCom is not trusted."""
    if not doc or "epoch" not in doc or "attempt" not in doc:
        raise InvalidState(f"no group transaction from {what}: nothing to act on")
    return group.transaction(str(doc["epoch"]), doc["attempt"])
