"""UI plugin: the run page, the target page and the manifest page, with an Abort action.

Served by a FastAPI app under Airflow's API server (``/airflow-tpc``) and shown inside
Airflow's UI as external views: an entry of the Plugins menu and a *Transactions* tab
of every DAG run (:data:`EXTERNAL_VIEWS`).

Plugin FastAPI routes get no authentication for free, so every route here depends
on Airflow's own auth (``GetUserDep``: the bearer JWT or the UI's ``_token`` cookie,
validated by the auth manager), and the user must be allowed to read (GET) the DAG's
runs to see a page, edit (PUT) them to abort.

The UI's cookie is sent by the browser on its own, so a state-changing request must
also be one a cross-site page cannot forge: no foreign ``Origin``/``Referer``/
``Sec-Fetch-Site`` and a JSON body (:func:`csrf_refusal`), and the ``X-Airflow-TPC``
header carrying the session's token (:func:`csrf_token`, an HMAC of the session's JWT)
when it authenticates with the cookie.  An HTML form can send neither; ``fetch`` from
another origin needs a CORS preflight, and cannot read the page that holds the token.
"""

# No ``from __future__ import annotations`` here: FastAPI must see the real annotations
# (Depends/Body) of route functions whose names are imported inside create_app().
import hashlib
import hmac
import json
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from airflow.plugins_manager import AirflowPlugin

from airflow_tpc import TpcError
from airflow_tpc.airflow.links import PLUGIN_URL_PREFIX, ManifestLink, TransactionLink
from airflow_tpc.airflow.ui import render as ui

ABORT_REASON = "aborted from the airflow-tpc UI by {user}"

#: The header every state-changing request must carry: the session's token when the request
#: authenticates with the UI's cookie, any non-empty value with a bearer token.
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


def csrf_token(credential: str) -> str:
    """The page's anti-forgery token, bound to the session: an HMAC of the JWT the browser
    authenticates with, keyed by the API server's secret.  A cross-site page can neither
    read the cookie nor the page, so it cannot compute or learn it; a new login (a new
    JWT) gets a new token."""
    from airflow.configuration import conf

    secret = (conf.get("api", "secret_key", fallback="")
              or conf.get("api_auth", "jwt_secret", fallback="") or "airflow-tpc")
    return hmac.new(secret.encode(), b"airflow-tpc-csrf\0" + credential.encode(),
                    hashlib.sha256).hexdigest()


def session_csrf_refusal(headers: Mapping[str, str], cookies: Mapping[str, str]) -> str | None:
    """A request that authenticates with the UI's cookie (no ``Authorization`` header) must
    carry the session's token in ``X-Airflow-TPC``; an API client sending its own bearer
    token cannot be forged by another site and needs only a non-empty header."""
    from airflow.api_fastapi.auth.managers.base_auth_manager import COOKIE_NAME_JWT_TOKEN

    if (headers.get("authorization") or "").lower().startswith("bearer "):
        return None
    cookie = cookies.get(COOKIE_NAME_JWT_TOKEN)
    if not cookie:
        return None  # unauthenticated: the auth dependency answers 401
    sent = (headers.get(CSRF_HEADER) or "").strip()
    if not hmac.compare_digest(sent.encode(), csrf_token(cookie).encode()):
        return (f"the {CSRF_HEADER} header does not carry this session's token: reload the "
                "page and try again")
    return None


# ----------------------------------------------------------------------------- data
def _loads(raw: Any) -> Any:
    return json.loads(raw) if isinstance(raw, str | bytes) else raw


def _dag_run_exists(dag_id: str, run_id: str) -> bool:
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        return session.scalar(select(DagRun.id).where(
            DagRun.dag_id == dag_id, DagRun.run_id == run_id)) is not None


