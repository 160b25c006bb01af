"""The FastAPI app of the UI plugin: its routes, their authorization and CSRF defence.

Apart from the plugin's registration (:mod:`airflow_tpc.airflow.ui.plugin`), which builds
it on first use only (workers and the scheduler never import FastAPI for it), and from
the pages it serves (:mod:`airflow_tpc.airflow.ui.pages`).  Every route depends on
Airflow's own auth; see the plugin's docstring for the rules.
"""

# No ``from __future__ import annotations`` here: FastAPI must see the real annotations
# (Depends/Body) of route functions whose names are imported inside create_app().
import time
from typing import Any
from urllib.parse import urlencode

from airflow_tpc import InvalidState, TpcError
from airflow_tpc.airflow.ui import groups, runs, views
from airflow_tpc.airflow.ui import render as ui
from airflow_tpc.airflow.ui.csrf import (
    SAFE_METHODS,
    api_base_url,
    csrf_refusal,
    csrf_token,
    session_csrf_refusal,
)
from airflow_tpc.airflow.ui.pages import (
    _index_page,
    _manifest_page,
    _owner_of,
    _run_page,
    _target_page,
)


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
        """The run's transactions: single targets' attempts (``transactions``) and its
        group attempts (``groups``: identity, decision, cut status, each member's
        attempt and state)."""
        known_run(dag_id, run_id)
        return {"dag_id": dag_id, "run_id": run_id,
                "transactions": runs.run_transactions(dag_id, run_id),
                "groups": views.group_transactions(dag_id, run_id)}

    @app.get("/api/undecided")
    def list_undecided(user: GetUserDep) -> dict[str, Any]:
        """Monitoring: every open or pre-committed attempt, single and group, of the
        targets the DAGs this user may read write; rows of other DAGs are left out."""
        return views.undecided(readable(user), reader(user))

    @app.get("/undecided", response_class=HTMLResponse)
    def undecided_page(request: Request, user: GetUserDep) -> Response:
        now = time.time()
        return html_page(views.undecided_page(
            base_of(request), views.undecided(readable(user), reader(user), now), now))

    @app.get("/group", response_class=HTMLResponse, dependencies=[can_read])
    def group_page(request: Request, dag_id: str, run_id: str, task_id: str) -> Response:
        """One group transaction (the task that began it in the run), with its cut."""
        known_run(dag_id, run_id)
        body = views.group_page(base_of(request), dag_id, run_id, task_id, csrf_of(request),
                                time.time())
        if body is None:
            raise HTTPException(status_code=404, detail=f"task {task_id!r} began no group "
                                                        f"transaction in run {run_id!r}")
        return html_page(body)

    def readable(user: Any) -> set[str]:
        return set(get_auth_manager().get_authorized_dag_ids(user=user, method="GET"))

    @app.get("/", response_class=HTMLResponse)
    def index(request: Request, user: GetUserDep, dag_id: str | None = None,
              run_id: str | None = None) -> Response:
        """The navigation entry: recent runs with transactions.  With dag_id and run_id
        (links stored by earlier versions) it is that run's page."""
        if dag_id is not None and run_id is not None:
            requires_access_dag("GET", DagAccessEntity.RUN)(request, user)
            return run_page(request, dag_id, run_id)
        return html_page(_index_page(base_of(request), runs.recent_docs(readable(user)),
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
            raise refused(request, user, dag_id, run_id, body, member)
        if found is None:
            raise HTTPException(status_code=404, detail=(
                f"no transaction {body.epoch}/{body.attempt} of "
                f"{body.task_id or body.target} in run {run_id} of {dag_id}"))
        try:
            return runs.abort(found, user.get_name(), via_of(request))
        except TpcError as exc:
            raise refused(request, user, dag_id, run_id, body, str(exc)) from None

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
            raise refused(request, user, dag_id, run_id, body, str(exc)) from None
        if found is None:
            raise HTTPException(status_code=404, detail=(
                f"no group transaction {body.epoch}/{body.attempt} of "
                f"{body.task_id or body.group} in run {run_id} of {dag_id}"))
        try:
            return groups.abort(found, user.get_name(), via_of(request))
        except TpcError as exc:  # groups.abort audited it (InvalidState) or it is new
            if not isinstance(exc, InvalidState):
                runs.audit_refusal(dag_id, run_id, user.get_name(), via_of(request),
                                   body.model_dump(exclude_none=True), str(exc))
            raise HTTPException(status_code=409, detail=str(exc)) from None

    def refused(request: Request, user: Any, dag_id: str, run_id: str, body: Any,
                detail: str) -> HTTPException:
        """A refused abort (409): an action on a transaction like any other, so a row of
        Airflow's audit log names who asked for what, and why it was refused."""
        runs.audit_refusal(dag_id, run_id, user.get_name(), via_of(request),
                           body.model_dump(exclude_none=True), detail)
        return HTTPException(status_code=409, detail=detail)

    def via_of(request: Request) -> str:
        auth = (request.headers.get("authorization") or "").lower()
        return "api" if auth.startswith("bearer ") else "ui"

    return app


def jsonable(value: Any) -> Any:
    from fastapi.encoders import jsonable_encoder

    return jsonable_encoder(value)
