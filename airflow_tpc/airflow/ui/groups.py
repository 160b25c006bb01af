"""The group transactions of a DAG run, as the UI plugin finds, shows and aborts them.

A group's submit task (:class:`~airflow_tpc.airflow.operators.group.GroupSparkSubmitOperator`)
pushes ``tpc_group_txn``: the group attempt (namespace, group URI, epoch, attempt, each
member's transaction) and, beside it, the group's arguments — ``group_uri``, the
connections by name, public options, each member's ``SinkArgs`` (``member_args``).  The
group is opened from those, its connections looked up by name here, in the API server,
as a single target's are (:func:`runs.hook_of`).

A group attempt is decided only as a whole, so it is shown and acted on as one: one
card with its state from the group's ledger (as ``airflow-tpc group status`` reads it)
and every member's attempt from that member's ledger; its Abort aborts the group
(:meth:`Group.abort`), named by its full identity (the task that began it, or the
group's URI and namespace, with epoch and attempt); and the single-target abort route
refuses a member's attempt, naming its group (:func:`member_refusal`), instead of
answering for one member what only the group decides.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from airflow_tpc import InvalidState, TpcError
from airflow_tpc.airflow.hooks.tpc import GROUP_XCOM_KEY  # the hook's: no Spark provider loaded
from airflow_tpc.airflow.ui import render as ui
from airflow_tpc.airflow.ui import runs
from airflow_tpc.tables import history


class NoGroupArgs(TpcError):
    """The run's group XCom carries no group arguments (pushed by a task that is not
    ``GroupSparkSubmitOperator``, or by an earlier version of it)."""


@dataclass(frozen=True)
class FoundGroup:
    """One group attempt of a run: the run, the task that began it, the group, the attempt."""

    dag_id: str
    run_id: str
    task_id: str
    group: Any
    gtxn: Any

    def identity(self) -> dict[str, Any]:
        """What names it end to end: the Abort button's body, API answers, audit rows."""
        return {"task_id": self.task_id, "group": self.group.uri,
                "namespace": self.group.namespace, "epoch": self.gtxn.epoch,
                "attempt": int(self.gtxn.attempt), "txn_id": self.gtxn.txn_id}


def group_docs(dag_id: str, run_id: str) -> list[tuple[str, dict[str, Any]]]:
    """(task_id, group XCom) of every task that began a group transaction in this run."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        rows = session.execute(select(XComModel.task_id, XComModel.value).where(
            XComModel.dag_id == dag_id, XComModel.run_id == run_id,
            XComModel.key == GROUP_XCOM_KEY).order_by(XComModel.task_id)).all()
    return [(task_id, runs.loads(raw)) for task_id, raw in rows]


def open_group(doc: dict[str, Any]) -> Any:
    """The :class:`~airflow_tpc.group.Group` a group XCom names, from its arguments."""
    from airflow_tpc.airflow.hooks.tpc import SinkArgs
    from airflow_tpc.group import Group
    from airflow_tpc.storage import storage_class

    members = doc.get("member_args")
    if not doc.get("group_uri") or not isinstance(members, dict) or not members:
        raise NoGroupArgs(f"the task's {GROUP_XCOM_KEY} XCom names group {doc.get('group')!r} "
                          "but not its arguments (group_uri, member_args): it was not pushed "
                          "by GroupSparkSubmitOperator of this version")
    try:
        hooks = {str(name): runs.hook_of(SinkArgs(**args, where=f"{GROUP_XCOM_KEY} XCom"))
                 for name, args in sorted(members.items())}
    except (TypeError, ValueError) as exc:  # unknown keys; a secret in storage_options
        raise TpcError(f"the task's {GROUP_XCOM_KEY} XCom has unusable member arguments: "
                       f"{exc}") from None
    uri = str(doc["group_uri"])
    first = next(iter(hooks.values()))
    options = first.storage_options() if storage_class(uri).takes_credentials else None
    group = Group({n: h.get_sink() for n, h in hooks.items()}, uri, storage_options=options)
    named = str(doc.get("group") or group.uri).rstrip("/")
    if named != group.uri or doc.get("namespace") != group.namespace:
        raise TpcError(f"the XCom names group {named} of namespace {doc.get('namespace')!r}, "
                       f"but its arguments open {group.uri} of {group.namespace!r}")
    return group


def _owned(group: Any, doc: dict[str, Any], dag_id: str, run_id: str
           ) -> tuple[list[int], dict[str, dict[int, Any]]]:
    """The group attempts of the XCom's epoch this run owns — the one the XCom names and
    every one whose members' begin records name this run (earlier tries) — newest first,
    and each member's ``TxnInfo`` of that epoch by attempt."""
    epoch, claimed = str(doc["epoch"]), int(doc["attempt"])
    infos = {name: {i.attempt: i for i in sink.describe(epoch)}
             for name, sink in group.sinks.items()}
    began = set(group.ledger.scan(epoch).get(epoch, {}))  # group attempts with a begin
    owned = ({claimed} | {a for per in infos.values() for a, i in per.items()
                          if ((i.owner or {}).get("dag_id"),
                              (i.owner or {}).get("run_id")) == (dag_id, run_id)}) & began
    return sorted(owned, reverse=True), infos


