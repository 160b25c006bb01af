"""UI plugin: the run page, the target page and the manifest page, with an Abort action.

Served by a FastAPI app under Airflow's API server (``/airflow-tpc``) and shown inside
Airflow's UI as external views: an entry of the Plugins menu and a *Transactions* tab
of every DAG run (:data:`EXTERNAL_VIEWS`).

Plugin FastAPI routes get no authentication for free, so every route here depends
on Airflow's own auth (``GetUserDep``: the bearer JWT or the UI's ``_token`` cookie,
validated by the auth manager), and the user must be allowed to read (GET) the DAG's
runs to see a page, edit (PUT) them to abort.

State-changing requests are refused when a cross-site page could have forged them
(:mod:`airflow_tpc.airflow.ui.csrf`).  Every action and link names its transaction by
its full identity — the task that began it (or target and namespace), epoch, attempt —
and a request that does not name exactly one is refused with 400
(:mod:`airflow_tpc.airflow.ui.runs`); aborts are written to Airflow's audit log.  A group
transaction is one card and one action: its Abort aborts the group, and the single-target
abort refuses a member (:mod:`airflow_tpc.airflow.ui.groups`).
"""

# No ``from __future__ import annotations`` here: FastAPI must see the real annotations
# (Depends/Body) of route functions whose names are imported inside create_app().
import time
from typing import Any
from urllib.parse import quote, urlencode

from airflow.plugins_manager import AirflowPlugin

from airflow_tpc import TpcError
from airflow_tpc.airflow.links import PLUGIN_URL_PREFIX, ManifestLink, TransactionLink
from airflow_tpc.airflow.ui import groups, runs
from airflow_tpc.airflow.ui import render as ui
from airflow_tpc.airflow.ui.csrf import (  # noqa: F401 - CSRF_HEADER/csrf_token: public API
    CSRF_HEADER,
    SAFE_METHODS,
    api_base_url,
    csrf_refusal,
    csrf_token,
    session_csrf_refusal,
)
from airflow_tpc.tables import history


# ----------------------------------------------------------------------------- pages
def _owner_of(info: Any) -> tuple[str, str] | None:
    owner = info.owner or {}
    if owner.get("dag_id") and owner.get("run_id"):
        return str(owner["dag_id"]), str(owner["run_id"])
    return None


def _airflow_run_href(dag_id: str, run_id: str) -> str:
    return f"/dags/{quote(dag_id, safe='')}/runs/{quote(run_id, safe='')}"


def _section(sink: Any, title: str, rows: list[Any], **kwargs: Any) -> Any:
    """A card of one target: a table named by its URI, its location beside it, and the
    column of the snapshot / version each commit made."""
    errors = {r.info.get("table_error") for r in rows} - {None}
    return ui.Section(title=title, target=sink.target, namespace=sink.namespace, rows=rows,
                      table=history.table_uri(sink), version_key=history.version_key(sink),
                      table_error=next(iter(errors), None), **kwargs)