def _run_docs(dag_id: str, run_id: str) -> list[tuple[str, dict[str, Any]]]:
    """(task_id, txn XCom) of every TPC task that began a transaction in this run."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    from airflow_tpc.airflow.hooks import TXN_XCOM_KEY

    with create_session() as session:
        rows = session.execute(select(XComModel.task_id, XComModel.value).where(
            XComModel.dag_id == dag_id, XComModel.run_id == run_id,
            XComModel.key == TXN_XCOM_KEY).order_by(XComModel.task_id)).all()
    return [(task_id, _loads(raw)) for task_id, raw in rows]


def _task_doc(dag_id: str, task_id: str) -> tuple[str, dict[str, Any]] | None:
    """(run_id, txn XCom) of the newest transaction a task began: which target it writes."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    from airflow_tpc.airflow.hooks import TXN_XCOM_KEY

    with create_session() as session:
        row = session.execute(select(XComModel.run_id, XComModel.value).where(
            XComModel.dag_id == dag_id, XComModel.task_id == task_id,
            XComModel.key == TXN_XCOM_KEY).order_by(XComModel.timestamp.desc()).limit(1)).first()
    return None if row is None else (row[0], _loads(row[1]))


def _recent_docs(dag_ids: set[str], limit: int = 200) -> list[dict[str, Any]]:
    """The newest transaction XComs of DAGs the user may read (the index page): the
    metadata DB only, no storage call, so the page stays fast with many targets."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    from airflow_tpc.airflow.hooks import TXN_XCOM_KEY

    if not dag_ids:
        return []
    with create_session() as session:
        rows = session.execute(select(
            XComModel.dag_id, XComModel.run_id, XComModel.task_id, XComModel.value,
            XComModel.timestamp).where(XComModel.key == TXN_XCOM_KEY,
                                       XComModel.dag_id.in_(sorted(dag_ids)))
            .order_by(XComModel.timestamp.desc()).limit(limit)).all()
    return [{"dag_id": d, "run_id": r, "task_id": t, "doc": _loads(v), "timestamp": ts}
            for d, r, t, v, ts in rows]


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


def _info_dict(info: Any) -> dict[str, Any]:
    return info.to_dict()


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


def _timeout(sink: Any, info: Any) -> float | None:
    """The attempt's own timeout (its begin record) when it can still expire."""
    if str(info.state) not in ui.ABORTABLE:
        return None
    try:
        return float(sink.transaction(info.epoch, info.attempt).timeout_s)
    except TpcError:
        return None


def _find_attempt(dag_id: str, run_id: str, epoch: str, attempt: int,
                  task_id: str | None = None) -> tuple[str, Any, Any] | None:
    """(task_id, sink, info) of an attempt this run owns, or None."""
    for tid, doc in _run_docs(dag_id, run_id):
        if task_id is not None and tid != task_id:
            continue
        if doc.get("epoch") != epoch:
            continue
        hook = _hook_for(doc)
        for info in hook.run_attempts(doc, dag_id, run_id):
            if info.attempt == attempt:
                return tid, hook.get_sink(), info
    return None


def _abort(dag_id: str, run_id: str, epoch: str, attempt: int, user: str) -> dict[str, Any]:
    from airflow_tpc.airflow import admin

    found = _find_attempt(dag_id, run_id, epoch, attempt)
    if found is None:
        raise LookupError(f"no transaction {epoch}/{attempt} in run {run_id} of {dag_id}")
    return admin.abort(found[1], epoch, attempt, ABORT_REASON.format(user=user))


def manifest_view(sink: Any, info: Any) -> dict[str, Any]:
    """What an attempt published or sealed, for the manifest page, on any store:

    * staged (pre-committed, or committed and not yet promoted): the sealed manifest in
      staging (:meth:`Sink.read_manifest`);
    * committed and published: the epoch's published marker, which lists the same files
      (size, checksum, rows) where readers find them;
    * committed and since superseded: the decision's digest and totals only (the files were
      replaced by a later attempt);
    * aborted / expired / open: nothing was sealed, or staging was deleted.
    """
    from airflow_tpc import promote

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


# ----------------------------------------------------------------------------- pages
def _owner_of(info: Any) -> tuple[str, str] | None:
    owner = info.owner or {}
    if owner.get("dag_id") and owner.get("run_id"):
        return str(owner["dag_id"]), str(owner["run_id"])
    return None