def group_row(described: dict[str, Any], members: dict[str, Any]) -> dict[str, Any]:
    """A group attempt's row: its facts from the group's ledger as ``airflow-tpc group
    status`` reads them (:func:`~airflow_tpc.cli.group.describe_group`: the decision —
    COMMITTED, published on every member or not; ABORTED or EXPIRED — else PRECOMMITTED
    once every member is sealed, OPEN before), what is left to do as its reason when it
    has none, and the members' totals.  ``members``: name -> that member's ``TxnInfo``
    of the attempt (None: it never began)."""
    infos = list(members.values())

    def total(key: str) -> int | None:
        values = [getattr(i, key) if i is not None else None for i in infos]
        return None if not values or None in values else sum(values)

    keys = ("txn_id", "epoch", "attempt", "state", "published", "superseded", "started_at",
            "timeout_s", "decided_at")
    return {**{k: described[k] for k in keys},
            "reason": described["reason"] or described["note"] or None,
            "files": total("files"), "rows": total("rows"), "bytes": total("bytes")}


def _section(base: str, dag_id: str, run_id: str, task_id: str,
             doc: dict[str, Any]) -> ui.GroupSection:
    from airflow_tpc.cli.group import describe_group

    abort_url = ui.url(f"{base}/api/abort-group", dag_id=dag_id, run_id=run_id)
    group = open_group(doc)
    epoch = str(doc["epoch"])
    attempts, infos = _owned(group, doc, dag_id, run_id)
    described = {d["attempt"]: d for d in describe_group(group, epoch)}
    attempts = [a for a in attempts if a in described]
    annotated = {}  # name -> attempt -> the member attempt's dict (a table's version)
    for name, sink in group.sinks.items():
        mine = [infos[name][a] for a in attempts
                if a in infos[name] and described[a]["members"][name]["state"] is not None]
        annotated[name] = {i.attempt: d for i, d in
                           zip(mine, runs.info_dicts(sink, mine), strict=True)}
    rows = []
    for attempt in attempts:
        info = group_row(described[attempt], {
            n: infos[n][attempt] if attempt in annotated[n] else None for n in group.sinks})
        members = []
        for name, sink in group.sinks.items():
            shown = history.shown_target(sink)
            members.append(ui.MemberRow(
                name, shown, sink.target if history.table_uri(sink) else None,
                annotated[name].get(attempt), history.version_key(sink),
                ui.url(f"{base}/manifest", dag_id=dag_id, run_id=run_id, task_id=task_id,
                       target=shown, namespace=sink.namespace, epoch=epoch,
                       attempt=attempt)))
        found = FoundGroup(dag_id, run_id, task_id, group, group.transaction(epoch, attempt))
        rows.append(ui.GroupRow(info, members, timeout_s=info["timeout_s"],
                                abort_url=abort_url, identity=found.identity()))
    return ui.GroupSection(task_id, group.uri, group.namespace, rows,
                           href=ui.url(f"{base}/group", dag_id=dag_id, run_id=run_id,
                                       task_id=task_id))


def run_sections(base: str, dag_id: str, run_id: str) -> list[ui.GroupSection]:
    """One card per group transaction of the run (per task that began one); a group that
    cannot be opened is a card saying why, not a failed page."""
    sections = []
    for task_id, doc in group_docs(dag_id, run_id):
        try:
            sections.append(_section(base, dag_id, run_id, task_id, doc))
        except TpcError as exc:
            sections.append(ui.GroupSection(
                task_id, str(doc.get("group") or doc.get("group_uri") or "?"),
                str(doc.get("namespace")), [], error=str(exc)))
    return sections


