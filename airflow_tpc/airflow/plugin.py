"""UI plugin: a page listing a DAG run's transactions, with an Abort action.

Plugin FastAPI routes get no authentication for free, so every route here depends
on Airflow's own auth: the JWT (header or the UI's cookie) is resolved by the auth
manager, and the user must be allowed to read (GET) or edit (PUT) the DAG's runs.

The UI's cookie is sent by the browser on its own, so a state-changing request must
also be one a cross-site page cannot forge (see :func:`csrf_refusal`): no foreign
``Origin``/``Referer``/``Sec-Fetch-Site``, a JSON body and the ``X-Airflow-TPC`` header.
An HTML form can send neither; ``fetch`` from another origin needs a CORS preflight.
"""

# No ``from __future__ import annotations`` here: FastAPI must see the real annotations
# (Depends/Body) of route functions whose names are imported inside create_app().
import html
import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlencode, urlsplit

from airflow.plugins_manager import AirflowPlugin

from airflow_tpc.airflow.links import PLUGIN_URL_PREFIX, ManifestLink, TransactionLink

ABORT_REASON = "aborted from the airflow-tpc UI by {user}"

#: The custom header every state-changing request must carry (any non-empty value).
CSRF_HEADER = "X-Airflow-TPC"
_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})
_DEFAULT_PORTS = {"http": 80, "https": 443}