def _airflow_run_href(dag_id: str, run_id: str) -> str:
    return f"/dags/{quote(dag_id, safe='')}/runs/{quote(run_id, safe='')}"


def _run_page(base: str, dag_id: str, run_id: str, csrf: str, now: float) -> str:
    abort_url = ui.url(f"{base}/api/abort", dag_id=dag_id, run_id=run_id)
    sections = []
    for task_id, doc in _run_docs(dag_id, run_id):
        hook = _hook_for(doc)
        sink = hook.get_sink()
        infos = sorted(hook.run_attempts(doc, dag_id, run_id),
                       key=lambda i: (i.epoch, i.attempt), reverse=True)
        rows = [ui.Row(_info_dict(i), timeout_s=_timeout(sink, i), abort_url=abort_url,
                       manifest_href=ui.url(f"{base}/manifest", dag_id=dag_id, run_id=run_id,
                                            task_id=task_id, epoch=i.epoch, attempt=i.attempt))
                for i in infos]
        sections.append(ui.Section(
            title=task_id, target=sink.target, namespace=sink.namespace, rows=rows,
            links=[("All transactions of this target",
                    ui.url(f"{base}/target", dag_id=dag_id, task_id=task_id))]))
    body = (ui.crumbs([("airflow-tpc", f"{base}/"), (dag_id, None), (run_id, None)])
            + f"<h1>Transactions of run <code>{ui.esc(run_id)}</code></h1>"
            + f'<p class="sub">DAG <code>{ui.esc(dag_id)}</code> · '
            + f'<a href="{ui.esc(_airflow_run_href(dag_id, run_id))}" target="_top">'
            + "open the run in Airflow</a></p>")
    if sections:
        body += "".join(ui.section(s, now) for s in sections)
    else:
        body += ('<section class="card"><div class="empty">This run began no airflow-tpc '
                 "transaction (yet).</div></section>")
    return ui.page(f"{dag_id} / {run_id}", body, csrf=csrf, now=now)


def _target_page(base: str, dag_id: str, task_id: str, doc: dict[str, Any],
                 can_read: Any, csrf: str, now: float) -> str:
    hook = _hook_for(doc)
    sink = hook.get_sink()
    rows, hidden = [], 0
    infos = sorted(sink.describe(), key=lambda i: (i.started_at or 0, i.epoch, i.attempt),
                   reverse=True)
    for info in infos:
        owner = _owner_of(info)
        if owner is not None and owner[0] != dag_id and not can_read(owner[0]):
            hidden += 1  # begun by a DAG this user may not read
            continue
        row = ui.Row(_info_dict(info), timeout_s=_timeout(sink, info),
                     manifest_href=ui.url(f"{base}/manifest", dag_id=dag_id, task_id=task_id,
                                          epoch=info.epoch, attempt=info.attempt))
        if owner is not None:
            odag, orun = owner
            row.owner = (f"{odag} / {orun}", ui.url(f"{base}/run", dag_id=odag, run_id=orun))
            row.abort_url = ui.url(f"{base}/api/abort", dag_id=odag, run_id=orun)
        rows.append(row)
    note = (f"{hidden} transaction(s) begun by DAGs you may not read are not shown."
            if hidden else None)
    sec = ui.Section(title=f"{dag_id}.{task_id}", target=sink.target, namespace=sink.namespace,
                     rows=rows, note=note)
    body = (ui.crumbs([("airflow-tpc", f"{base}/"), (dag_id, None), (task_id, None)])
            + f"<h1>Transactions of target <code>{ui.esc(sink.target)}</code></h1>"
            + '<p class="sub">Every epoch and attempt in the ledger, newest first.</p>'
            + ui.section(sec, now, with_owner=True))
    return ui.page(f"target {sink.target}", body, csrf=csrf, now=now)