def _same_uri(a: str, b: str) -> bool:
    """Two spellings of one folder: trailing slashes, and a local path with or without
    ``file://``."""
    def norm(u: str) -> str:
        return u.rstrip("/").removeprefix("file://")
    return norm(a) == norm(b)


def resolve(dag_id: str, run_id: str, epoch: str, attempt: int, *,
            task_id: str | None = None, group: str | None = None,
            namespace: str | None = None, txn_id: str | None = None) -> FoundGroup | None:
    """The one group attempt of the run with this identity, or None.

    As :func:`runs.resolve` for a target: ``task_id`` (the task that began it) or
    ``group`` + ``namespace`` name the group, with ``epoch`` and ``attempt``; ``txn_id``
    and the other names, when given, must agree.  Anything less, or a request whose
    fields name two different group attempts, raises :class:`runs.Ambiguous`."""
    if task_id is None and (group is None or namespace is None):
        raise runs.Ambiguous("name the group transaction: task_id (the task that began it) "
                             "or group and namespace, with epoch and attempt")
    found: list[FoundGroup] = []
    contradicts: list[str] = []
    for tid, doc in group_docs(dag_id, run_id):
        if task_id is not None and tid != task_id:
            continue
        if doc.get("epoch") != epoch:
            continue
        opened = open_group(doc)
        wrong = [f"{name} {value!r}" for name, value, ok in (
            ("group", group, group is None or _same_uri(opened.uri, group)),
            ("namespace", namespace, namespace is None or opened.namespace == namespace))
            if not ok]
        attempts, _ = _owned(opened, doc, dag_id, run_id)
        if attempt not in attempts:
            continue
        gtxn = opened.transaction(epoch, attempt)
        if txn_id is not None and gtxn.txn_id != txn_id:
            wrong.append(f"txn_id {txn_id!r}")
        if wrong:
            if task_id is not None:
                contradicts.append(f"task {tid} began group {gtxn.txn_id} of {opened.uri}, "
                                   f"not {' / '.join(wrong)}")
            continue
        found.append(FoundGroup(dag_id, run_id, tid, opened, gtxn))
    if not found and contradicts:
        raise runs.Ambiguous(f"the request names two different transactions: {contradicts[0]}")
    if len(found) > 1:
        which = ", ".join(f"{f.task_id} ({f.group.uri})" for f in found)
        raise runs.Ambiguous(f"{epoch}/{attempt} of run {run_id} is an attempt of several "
                             f"groups: {which}; name one by task_id, or group and namespace")
    return found[0] if found else None


def abort(found: FoundGroup, user: str, via: str) -> dict[str, Any]:
    """Abort the whole group attempt (:meth:`Group.abort`: one abort decision in the
    group's ledger, then every member's abort carried out); say ``already aborted`` when
    an earlier abort decided it (the decision is a put-if-absent).  A committed group is
    refused (:class:`InvalidState`, nothing written).  Either way a row of Airflow's
    audit log names the group, its members and the outcome."""
    from airflow_tpc.airflow.utils.spark_app import group_stopped, stop_group
    from airflow_tpc.core.group_records import GroupCommit
    from airflow_tpc.core.records import DECISION

    group, gtxn = found.group, found.gtxn
    members = {name: history.shown_target(sink) for name, sink in group.sinks.items()}
    try:
        if isinstance(group.ledger.read(gtxn.epoch, gtxn.attempt, DECISION), GroupCommit):
            # Refused before anything is written (as ``airflow-tpc group abort``): an abort
            # racing a commit is refused by Group.abort itself.
            raise InvalidState(f"cannot abort group {gtxn.txn_id}: it is COMMITTED, a final "
                               "decision for every member (a new run of the epoch replaces "
                               "its output); nothing was changed")
        made = group.abort(gtxn, runs.ABORT_REASON.format(user=user))
        # after the decision, as the group's abort task (airflow/spark_app.py)
        if group_stopped(stop_group(group, gtxn.epoch, gtxn.attempt)):
            group.abort(gtxn, runs.ABORT_REASON.format(user=user))  # what it wrote meanwhile
    except InvalidState:
        runs.audit(found, user, via, "refused", members=members)
        raise
    outcome = "aborted" if made else "already aborted"
    if made:  # counted per member, as the group's abort task counts it
        from airflow_tpc.airflow.utils.metrics import ABORTS, TpcMetrics

        for sink in group.sinks.values():
            TpcMetrics(sink.namespace, sink.target).incr(ABORTS)
        from airflow_tpc.airflow.utils.lineage_abort import abort_summary, emit_abort

        emit_abort(found.dag_id, found.task_id,  # no task, no listener: lineage of its own
                   [(group.sinks[n], abort_summary(t.epoch, t.namespace, [t.txn_id]))
                    for n, t in gtxn.members.items()])
    runs.audit(found, user, via, outcome, members=members)
    states = {}
    for name, sink in group.sinks.items():
        mine = [i for i in sink.describe(gtxn.epoch) if i.attempt == gtxn.attempt]
        states[name] = str(mine[0].state) if mine else None
    return {**found.identity(), "outcome": outcome,
            "members": {n: {"target": members[n], "state": states[n]} for n in members}}