def _origin(url: str) -> tuple[str, str, int] | None:
    """(scheme, host, port) of an absolute http(s) URL; None when it has none."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.hostname:
        return None
    return scheme, parts.hostname.lower(), port or _DEFAULT_PORTS[scheme]


def _api_base_url() -> str:
    from airflow.configuration import conf

    return conf.get("api", "base_url", fallback="") or ""


def csrf_refusal(method: str, headers: Mapping[str, str], request_url: str,
                 base_url: str = "") -> str | None:
    """Why a request could have been forged by a cross-site page (None when it could not).

    Safe methods pass. A state-changing request needs all of:

    * no cross-origin source: ``Sec-Fetch-Site`` (when sent) is ``same-origin`` or
      ``none``; ``Origin`` (or, without it, ``Referer``) when sent names the API server:
      ``[api] base_url`` when it is an absolute URL, else the request's own scheme+host;
    * the ``X-Airflow-TPC`` header (a cross-site form cannot set a header; ``fetch`` from
      another origin needs a CORS preflight for it);
    * a JSON body (``Content-Type: application/json``): form-encoded, multipart and
      text/plain bodies, the only ones an HTML form can send, are refused.

    ``headers`` must be case-insensitive (Starlette's are).
    """
    if method.upper() in _SAFE_METHODS:
        return None
    expected = _origin(base_url) or _origin(request_url)
    fetch_site = (headers.get("sec-fetch-site") or "").strip().lower()
    if fetch_site and fetch_site not in ("same-origin", "none"):
        return f"cross-site request refused (Sec-Fetch-Site: {fetch_site})"
    for name in ("origin", "referer"):
        value = headers.get(name)
        if value is None:
            continue
        if expected is None or _origin(value) != expected:
            return (f"cross-origin request refused: {name.capitalize()} {value[:200]!r} "
                    f"is not the API server's origin")
        break  # Origin present and right: the Referer (a path within it) adds nothing
    if not (headers.get(CSRF_HEADER) or "").strip():
        return f"state-changing requests need the {CSRF_HEADER} header"
    media_type = (headers.get("content-type") or "").split(";", 1)[0].strip().lower()
    if media_type != "application/json":
        return ("state-changing requests need a JSON body (Content-Type: application/json), "
                f"not {media_type or 'no content type'}")
    return None


def _run_docs(dag_id: str, run_id: str) -> list[tuple[str, dict[str, Any]]]:
    """(task_id, txn XCom) of every transaction begun in this run."""
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


def _hook_for(doc: dict[str, Any]) -> Any:
    """The hook of the sink a transaction XCom names; the credentials connection is looked
    up by name here, in the API server (the XCom holds only its name)."""
    from airflow.models.connection import Connection

    from airflow_tpc.airflow.hooks import SinkArgs

    args = SinkArgs.from_txn_doc(doc)
    connection = catalog = None
    if args.storage_conn_id:
        connection = Connection.get_connection_from_secrets(args.storage_conn_id)
    if args.catalog_conn_id:  # a table target's catalog, also by name only
        catalog = Connection.get_connection_from_secrets(args.catalog_conn_id)
    return args.hook(connection=connection, catalog_connection=catalog)


def _run_transactions(dag_id: str, run_id: str) -> list[dict[str, Any]]:
    """Every attempt this run began (all tries), with its state from the ledger."""
    out = []
    for task_id, doc in _run_docs(dag_id, run_id):
        hook = _hook_for(doc)
        sink = hook.get_sink()
        for info in hook.run_attempts(doc, dag_id, run_id):
            out.append({"task_id": task_id, "target": sink.target, "namespace": sink.namespace,
                        **{k: v for k, v in info.to_dict().items() if k != "owner"}})
    return out


def _abort(dag_id: str, run_id: str, epoch: str, attempt: int, user: str) -> dict[str, Any]:
    from airflow_tpc.airflow import admin

    for _, doc in _run_docs(dag_id, run_id):
        if doc["epoch"] != epoch:
            continue
        hook = _hook_for(doc)
        if attempt in {i.attempt for i in hook.run_attempts(doc, dag_id, run_id)}:
            return admin.abort(hook.get_sink(), epoch, attempt, ABORT_REASON.format(user=user))
    raise LookupError(f"no transaction {epoch}/{attempt} in run {run_id} of {dag_id}")


_PAGE_SCRIPT = """
async function tpcAbort(button) {
  if (!window.confirm("Abort transaction " + button.dataset.txn
                      + "? Its staged files are deleted; this cannot be undone.")) {
    return;
  }
  const message = document.getElementById("tpc-message");
  button.disabled = true;
  try {
    const response = await fetch(button.dataset.url, {
      method: "POST",
      credentials: "same-origin",
      headers: {"Content-Type": "application/json", "__HEADER__": "1"},
      body: JSON.stringify({epoch: button.dataset.epoch,
                            attempt: Number(button.dataset.attempt)}),
    });
    const body = await response.json().catch(() => ({}));
    if (!response.ok) {
      const detail = typeof body.detail === "string" ? body.detail : JSON.stringify(body);
      message.textContent = "abort failed (" + response.status + "): " + detail;
      button.disabled = false;
      return;
    }
    message.textContent = "aborted: " + JSON.stringify(body.aborted)
      + " refused: " + JSON.stringify(body.refused) + " (reload to see the new state)";
    button.textContent = "Aborted";
  } catch (err) {
    message.textContent = "abort failed: " + err;
    button.disabled = false;
  }
}
""".replace("__HEADER__", CSRF_HEADER)


def _page(dag_id: str, run_id: str, txns: list[dict[str, Any]], abort_url: str) -> str:
    """The run's transactions; Abort posts JSON with the custom header (never a form)."""
    esc = html.escape
    url = f"{abort_url}?{urlencode({'dag_id': dag_id, 'run_id': run_id})}"
    rows = []
    for t in txns:
        button = (f'<button type="button" onclick="tpcAbort(this)" data-url="{esc(url)}" '
                  f'data-txn="{esc(str(t["txn_id"]))}" data-epoch="{esc(t["epoch"])}" '
                  f'data-attempt="{int(t["attempt"])}">Abort</button>'
                  ) if t["state"] in ("OPEN", "PRECOMMITTED") else ""
        rows.append("<tr>" + "".join(f"<td>{esc(str(t.get(k)))}</td>" for k in (
            "txn_id", "state", "published", "superseded", "files", "rows", "bytes",
            "staging_files", "reason")) + f"<td>{button}</td></tr>")
    head = "".join(f"<th>{h}</th>" for h in ("txn", "state", "published", "superseded",
                                              "files", "rows", "bytes", "staging files",
                                              "reason", ""))
    return (f"<html><head><title>airflow-tpc</title><script>{_PAGE_SCRIPT}</script></head>"
            f"<body><h2>Transactions of {esc(dag_id)} / {esc(run_id)}</h2>"
            f'<p id="tpc-message"></p><table border=1><tr>{head}</tr>{"".join(rows)}</table>'
            "</body></html>")


def create_app() -> Any:
    from typing import Annotated

    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
    from airflow.api_fastapi.core_api.security import GetUserDep, requires_access_dag
    from fastapi import Body, Depends, FastAPI, HTTPException, Request
    from fastapi.responses import HTMLResponse
    from pydantic import BaseModel, ConfigDict, Field, StrictInt

    from airflow_tpc import TpcError

    def refuse_forgeable(request: Request) -> None:
        """App-wide: every state-changing route of this app, present or future."""
        reason = csrf_refusal(request.method, request.headers, str(request.url),
                              _api_base_url())
        if reason:
            raise HTTPException(status_code=403, detail=reason)

    class AbortRequest(BaseModel):
        model_config = ConfigDict(extra="forbid")
        epoch: str = Field(min_length=1)
        attempt: StrictInt = Field(ge=1)

    app = FastAPI(title="airflow-tpc", description="Transactions of DAG runs (airflow-tpc)",
                  dependencies=[Depends(refuse_forgeable)])
    can_read = Depends(requires_access_dag("GET", DagAccessEntity.RUN))
    can_edit = Depends(requires_access_dag("PUT", DagAccessEntity.RUN))

    @app.get("/api/transactions", dependencies=[can_read])
    def list_transactions(dag_id: str, run_id: str) -> dict[str, Any]:
        return {"dag_id": dag_id, "run_id": run_id,
                "transactions": _run_transactions(dag_id, run_id)}

    @app.get("/", response_class=HTMLResponse, dependencies=[can_read])
    def page(dag_id: str, run_id: str, request: Request) -> str:
        # root_path is where this app is mounted (e.g. /airflow-tpc), behind any proxy prefix.
        abort_url = f"{request.scope.get('root_path', '').rstrip('/')}/api/abort"
        return _page(dag_id, run_id, _run_transactions(dag_id, run_id), abort_url)

    # dag_id stays a query parameter: it is what requires_access_dag authorizes, so the
    # body cannot name another DAG. /abort was the old form's target: same rules now.
    @app.post("/abort", dependencies=[can_edit], include_in_schema=False)
    @app.post("/api/abort", dependencies=[can_edit])
    def abort_api(dag_id: str, run_id: str, body: Annotated[AbortRequest, Body()],
                  user: GetUserDep) -> dict[str, Any]:
        try:
            return _abort(dag_id, run_id, body.epoch, body.attempt, user.get_name())
        except LookupError as exc:
            raise HTTPException(status_code=404, detail=str(exc)) from None
        except TpcError as exc:
            raise HTTPException(status_code=409, detail=str(exc)) from None

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