def _manifest_page(base: str, dag_id: str, back: tuple[str, str], sink: Any, info: Any,
                   now: float) -> str:
    view = manifest_view(sink, info)
    files, (tf, tb, tr) = view["files"], view["totals"]
    facts = [("Transaction", f"<code>{ui.esc(info.txn_id)}</code>"),
             ("State", ui.state_badge(_info_dict(info))),
             ("Target", f"<code>{ui.esc(sink.target)}</code>"),
             ("Source", ui.esc(view["source"])),
             ("Location", ui.text(view["uri"])),
             ("Digest", f'<code>{ui.text(view["digest"])}</code>'),
             ("Files", ui.number(tf)), ("Rows", ui.number(tr)),
             ("Size", ui.human_bytes(tb)),
             ("Started", ui.age(info.started_at, now)),
             ("Decided", ui.age(info.decided_at, now)),
             ("Reason", ui.text(info.reason))]
    dl = "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in facts)
    table = ""
    if files is not None:
        trs = "".join(
            f'<tr class="manifest-file"><td class="mono">{ui.esc(f["path"])}</td>'
            f'<td class="num" title="{int(f["size"])} bytes">{ui.human_bytes(f["size"])}</td>'
            f'<td class="num">{ui.number(f.get("rows"))}</td>'
            f'<td class="mono">{ui.text(f.get("checksum"))}</td></tr>' for f in files)
        table = ('<div class="table-wrap"><table id="manifest-files"><thead><tr><th>File</th>'
                 '<th class="num">Size</th><th class="num">Rows</th><th>Checksum</th></tr>'
                 f"</thead><tbody>{trs}</tbody></table></div>")
    body = (ui.crumbs([("airflow-tpc", f"{base}/"), back, (f"{info.epoch}/{info.attempt}", None)])
            + f"<h1>Manifest of <code>{ui.esc(info.txn_id)}</code></h1>"
            + f'<section class="card"><dl class="facts">{dl}</dl>{table}</section>')
    return ui.page(f"manifest {info.txn_id}", body, now=now)


def _index_page(base: str, docs: list[dict[str, Any]], now: float) -> str:
    trs = []
    for d in docs:
        doc = d["doc"]
        ts = d["timestamp"].timestamp() if d["timestamp"] is not None else None
        run_href = ui.url(f"{base}/run", dag_id=d["dag_id"], run_id=d["run_id"])
        target_href = ui.url(f"{base}/target", dag_id=d["dag_id"], task_id=d["task_id"])
        trs.append(
            f'<tr><td><a href="{ui.esc(run_href)}">'
            f'{ui.esc(d["dag_id"])} / {ui.esc(d["run_id"])}</a></td>'
            f'<td class="mono">{ui.esc(d["task_id"])}</td>'
            f'<td><a href="{ui.esc(target_href)}">'
            f'<code>{ui.esc(doc.get("target"))}</code></a></td>'
            f'<td class="mono">{ui.esc(doc.get("epoch"))}</td>'
            f'<td class="num">{ui.esc(doc.get("attempt"))}</td>'
            f"<td>{ui.age(ts, now)}</td></tr>")
    table = ('<div class="table-wrap"><table><thead><tr><th>Run</th><th>Task</th><th>Target</th>'
             '<th>Epoch</th><th class="num">Attempt</th><th>Begun</th></tr></thead>'
             f'<tbody>{"".join(trs)}</tbody></table></div>') if trs else \
        '<div class="empty">No airflow-tpc transaction in DAGs you may read.</div>'
    body = ("<h1>airflow-tpc transactions</h1>"
            '<p class="sub">The newest transactions begun by DAG runs you may read; open a '
            "run or a target for states from the ledger.</p>"
            f'<section class="card">{table}</section>')
    return ui.page("transactions", body, now=now)