def _members_named(dag_id: str, run_id: str, epoch: str, attempt: int, *,
                   task_id: str | None, target: str | None, namespace: str | None
                   ) -> list[tuple[FoundGroup, str, Any]]:
    """(group attempt, member name, member sink) of every member of the run's group
    attempts that a single-target request (``task_id`` / ``target`` + ``namespace``,
    epoch, attempt) names."""
    out = []
    for tid, doc in group_docs(dag_id, run_id):
        if doc.get("epoch") != epoch or (task_id is not None and tid != task_id):
            continue
        try:
            group = open_group(doc)
            attempts, _ = _owned(group, doc, dag_id, run_id)
        except TpcError:
            continue
        if attempt not in attempts:
            continue
        found = FoundGroup(dag_id, run_id, tid, group, group.transaction(epoch, attempt))
        for name, sink in group.sinks.items():
            if target is not None and not runs._names_sink(sink, target):
                continue
            if namespace is not None and sink.namespace != namespace:
                continue
            out.append((found, name, sink))
    return out


def member_refusal(dag_id: str, run_id: str, epoch: str, attempt: int, *,
                   task_id: str | None, target: str | None, namespace: str | None,
                   found: Any = None) -> str | None:
    """Why the single-target abort route must not act: the transaction it names is a
    member of a group attempt (of this run's group, or — ``found``, a ``tpc_txn`` it
    resolved — any attempt whose begin record names a group).  None: not a member."""
    advice = ("a member is decided only with its group: abort the group (its card's "
              "Abort group on the run page, or POST /airflow-tpc/api/abort-group with the "
              "group's task_id, epoch and attempt)")
    if found is not None:
        from airflow_tpc.core.records import BEGIN, Begin

        begin = found.sink.ledger.read(found.info.epoch, found.info.attempt, BEGIN)
        if isinstance(begin, Begin) and begin.group is not None:
            return (f"{found.info.txn_id} of {history.shown_target(found.sink)} is member "
                    f"{begin.group.get('member')!r} of group transaction {found.info.txn_id} "
                    f"(group {begin.group.get('uri')}); {advice}")
        return None
    named = _members_named(dag_id, run_id, epoch, attempt, task_id=task_id, target=target,
                           namespace=namespace)
    if not named:
        return None
    f, name, sink = named[0]
    which = (f"member {name!r} ({history.shown_target(sink)})" if target is not None
             else f"members {', '.join(repr(n) for n in f.group.sinks)}")
    return (f"{f.gtxn.txn_id} named by this request is {which} of group transaction "
            f"{f.gtxn.txn_id} (group {f.group.uri}, begun by task {f.task_id}); {advice}")


def find_member(dag_id: str, run_id: str, epoch: str, attempt: int, *,
                task_id: str | None, target: str | None, namespace: str | None
                ) -> tuple[Any, Any] | None:
    """(sink, TxnInfo) of the one member attempt a manifest link names (target given)."""
    if target is None:
        return None
    named = _members_named(dag_id, run_id, epoch, attempt, task_id=task_id, target=target,
                           namespace=namespace)
    if len(named) != 1:
        return None
    sink = named[0][2]
    infos = [i for i in sink.describe(epoch) if i.attempt == attempt]
    return (sink, infos[0]) if infos else None