def _run_page(base: str, dag_id: str, run_id: str, csrf: str, now: float) -> str:
    abort_url = ui.url(f"{base}/api/abort", dag_id=dag_id, run_id=run_id)
    sections = []
    for task_id, doc in runs.run_docs(dag_id, run_id):
        hook = runs.hook_for(doc)
        sink = hook.get_sink()
        infos = sorted(hook.run_attempts(doc, dag_id, run_id),
                       key=lambda i: (i.epoch, i.attempt), reverse=True)
        rows = [ui.Row(d, timeout_s=runs.timeout_of(sink, i), abort_url=abort_url,
                       identity=runs.Found(dag_id, run_id, task_id, sink, i).identity(),
                       manifest_href=ui.url(f"{base}/manifest", dag_id=dag_id, run_id=run_id,
                                            task_id=task_id, epoch=i.epoch, attempt=i.attempt))
                for i, d in zip(infos, runs.info_dicts(sink, infos), strict=True)]
        sections.append(_section(sink, task_id, rows, links=[
            ("All transactions of this target",
             ui.url(f"{base}/target", dag_id=dag_id, task_id=task_id))]))
    body = (ui.crumbs([("airflow-tpc", f"{base}/"), (dag_id, None), (run_id, None)])
            + f"<h1>Transactions of run <code>{ui.esc(run_id)}</code></h1>"
            + f'<p class="sub">DAG <code>{ui.esc(dag_id)}</code> · '
            + f'<a href="{ui.esc(_airflow_run_href(dag_id, run_id))}" target="_top">'
            + "open the run in Airflow</a></p>")
    group_sections = groups.run_sections(base, dag_id, run_id)  # one card per group
    if sections or group_sections:
        body += "".join(ui.section(s, now) for s in sections)
        body += "".join(ui.group_section(g, now) for g in group_sections)
    else:
        body += ('<section class="card"><div class="empty">This run began no airflow-tpc '
                 "transaction (yet).</div></section>")
    return ui.page(f"{dag_id} / {run_id}", body, csrf=csrf, now=now)


def _target_page(base: str, dag_id: str, task_id: str, doc: dict[str, Any],
                 can_read: Any, csrf: str, now: float) -> str:
    hook = runs.hook_for(doc)
    sink = hook.get_sink()
    rows, hidden = [], 0
    infos = sorted(sink.describe(), key=lambda i: (i.started_at or 0, i.epoch, i.attempt),
                   reverse=True)
    shown = []
    for info in infos:
        owner = _owner_of(info)
        if owner is not None and owner[0] != dag_id and not can_read(owner[0]):
            hidden += 1  # begun by a DAG this user may not read
            continue
        shown.append(info)
    for info, d in zip(shown, runs.info_dicts(sink, shown), strict=True):
        owner = _owner_of(info)
        row = ui.Row(d, timeout_s=runs.timeout_of(sink, info),
                     manifest_href=ui.url(f"{base}/manifest", dag_id=dag_id, task_id=task_id,
                                          epoch=info.epoch, attempt=info.attempt))
        if owner is not None:
            odag, orun = owner
            row.owner = (f"{odag} / {orun}", ui.url(f"{base}/run", dag_id=odag, run_id=orun))
            row.abort_url = ui.url(f"{base}/api/abort", dag_id=odag, run_id=orun)
            # The owning run's task may have another id: name the target instead.
            row.identity = {"target": history.shown_target(sink),
                            "namespace": sink.namespace,
                            "epoch": info.epoch, "attempt": int(info.attempt),
                            "txn_id": info.txn_id}
        rows.append(row)
    note = (f"{hidden} transaction(s) begun by DAGs you may not read are not shown."
            if hidden else None)
    sec = _section(sink, f"{dag_id}.{task_id}", rows, note=note)
    body = (ui.crumbs([("airflow-tpc", f"{base}/"), (dag_id, None), (task_id, None)])
            + f"<h1>Transactions of {'table' if sec.table else 'target'} "
            f"<code>{ui.esc(sec.name)}</code></h1>"
            + '<p class="sub">Every epoch and attempt in the ledger, newest first.</p>'
            + ui.section(sec, now, with_owner=True))
    return ui.page(f"{'table' if sec.table else 'target'} {sec.name}", body, csrf=csrf,
                   now=now)