def create_app() -> Any:
    from typing import Annotated

    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.base_auth_manager import COOKIE_NAME_JWT_TOKEN
    from airflow.api_fastapi.auth.managers.models.resource_details import (
        DagAccessEntity,
        DagDetails,
    )
    from airflow.api_fastapi.core_api.security import GetUserDep, requires_access_dag
    from fastapi import Body, Depends, FastAPI, HTTPException, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import HTMLResponse, JSONResponse, Response
    from pydantic import BaseModel, ConfigDict, Field, StrictInt
    from starlette.exceptions import HTTPException as StarletteHTTPException

    def refuse_forgeable(request: Request) -> None:
        """App-wide: every state-changing route of this app, present or future."""
        reason = csrf_refusal(request.method, request.headers, str(request.url),
                              _api_base_url())
        if reason is None and request.method.upper() not in _SAFE_METHODS:
            reason = session_csrf_refusal(request.headers, request.cookies)
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

    def base_of(request: Request) -> str:
        # root_path is where this app is mounted (e.g. /airflow-tpc), behind any proxy prefix.
        return request.scope.get("root_path", "").rstrip("/")

    def csrf_of(request: Request) -> str:
        cookie = request.cookies.get(COOKIE_NAME_JWT_TOKEN)
        return csrf_token(cookie) if cookie else ""

    def html_page(body: str, status: int = 200) -> HTMLResponse:
        return HTMLResponse(body, status_code=status,
                            headers={"Cache-Control": "no-store",
                                     "X-Content-Type-Options": "nosniff",
                                     "Referrer-Policy": "same-origin"})

    def wants_html(request: Request) -> bool:
        return request.method in ("GET", "HEAD") and "/api/" not in request.url.path

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        """Pages answer errors with a page (a 401 offers the login); the API with JSON."""
        if not wants_html(request):
            return JSONResponse({"detail": exc.detail}, status_code=exc.status_code,
                                headers=getattr(exc, "headers", None))
        titles = {401: "Not logged in", 403: "Forbidden", 404: "Not found"}
        login = None
        if exc.status_code == 401:
            login = "/auth/login?" + urlencode({"next": str(request.url)})
        return html_page(ui.error_page(exc.status_code, titles.get(exc.status_code, "Error"),
                                       str(exc.detail), login_href=login), exc.status_code)

    @app.exception_handler(RequestValidationError)
    async def bad_request(request: Request, exc: RequestValidationError) -> Response:
        if not wants_html(request):
            return JSONResponse({"detail": jsonable(exc.errors())}, status_code=422)
        missing = ", ".join(str(e["loc"][-1]) for e in exc.errors())
        return html_page(ui.error_page(422, "Bad request", f"missing or invalid: {missing}"),
                         422)

    def reader(user: Any) -> Any:
        """can_read(dag_id): the user may read that DAG's runs (target view filtering)."""
        manager = get_auth_manager()

        def can_read_dag(other: str) -> bool:
            return manager.is_authorized_dag(method="GET", access_entity=DagAccessEntity.RUN,
                                             details=DagDetails(id=other), user=user)
        return can_read_dag

    def known_run(dag_id: str, run_id: str) -> None:
        if not _dag_run_exists(dag_id, run_id):
            raise HTTPException(status_code=404, detail=f"no run {run_id!r} of DAG {dag_id!r}")

    @app.get("/api/transactions", dependencies=[can_read])
    def list_transactions(dag_id: str, run_id: str) -> dict[str, Any]:
        known_run(dag_id, run_id)
        return {"dag_id": dag_id, "run_id": run_id,
                "transactions": _run_transactions(dag_id, run_id)}

    @app.get("/", response_class=HTMLResponse)
    def index(request: Request, user: GetUserDep, dag_id: str | None = None,
              run_id: str | None = None) -> Response:
        """The navigation entry: recent runs with transactions.  With dag_id and run_id
        (links stored by earlier versions) it is that run's page."""
        if dag_id is not None and run_id is not None:
            requires_access_dag("GET", DagAccessEntity.RUN)(request, user)
            return run_page(request, dag_id, run_id)
        dag_ids = get_auth_manager().get_authorized_dag_ids(user=user, method="GET")
        return html_page(_index_page(base_of(request), _recent_docs(set(dag_ids)),
                                     time.time()))

    @app.get("/run", response_class=HTMLResponse, dependencies=[can_read])
    def run_page(request: Request, dag_id: str, run_id: str) -> Response:
        known_run(dag_id, run_id)
        return html_page(_run_page(base_of(request), dag_id, run_id, csrf_of(request),
                                   time.time()))

    @app.get("/target", response_class=HTMLResponse, dependencies=[can_read])
    def target_page(request: Request, dag_id: str, task_id: str,
                    user: GetUserDep) -> Response:
        found = _task_doc(dag_id, task_id)
        if found is None:
            raise HTTPException(status_code=404, detail=f"task {task_id!r} of DAG {dag_id!r} "
                                                        "has begun no airflow-tpc transaction")
        return html_page(_target_page(base_of(request), dag_id, task_id, found[1],
                                      reader(user), csrf_of(request), time.time()))

    @app.get("/manifest", response_class=HTMLResponse, dependencies=[can_read])
    def manifest_page(request: Request, dag_id: str, epoch: str, attempt: int,
                      user: GetUserDep, run_id: str | None = None,
                      task_id: str | None = None) -> Response:
        """An attempt's manifest: of a run (run_id) or of a task's target (task_id)."""
        base = base_of(request)
        missing = HTTPException(status_code=404, detail=f"no transaction {epoch}/{attempt}")
        if run_id is not None:
            known_run(dag_id, run_id)
            found = _find_attempt(dag_id, run_id, epoch, attempt, task_id)
            if found is None:
                raise missing
            _, sink, info = found
            back = (run_id, ui.url(f"{base}/run", dag_id=dag_id, run_id=run_id))
        elif task_id is not None:
            doc = _task_doc(dag_id, task_id)
            if doc is None:
                raise missing
            sink = _hook_for(doc[1]).get_sink()
            infos = [i for i in sink.describe(epoch) if i.attempt == attempt]
            if not infos:
                raise missing
            info = infos[0]
            owner = _owner_of(info)
            if owner is not None and owner[0] != dag_id and not reader(user)(owner[0]):
                raise missing  # not yours to see: indistinguishable from absent
            back = (f"{dag_id}.{task_id}", ui.url(f"{base}/target", dag_id=dag_id,
                                                  task_id=task_id))
        else:
            raise HTTPException(status_code=422, detail="give run_id or task_id")
        return html_page(_manifest_page(base, dag_id, back, sink, info, time.time()))

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


