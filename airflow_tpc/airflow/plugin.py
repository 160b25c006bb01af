"""UI plugin: a page listing a DAG run's transactions, with an Abort action.

Plugin FastAPI routes get no authentication for free, so every route here depends
on Airflow's own auth: the JWT (header or the UI's cookie) is resolved by the auth
manager, and the user must be allowed to read (GET) or edit (PUT) the DAG's runs.
"""

# No ``from __future__ import annotations`` here: FastAPI must see the real annotations
# (Depends/Form) of route functions whose names are imported inside create_app().
import html
from typing import Any
from urllib.parse import urlencode

from airflow.plugins_manager import AirflowPlugin

from airflow_tpc.airflow.links import PLUGIN_URL_PREFIX, ManifestLink, TransactionLink

ABORT_REASON = "aborted from the airflow-tpc UI by {user}"


def _run_docs(dag_id: str, run_id: str) -> list[tuple[str, dict[str, Any]]]:
    """(task_id, txn XCom) of every transaction begun in this run."""
    import json

    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    from airflow_tpc.airflow.hooks import TXN_XCOM_KEY

    with create_session() as session:
        rows = session.execute(select(XComModel.task_id, XComModel.value).where(
            XComModel.dag_id == dag_id, XComModel.run_id == run_id,
            XComModel.key == TXN_XCOM_KEY)).all()
    return [(task_id, json.loads(raw) if isinstance(raw, str | bytes) else raw)
            for task_id, raw in rows]


def _sink_for(doc: dict[str, Any]) -> Any:
    from airflow_tpc.airflow.hooks import TpcHook

    conn_id = doc.get("storage_conn_id") or None
    connection = None
    if conn_id:
        from airflow.models.connection import Connection

        connection = Connection.get_connection_from_secrets(conn_id)
    return TpcHook(doc["target"], doc["namespace"], storage_conn_id=conn_id,
                   storage_options=doc.get("storage_options") or None,
                   connection=connection).get_sink()


def _run_transactions(dag_id: str, run_id: str) -> list[dict[str, Any]]:
    """Every attempt this run began (all tries), with its state from the ledger."""
    out = []
    for task_id, doc in _run_docs(dag_id, run_id):
        sink = _sink_for(doc)
        for info in sink.describe(doc["epoch"]):
            owner = info.owner or {}
            if (owner.get("dag_id"), owner.get("run_id")) != (dag_id, run_id) \
                    and info.attempt != doc.get("attempt"):
                continue
            out.append({"task_id": task_id, "target": sink.target, "namespace": sink.namespace,
                        **{k: v for k, v in info.to_dict().items() if k != "owner"}})
    return out


def _abort(dag_id: str, run_id: str, epoch: str, attempt: int, user: str) -> dict[str, Any]:
    from airflow_tpc.airflow import admin

    for _, doc in _run_docs(dag_id, run_id):
        if doc["epoch"] != epoch:
            continue
        sink = _sink_for(doc)
        mine = {i.attempt for i in sink.describe(epoch)
                if (i.owner or {}).get("run_id") == run_id or i.attempt == doc.get("attempt")}
        if attempt in mine:
            return admin.abort(sink, epoch, attempt, ABORT_REASON.format(user=user))
    raise LookupError(f"no transaction {epoch}/{attempt} in run {run_id} of {dag_id}")


def _page(dag_id: str, run_id: str, txns: list[dict[str, Any]], message: str = "") -> str:
    esc = html.escape
    rows = []
    for t in txns:
        can_abort = t["state"] in ("OPEN", "PRECOMMITTED")
        form = (f'<form method="post" action="{PLUGIN_URL_PREFIX}/abort?'
                f'{esc(urlencode({"dag_id": dag_id, "run_id": run_id}))}">'
                f'<input type="hidden" name="epoch" value="{esc(t["epoch"])}">'
                f'<input type="hidden" name="attempt" value="{t["attempt"]}">'
                '<button type="submit">Abort</button></form>') if can_abort else ""
        rows.append("<tr>" + "".join(f"<td>{esc(str(t.get(k)))}</td>" for k in (
            "txn_id", "state", "published", "superseded", "files", "rows", "bytes",
            "staging_files", "reason")) + f"<td>{form}</td></tr>")
    head = "".join(f"<th>{h}</th>" for h in ("txn", "state", "published", "superseded",
                                              "files", "rows", "bytes", "staging files",
                                              "reason", ""))
    return (f"<html><head><title>airflow-tpc</title></head><body>"
            f"<h2>Transactions of {esc(dag_id)} / {esc(run_id)}</h2>"
            f"<p>{esc(message)}</p><table border=1><tr>{head}</tr>{''.join(rows)}</table>"
            "</body></html>")


def create_app() -> Any:
    from typing import Annotated

    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
    from airflow.api_fastapi.core_api.security import GetUserDep, requires_access_dag
    from fastapi import Depends, FastAPI, Form, HTTPException
    from fastapi.responses import HTMLResponse

    app = FastAPI(title="airflow-tpc", description="Transactions of DAG runs (airflow-tpc)")
    can_read = Depends(requires_access_dag("GET", DagAccessEntity.RUN))
    can_edit = Depends(requires_access_dag("PUT", DagAccessEntity.RUN))

    @app.get("/api/transactions", dependencies=[can_read])
    def list_transactions(dag_id: str, run_id: str) -> dict[str, Any]:
        return {"dag_id": dag_id, "run_id": run_id,
                "transactions": _run_transactions(dag_id, run_id)}

    @app.get("/", response_class=HTMLResponse, dependencies=[can_read])
    def page(dag_id: str, run_id: str) -> str:
        return _page(dag_id, run_id, _run_transactions(dag_id, run_id))

    @app.post("/abort", response_class=HTMLResponse, dependencies=[can_edit])
    def abort_page(dag_id: str, run_id: str, user: GetUserDep,
                   epoch: Annotated[str, Form()], attempt: Annotated[int, Form()]) -> str:
        try:
            result = _abort(dag_id, run_id, epoch, attempt, user.get_name())
        except LookupError as exc:
            raise HTTPException(status_code=404, detail=str(exc)) from None
        return _page(dag_id, run_id, _run_transactions(dag_id, run_id),
                     f"aborted: {result['aborted']} refused: {result['refused']}")

    @app.post("/api/abort", dependencies=[can_edit])
    def abort_api(dag_id: str, run_id: str, epoch: str, attempt: int,
                  user: GetUserDep) -> dict[str, Any]:
        try:
            return _abort(dag_id, run_id, epoch, attempt, user.get_name())
        except LookupError as exc:
            raise HTTPException(status_code=404, detail=str(exc)) from None

    return app


class AirflowTpcPlugin(AirflowPlugin):
    """Registers the transactions page and the provider's extra links."""

    name = "airflow_tpc"
    operator_extra_links = [ManifestLink(), TransactionLink()]

    @property
    def fastapi_apps(self) -> list[dict[str, Any]]:  # type: ignore[override]
        """Built on first use only: workers and the scheduler never import FastAPI for it."""
        if not _APPS:
            _APPS.append({"app": create_app(), "url_prefix": PLUGIN_URL_PREFIX,
                          "name": "airflow-tpc transactions"})
        return _APPS


_APPS: list[dict[str, Any]] = []