def _manifest_page(base: str, dag_id: str, back: tuple[str, str], sink: Any, info: Any,
                   now: float) -> str:
    view = runs.manifest_view(sink, info)
    files, (tf, tb, tr) = view["files"], view["totals"]
    [row] = runs.info_dicts(sink, [info])
    table = history.table_uri(sink)
    facts = [("Transaction", f"<code>{ui.esc(info.txn_id)}</code>"),
             ("State", ui.state_badge(row)),
             ("Table" if table else "Target", f"<code>{ui.esc(table or sink.target)}</code>")]
    if table:
        key = history.version_key(sink) or ""
        facts += [("Table location", f"<code>{ui.esc(sink.target)}</code>"),
                  (ui.VERSION_HEADERS.get(key, key), ui.version_cell(row, key))]
    facts += [("Source", ui.esc(view["source"])),
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
            f'<code>{ui.esc(doc.get("table") or doc.get("target"))}</code></a></td>'
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
                              api_base_url())
        if reason is None and request.method.upper() not in SAFE_METHODS:
            reason = session_csrf_refusal(request.headers, request.cookies)
        if reason:
            raise HTTPException(status_code=403, detail=reason)

    class AbortRequest(BaseModel):
        """One transaction by its full identity: ``task_id`` (the task that began it) or
        ``target`` + ``namespace``, and ``epoch`` + ``attempt``; ``txn_id`` (and the other
        of task/target when given) must agree.  Anything less is refused (400)."""

        model_config = ConfigDict(extra="forbid")
        epoch: str = Field(min_length=1)
        attempt: StrictInt = Field(ge=1)
        task_id: str | None = Field(default=None, min_length=1)
        target: str | None = Field(default=None, min_length=1)
        namespace: str | None = Field(default=None, min_length=1)
        txn_id: str | None = Field(default=None, min_length=1)

    class GroupAbortRequest(BaseModel):
        """One group attempt by its full identity: ``task_id`` (the task that began it)
        or ``group`` (its folder's URI) + ``namespace``, and ``epoch`` + ``attempt``."""

        model_config = ConfigDict(extra="forbid")
        epoch: str = Field(min_length=1)
        attempt: StrictInt = Field(ge=1)
        task_id: str | None = Field(default=None, min_length=1)
        group: str | None = Field(default=None, min_length=1)
        namespace: str | None = Field(default=None, min_length=1)
        txn_id: str | None = Field(default=None, min_length=1)

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
        if not runs.dag_run_exists(dag_id, run_id):
            raise HTTPException(status_code=404, detail=f"no run {run_id!r} of DAG {dag_id!r}")

    @app.get("/api/transactions", dependencies=[can_read])
    def list_transactions(dag_id: str, run_id: str) -> dict[str, Any]:
        known_run(dag_id, run_id)
        return {"dag_id": dag_id, "run_id": run_id,
                "transactions": runs.run_transactions(dag_id, run_id)}

    @app.get("/", response_class=HTMLResponse)
    def index(request: Request, user: GetUserDep, dag_id: str | None = None,
              run_id: str | None = None) -> Response:
        """The navigation entry: recent runs with transactions.  With dag_id and run_id
        (links stored by earlier versions) it is that run's page."""
        if dag_id is not None and run_id is not None:
            requires_access_dag("GET", DagAccessEntity.RUN)(request, user)
            return run_page(request, dag_id, run_id)
        dag_ids = get_auth_manager().get_authorized_dag_ids(user=user, method="GET")
        return html_page(_index_page(base_of(request), runs.recent_docs(set(dag_ids)),
                                     time.time()))

    @app.get("/run", response_class=HTMLResponse, dependencies=[can_read])
    def run_page(request: Request, dag_id: str, run_id: str) -> Response:
        known_run(dag_id, run_id)
        return html_page(_run_page(base_of(request), dag_id, run_id, csrf_of(request),
                                   time.time()))

    @app.get("/target", response_class=HTMLResponse, dependencies=[can_read])
    def target_page(request: Request, dag_id: str, task_id: str,
                    user: GetUserDep) -> Response:
        found = runs.task_doc(dag_id, task_id)
        if found is None:
            raise HTTPException(status_code=404, detail=f"task {task_id!r} of DAG {dag_id!r} "
                                                        "has begun no airflow-tpc transaction")
        return html_page(_target_page(base_of(request), dag_id, task_id, found[1],
                                      reader(user), csrf_of(request), time.time()))

    @app.get("/manifest", response_class=HTMLResponse, dependencies=[can_read])
    def manifest_page(request: Request, dag_id: str, epoch: str, attempt: int,
                      user: GetUserDep, run_id: str | None = None,
                      task_id: str | None = None, target: str | None = None,
                      namespace: str | None = None) -> Response:
        """An attempt's manifest: of a run (run_id; the task or target names which of the
        run's targets when it has several) or of a task's target (task_id)."""
        base = base_of(request)
        missing = HTTPException(status_code=404, detail=f"no transaction {epoch}/{attempt}")
        if run_id is not None:
            known_run(dag_id, run_id)
            try:
                found = runs.resolve(dag_id, run_id, epoch, attempt, task_id=task_id,
                                     target=target, namespace=namespace)
            except runs.Ambiguous as exc:
                raise HTTPException(status_code=400, detail=str(exc)) from None
            member = None if found is not None else groups.find_member(
                dag_id, run_id, epoch, attempt, task_id=task_id, target=target,
                namespace=namespace)  # a member of a group attempt of the run
            if found is None and member is None:
                raise missing
            sink, info = (found.sink, found.info) if found is not None else member
            back = (run_id, ui.url(f"{base}/run", dag_id=dag_id, run_id=run_id))
        elif task_id is not None:
            doc = runs.task_doc(dag_id, task_id)
            if doc is None:
                raise missing
            sink = runs.hook_for(doc[1]).get_sink()
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
    def abort_api(request: Request, dag_id: str, run_id: str,
                  body: Annotated[AbortRequest, Body()], user: GetUserDep) -> dict[str, Any]:
        """Abort the one transaction the body names (see :class:`AbortRequest`)."""
        known_run(dag_id, run_id)
        try:
            found = runs.resolve(dag_id, run_id, body.epoch, body.attempt,
                                 task_id=body.task_id, target=body.target,
                                 namespace=body.namespace, txn_id=body.txn_id,
                                 require_identity=True)
        except runs.Ambiguous as exc:
            raise HTTPException(status_code=400, detail=str(exc)) from None
        # A group member's attempt is decided only with its group: refused, naming it.
        member = groups.member_refusal(dag_id, run_id, body.epoch, body.attempt,
                                       task_id=body.task_id, target=body.target,
                                       namespace=body.namespace, found=found)
        if member is not None:
            raise HTTPException(status_code=409, detail=member)
        if found is None:
            raise HTTPException(status_code=404, detail=(
                f"no transaction {body.epoch}/{body.attempt} of "
                f"{body.task_id or body.target} in run {run_id} of {dag_id}"))
        try:
            return runs.abort(found, user.get_name(), via_of(request))
        except TpcError as exc:
            raise HTTPException(status_code=409, detail=str(exc)) from None

    @app.post("/api/abort-group", dependencies=[can_edit])
    def abort_group_api(request: Request, dag_id: str, run_id: str,
                        body: Annotated[GroupAbortRequest, Body()],
                        user: GetUserDep) -> dict[str, Any]:
        """Abort the group attempt the body names, every member with it; a committed
        group is refused (409), as is a body not naming exactly one (400)."""
        known_run(dag_id, run_id)
        try:
            found = groups.resolve(dag_id, run_id, body.epoch, body.attempt,
                                   task_id=body.task_id, group=body.group,
                                   namespace=body.namespace, txn_id=body.txn_id)
        except runs.Ambiguous as exc:
            raise HTTPException(status_code=400, detail=str(exc)) from None
        except TpcError as exc:  # the group cannot be opened (e.g. its XCom has no args)
            raise HTTPException(status_code=409, detail=str(exc)) from None
        if found is None:
            raise HTTPException(status_code=404, detail=(
                f"no group transaction {body.epoch}/{body.attempt} of "
                f"{body.task_id or body.group} in run {run_id} of {dag_id}"))
        try:
            return groups.abort(found, user.get_name(), via_of(request))
        except TpcError as exc:
            raise HTTPException(status_code=409, detail=str(exc)) from None

    def via_of(request: Request) -> str:
        auth = (request.headers.get("authorization") or "").lower()
        return "api" if auth.startswith("bearer ") else "ui"

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