def jsonable(value: Any) -> Any:
    from fastapi.encoders import jsonable_encoder

    return jsonable_encoder(value)


#: Where the pages appear in Airflow's UI (Airflow 3 external views, shown in an iframe):
#: the Plugins menu, and a "Transactions" tab on every DAG run ({DAG_ID}/{RUN_ID} are
#: filled in by the UI).  url_route gives each its own UI address (/plugin/<url_route>).
EXTERNAL_VIEWS: list[dict[str, Any]] = [
    {"name": "TPC transactions", "href": f"{PLUGIN_URL_PREFIX}/", "destination": "nav",
     "url_route": "airflow-tpc"},
    {"name": "Transactions", "href": f"{PLUGIN_URL_PREFIX}/run?dag_id={{DAG_ID}}"
                                     "&run_id={RUN_ID}",
     "destination": "dag_run", "url_route": "tpc-run"},
]


class AirflowTpcPlugin(AirflowPlugin):
    """Registers the transaction pages (FastAPI app + external views) and the extra links."""

    name = "airflow_tpc"
    operator_extra_links = [ManifestLink(), TransactionLink()]
    external_views = EXTERNAL_VIEWS

    @property
    def fastapi_apps(self) -> list[dict[str, Any]]:  # type: ignore[override]
        """Built on first use only: workers and the scheduler never import FastAPI for it."""
        if not _APPS:
            _APPS.append({"app": create_app(), "url_prefix": PLUGIN_URL_PREFIX,
                          "name": "airflow-tpc transactions"})
        return _APPS


_APPS: list[dict[str, Any]] = []
