"""The transactions of a DAG run, as the UI plugin finds and acts on them.

A run's transactions are found through the metadata DB (the transaction XCom each
begin task pushed: which target, which namespace) and their states through the ledger.
Every action names one transaction by its **full identity** — the task that began it
(or its target and namespace), its epoch and its attempt — because one run holds an
attempt 1 of the same epoch in every target it writes: a request that does not name
exactly one of them is refused (:class:`Ambiguous`), never guessed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from airflow_tpc import TpcError
from airflow_tpc.airflow.ui import render as ui
from airflow_tpc.tables import history

ABORT_REASON = "aborted from the airflow-tpc UI by {user}"
#: The event name of an abort in Airflow's audit log (the UI's *Audit Log*).
AUDIT_EVENT = "airflow-tpc.abort"


class Ambiguous(ValueError):
    """The request matches more than one transaction of the run (or names none)."""


@dataclass(frozen=True)
class Found:
    """One transaction of a run: the run, the task that began it, its sink and state."""

    dag_id: str
    run_id: str
    task_id: str
    sink: Any
    info: Any

    def identity(self) -> dict[str, Any]:
        """What names it end to end: page buttons, links, API bodies and audit rows.  A
        table is named by its own URI (``iceberg://…``, the Delta URI), not the location
        its sink is rooted at (:func:`resolve` takes either)."""
        return {"task_id": self.task_id, "target": history.shown_target(self.sink),
                "namespace": self.sink.namespace, "epoch": self.info.epoch,
                "attempt": int(self.info.attempt), "txn_id": self.info.txn_id}


def loads(raw: Any) -> Any:
    return json.loads(raw) if isinstance(raw, str | bytes) else raw


def dag_run_exists(dag_id: str, run_id: str) -> bool:
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        return session.scalar(select(DagRun.id).where(
            DagRun.dag_id == dag_id, DagRun.run_id == run_id)) is not None


def run_docs(dag_id: str, run_id: str) -> list[tuple[str, dict[str, Any]]]:
    """(task_id, txn XCom) of every TPC task that began a transaction in this run."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    from airflow_tpc.airflow.hooks.tpc import TXN_XCOM_KEY

    with create_session() as session:
        rows = session.execute(select(XComModel.task_id, XComModel.value).where(
            XComModel.dag_id == dag_id, XComModel.run_id == run_id,
            XComModel.key == TXN_XCOM_KEY).order_by(XComModel.task_id)).all()
    return [(task_id, loads(raw)) for task_id, raw in rows]


def task_doc(dag_id: str, task_id: str) -> tuple[str, dict[str, Any]] | None:
    """(run_id, txn XCom) of the newest transaction a task began: which target it writes."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    from airflow_tpc.airflow.hooks.tpc import TXN_XCOM_KEY

    with create_session() as session:
        row = session.execute(select(XComModel.run_id, XComModel.value).where(
            XComModel.dag_id == dag_id, XComModel.task_id == task_id,
            XComModel.key == TXN_XCOM_KEY).order_by(XComModel.timestamp.desc()).limit(1)).first()
    return None if row is None else (row[0], loads(row[1]))


def recent_docs(dag_ids: set[str], limit: int = 200) -> list[dict[str, Any]]:
    """The newest transaction XComs of DAGs the user may read (the index page): the
    metadata DB only, no storage call, so the page stays fast with many targets."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    from airflow_tpc.airflow.hooks.tpc import GROUP_XCOM_KEY, TXN_XCOM_KEY

    if not dag_ids:
        return []
    with create_session() as session:
        rows = session.execute(select(
            XComModel.dag_id, XComModel.run_id, XComModel.task_id, XComModel.value,
            XComModel.timestamp, XComModel.key).where(
                XComModel.key.in_([TXN_XCOM_KEY, GROUP_XCOM_KEY]),
                XComModel.dag_id.in_(sorted(dag_ids)))
            .order_by(XComModel.timestamp.desc()).limit(limit)).all()
    return [{"dag_id": d, "run_id": r, "task_id": t, "doc": loads(v), "timestamp": ts,
             "group": k == GROUP_XCOM_KEY} for d, r, t, v, ts, k in rows]


def hook_for(doc: dict[str, Any]) -> Any:
    """The hook of the sink a transaction XCom names; the credentials connection is looked
    up by name here, in the API server (the XCom holds only its name)."""
    from airflow_tpc.airflow.hooks.tpc import SinkArgs

    return hook_of(SinkArgs.from_txn_doc(doc))


def hook_of(args: Any) -> Any:
    """The hook of one :class:`~airflow_tpc.airflow.hooks.tpc.SinkArgs` (a target of a
    transaction XCom, or a member of a group's), its connections looked up by name."""
    from airflow.models.connection import Connection

    connection = catalog = None
    if args.storage_conn_id:
        connection = Connection.get_connection_from_secrets(args.storage_conn_id)
    if args.catalog_conn_id:  # a table target's catalog, also by name only
        catalog = Connection.get_connection_from_secrets(args.catalog_conn_id)
    return args.hook(connection=connection, catalog_connection=catalog)


def info_dict(info: Any) -> dict[str, Any]:
    return info.to_dict()


def info_dicts(sink: Any, infos: list[Any]) -> list[dict[str, Any]]:
    """The rows of a page or of ``/api/transactions``: each attempt's facts from the
    ledger and, for a table, the snapshot / version its commit made and whether its
    staged files are the table's data now (``tables.history.annotate``: the table's
    history is read once for all rows)."""
    return history.annotate(sink, [info_dict(i) for i in infos])


def run_transactions(dag_id: str, run_id: str) -> list[dict[str, Any]]:
    """Every attempt this run began (all tries), with its state from the ledger; a table
    target named by its URI, its location beside it, and the snapshot / version of each
    commit."""
    out = []
    for task_id, doc in run_docs(dag_id, run_id):
        hook = hook_for(doc)
        sink = hook.get_sink()
        for row in info_dicts(sink, list(hook.run_attempts(doc, dag_id, run_id))):
            row.pop("owner", None)
            out.append({"task_id": task_id, **history.where(sink), "namespace": sink.namespace,
                        **row})
    return out


def timeout_of(sink: Any, info: Any) -> float | None:
    """The attempt's own timeout (its begin record) when it can still expire."""
    if str(info.state) not in ui.ABORTABLE:
        return None
    try:
        return float(sink.transaction(info.epoch, info.attempt).timeout_s)
    except TpcError:
        return None


def _same_target(a: str, b: str) -> bool:
    return a.rstrip("/") == b.rstrip("/")


def _names_sink(sink: Any, target: str) -> bool:
    """Whether ``target`` names this sink: a table by its URI or by its location."""
    table = history.table_uri(sink)
    return _same_target(sink.target, target) or (table is not None
                                                 and _same_target(table, target))


def resolve(dag_id: str, run_id: str, epoch: str, attempt: int, *,
            task_id: str | None = None, target: str | None = None,
            namespace: str | None = None, txn_id: str | None = None,
            require_identity: bool = False) -> Found | None:
    """The one transaction of the run with this identity, or None if there is none.

    ``task_id`` or ``target`` + ``namespace`` pick the target; ``txn_id``, when given,
    must agree.  ``require_identity``: refuse a request naming neither (an action must
    say which target it means, even where the run happens to hold only one).  Raises
    :class:`Ambiguous` when more than one transaction matches.
    """
    if require_identity and task_id is None and (target is None or namespace is None):
        raise Ambiguous("name the transaction: task_id (the task that began it) or target "
                        "and namespace, with epoch and attempt")
    found: list[Found] = []
    contradicts: list[str] = []  # the task named, but the other fields name another one
    for tid, doc in run_docs(dag_id, run_id):
        if task_id is not None and tid != task_id:
            continue
        if doc.get("epoch") != epoch:
            continue
        hook = hook_for(doc)
        sink = hook.get_sink()
        wrong = [f"{name} {value!r}" for name, value, ok in (
            ("target", target, target is None or _names_sink(sink, target)),
            ("namespace", namespace, namespace is None or sink.namespace == namespace))
            if not ok]
        for info in hook.run_attempts(doc, dag_id, run_id):
            if info.attempt != attempt:
                continue
            if txn_id is not None and info.txn_id != txn_id:
                wrong.append(f"txn_id {txn_id!r}")
            if wrong:
                if task_id is not None:
                    contradicts.append(f"task {tid} began {info.txn_id} of "
                                       f"{history.shown_target(sink)}, "
                                       f"not {' / '.join(wrong)}")
                continue
            found.append(Found(dag_id, run_id, tid, sink, info))
    if not found and contradicts:
        raise Ambiguous(f"the request names two different transactions: {contradicts[0]}")
    if len(found) > 1:
        which = ", ".join(f"{f.task_id} ({history.shown_target(f.sink)})" for f in found)
        raise Ambiguous(f"{epoch}/{attempt} of run {run_id} is a transaction of several "
                        f"targets: {which}; name one by task_id, or target and namespace")
    return found[0] if found else None


def abort(found: Found, user: str, via: str) -> dict[str, Any]:
    """Abort one resolved transaction; say ``already aborted`` when it was; write the
    action into Airflow's audit log with the user, the target and the transaction id.

    Who decided is the ledger's answer (:func:`admin.abort`: the abort decision is a
    put-if-absent), not the state read before: an abort that lands between that read
    and this one's decision makes this one "already aborted".  An attempt aborted by a
    call that died before removing its staging is "already aborted" too, and the
    staging it left is removed."""
    from airflow_tpc.airflow.utils import admin
    from airflow_tpc.airflow.utils.metrics import ABORTS, TpcMetrics

    ident = found.identity()
    result = admin.abort(found.sink, found.info.epoch, found.info.attempt,
                         ABORT_REASON.format(user=user))
    if result["refused"]:
        result["outcome"] = "refused"
    elif result["aborted"]:
        result["outcome"] = "aborted"
        # counted as the abort task counts its own: one per attempt this call aborted
        TpcMetrics(found.sink.namespace, found.sink.target).incr(ABORTS,
                                                                  len(result["aborted"]))
        from airflow_tpc.airflow.utils.lineage_abort import abort_summary, emit_abort

        emit_abort(found.dag_id, found.task_id,  # no task, no listener: lineage of its own
                   [(found.sink, abort_summary(found.info.epoch, found.sink.namespace,
                                               result["aborted"]))])
    else:
        result["outcome"] = "already aborted"
        state = [i.state for i in found.sink.describe(found.info.epoch)
                 if i.attempt == found.info.attempt]
        result["state"] = str(state[0] if state else found.info.state)
    result.update(ident)
    audit(found, user, via, result["outcome"])
    return result


def audit(found: Any, user: str, via: str, outcome: str, **more: Any) -> None:
    """One row of Airflow's own audit log (``log`` table; the UI's Audit Log, the REST
    API's ``/api/v2/eventLogs``) for an action on a transaction (:class:`Found`, or a
    group's :class:`~airflow_tpc.airflow.ui.groups.FoundGroup`; ``more`` goes into
    ``extra`` too)."""
    from airflow.models.log import Log
    from airflow.utils.session import create_session

    extra = {**found.identity(), **more, "outcome": outcome, "via": via}
    with create_session() as session:
        session.add(Log(event=AUDIT_EVENT, owner=user, owner_display_name=user,
                        extra=json.dumps(extra), dag_id=found.dag_id, run_id=found.run_id,
                        task_id=found.task_id))


def audit_refusal(dag_id: str, run_id: str, user: str, via: str, request: dict[str, Any],
                  error: str) -> None:
    """The audit row of an abort refused before it named one transaction it could act on
    (a group's member, a group that cannot be opened, a damaged ledger): what the request
    named, ``outcome`` refused, and why."""
    from airflow.models.log import Log
    from airflow.utils.session import create_session

    extra = {**request, "outcome": "refused", "via": via, "error": error}
    with create_session() as session:
        session.add(Log(event=AUDIT_EVENT, owner=user, owner_display_name=user,
                        extra=json.dumps(extra), dag_id=dag_id, run_id=run_id,
                        task_id=request.get("task_id")))


def manifest_view(sink: Any, info: Any) -> dict[str, Any]:
    """What an attempt published or sealed, for the manifest page, on any store:

    * staged (pre-committed, or committed and not yet promoted): the sealed manifest in
      staging (:meth:`Sink.read_manifest`);
    * committed and published: the epoch's published marker, which gives the same files
      (size, checksum, rows) where readers find them;
    * committed and since superseded: the decision's digest and totals only (the files were
      replaced by a later attempt);
    * aborted / expired / open: nothing was sealed, or staging was deleted.
    """
    from airflow_tpc.core import promote

    txn = sink.transaction(info.epoch, info.attempt)
    manifest = sink.read_manifest(txn)
    if manifest is not None:
        return {"source": "sealed manifest in staging", "uri": sink.manifest_uri(txn),
                "digest": manifest.digest, "files": [f.to_dict() for f in manifest.files],
                "totals": (manifest.total_files, manifest.total_bytes, manifest.total_rows)}
    if str(info.state) == "COMMITTED":
        marker = promote.read_marker(sink.layout, info.epoch)
        if marker is not None and marker["attempt"] == info.attempt:
            totals = marker.get("totals") or {}
            return {"source": "published marker (what readers see)",
                    "uri": sink.storage.uri(sink.layout.marker(info.epoch)),
                    "digest": marker["manifest_digest"], "files": marker["files"],
                    "totals": (totals.get("files"), totals.get("bytes"), totals.get("rows"))}
        summary = sink.sealed(txn)
        if summary is not None:
            return {"source": "commit decision (its files were replaced by a later attempt)",
                    "uri": None, "digest": summary.digest, "files": None,
                    "totals": (summary.total_files, summary.total_bytes, summary.total_rows)}
    why = {"OPEN": "not pre-committed yet: no manifest is sealed",
           "ABORTED": "aborted: its staged files and manifest were deleted",
           "EXPIRED": "expired: its staged files and manifest were deleted"}
    return {"source": why.get(str(info.state), f"{info.state}: no manifest to show"),
            "uri": None, "digest": None, "files": None, "totals": (info.files, info.bytes,
                                                                    info.rows)}

