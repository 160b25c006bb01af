"""CSRF: the plugin's state-changing routes refuse what a cross-site page could forge.

The UI authenticates with a ``_token`` cookie the browser attaches by itself, so these
requests authenticate the way a forged one would: by the cookie alone (no Bearer
header), on Airflow's real API app with the plugin mounted from its entry point.
A refused request must change nothing: every file under the target, ``_tpc/``
included, is compared byte for byte.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from airflow_tpc import TxnState
from airflow_tpc.airflow.ui.plugin import CSRF_HEADER, csrf_refusal, csrf_token

from . import test_ui_admin_provider as ui

pytestmark = pytest.mark.timeout(900)

# The fixtures that build a DAG run with a pre-committed transaction and the API client.
run_with_txn = ui.run_with_txn
api_client = ui.api_client

SAME_ORIGIN = "http://testserver"  # TestClient's base URL: the API server's own origin
FOREIGN = "https://evil.example"
EPOCH = "2026-06-01"
TXN_ID = "tpc_ui/2026-06-01/1"


def _cookie(role: str) -> dict[str, str]:
    """Only the UI's session cookie, as the browser would attach it."""
    return {"Cookie": f"_token={ui._token(role)}"}


def _session(role: str) -> dict[str, str]:
    """What the page's Abort sends: the cookie and, in the header, that session's token
    (the page carries it in <meta name="tpc-csrf">)."""
    jwt = ui._token(role)
    return {"Cookie": f"_token={jwt}", CSRF_HEADER: csrf_token(jwt)}


def snapshot(root: str) -> dict[str, object]:
    """Every directory, file (its bytes) and symlink under root, _tpc/ and staging included."""
    root = root.removeprefix("file://")
    assert os.path.isdir(root), root
    out: dict[str, object] = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        rel = os.path.relpath(dirpath, root)
        out[rel + "/"] = "dir"
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            key = os.path.join(rel, name)
            if os.path.islink(path):
                out[key] = ("link", os.readlink(path))
            elif os.path.isfile(path):
                out[key] = Path(path).read_bytes()
    return out


def around(sink) -> str:
    """The folder holding the target and its staging (new targets stage beside
    themselves, in <parent>/_tpc_staging/<name>): what "changes nothing" covers."""
    return os.path.dirname(sink.target.removeprefix("file://").rstrip("/"))


def _assert_untouched(sink, before: dict[str, object]) -> None:
    assert snapshot(around(sink)) == before
    [info] = sink.describe(EPOCH)
    assert info.state is TxnState.PRECOMMITTED and info.staging_files > 0


@pytest.fixture()
def precommitted(run_with_txn):
    dag_id, run_id, sink = run_with_txn
    before = snapshot(around(sink))
    assert any("/_tpc/ledger/" in k for k in before), sorted(before)  # the ledger is in it
    assert any(isinstance(v, bytes) and v == b"x" * 64 for v in before.values())  # staging
    return {"dag_id": dag_id, "run_id": run_id}, sink, before


FORM = {"epoch": EPOCH, "attempt": "1", "task_id": "events.submit"}
#: What the page's Abort posts: the transaction's full identity (the task that began it).
BODY = {"epoch": EPOCH, "attempt": 1, "task_id": "events.submit"}


@pytest.mark.parametrize("path", ["/airflow-tpc/abort", "/airflow-tpc/api/abort"])
def test_cookie_only_form_post_from_foreign_origin_is_refused(api_client, precommitted, path):
    """What an attacker's auto-submitting <form> sends, in every enctype a form has."""
    q, sink, before = precommitted
    forged = [
        # application/x-www-form-urlencoded (the default enctype)
        {"data": FORM},
        # multipart/form-data
        {"files": {"epoch": (None, EPOCH), "attempt": (None, "1")}},
        # enctype="text/plain" smuggling a JSON document
        {"content": f'{{"epoch": "{EPOCH}", "attempt": 1, "task_id": "events.submit"}}',
         "headers": {"Content-Type": "text/plain"}},
    ]
    for kwargs in forged:
        headers = {**_cookie("admin"), "Origin": FOREIGN, "Referer": f"{FOREIGN}/lure.html",
                   "Sec-Fetch-Site": "cross-site", **kwargs.pop("headers", {})}
        r = api_client.post(path, params=q, headers=headers, **kwargs)
        assert r.status_code == 403, (kwargs, r.status_code, r.text)
        assert "cross-site" in r.json()["detail"] or "cross-origin" in r.json()["detail"]
        _assert_untouched(sink, before)
    # Without Sec-Fetch-Site (older browsers): the Origin alone is refused.
    r = api_client.post(path, params=q, data=FORM,
                        headers={**_cookie("admin"), "Origin": FOREIGN})
    assert r.status_code == 403 and "Origin" in r.json()["detail"], r.text
    # A sandboxed iframe or a privacy redirect sends "Origin: null": refused too.
    r = api_client.post(path, params=q, data=FORM, headers={**_cookie("admin"), "Origin": "null"})
    assert r.status_code == 403, r.text
    _assert_untouched(sink, before)


def test_form_post_without_origin_is_refused(api_client, precommitted):
    """No Origin, no Referer (stripped by a referrer policy or an old browser): a form body
    is still refused, with the custom header or without, with a same-origin Origin too."""
    q, sink, before = precommitted
    for extra in ({}, {CSRF_HEADER: "1"}, {"Origin": SAME_ORIGIN}):
        for path in ("/airflow-tpc/abort", "/airflow-tpc/api/abort"):
            r = api_client.post(path, params=q, data=FORM, headers={**_cookie("admin"), **extra})
            assert r.status_code == 403, (path, extra, r.text)
            _assert_untouched(sink, before)
    # The old API form: epoch and attempt as query parameters, no body, no header.
    r = api_client.post("/airflow-tpc/api/abort", params={**q, "epoch": EPOCH, "attempt": 1},
                        headers=_cookie("admin"))
    assert r.status_code == 403 and CSRF_HEADER in r.json()["detail"], r.text
    _assert_untouched(sink, before)


def test_json_needs_same_origin_and_the_custom_header(api_client, precommitted):
    """JSON alone is not enough: a foreign Origin (a page that CORS would let through),
    a foreign Referer, or a missing custom header is refused."""
    q, sink, before = precommitted
    body = BODY
    cases = [
        {CSRF_HEADER: "1", "Origin": FOREIGN},
        {CSRF_HEADER: "1", "Origin": "http://testserver.evil.example"},
        {CSRF_HEADER: "1", "Origin": "http://testserver:8080"},  # another port: another origin
        {CSRF_HEADER: "1", "Origin": "https://testserver"},  # another scheme
        {CSRF_HEADER: "1", "Referer": f"{FOREIGN}/x"},
        {CSRF_HEADER: "1", "Origin": SAME_ORIGIN, "Sec-Fetch-Site": "same-site"},
        {"Origin": SAME_ORIGIN},  # no custom header
        {CSRF_HEADER: "1", "Origin": SAME_ORIGIN},  # the header, but not the session's token
        {CSRF_HEADER: csrf_token(ui._token("viewer")), "Origin": SAME_ORIGIN},  # another's
    ]
    for headers in cases:
        r = api_client.post("/airflow-tpc/api/abort", params=q, json=body,
                            headers={**_cookie("admin"), **headers})
        assert r.status_code == 403, (headers, r.text)
        _assert_untouched(sink, before)
    # The session's own token from a foreign origin is still refused.
    r = api_client.post("/airflow-tpc/api/abort", params=q, json=body,
                        headers={**_session("admin"), "Origin": FOREIGN})
    assert r.status_code == 403, r.text
    _assert_untouched(sink, before)


def test_json_with_header_from_same_origin_aborts(api_client, precommitted):
    """What the page's Abort button sends: cookie, same Origin, JSON, custom header."""
    q, sink, before = precommitted
    r = api_client.post("/airflow-tpc/api/abort", params=q, json=BODY,
                        headers={**_session("admin"), "Origin": SAME_ORIGIN,
                                 "Referer": f"{SAME_ORIGIN}/airflow-tpc/?x=1",
                                 "Sec-Fetch-Site": "same-origin"})
    assert r.status_code == 200, r.text
    assert r.json()["aborted"] == [TXN_ID]
    [info] = sink.describe(EPOCH)
    assert info.state is TxnState.ABORTED and info.staging_files == 0
    assert "admin" in info.reason
    assert snapshot(around(sink)) != before


def test_old_form_path_takes_the_json_request_too(api_client, precommitted):
    """/abort (where the old page's form posted) obeys the same rules, and accepts the
    unforgeable request; a client with no Origin at all (curl with a token) is fine."""
    q, sink, _ = precommitted
    r = api_client.post("/airflow-tpc/abort", params=q, json=BODY,
                        headers={"Authorization": f"Bearer {ui._token('admin')}",
                                 CSRF_HEADER: "1"})
    assert r.status_code == 200, r.text
    assert sink.describe(EPOCH)[0].state is TxnState.ABORTED


def test_base_url_is_the_origin_checked(api_client, precommitted, monkeypatch):
    """With [api] base_url set, the Origin must be that URL's origin, not the Host header."""
    q, sink, before = precommitted
    monkeypatch.setenv("AIRFLOW__API__BASE_URL", "https://Airflow.example.com:443/airflow/")
    body = BODY
    headers = _session("admin")
    r = api_client.post("/airflow-tpc/api/abort", params=q, json=body,
                        headers={**headers, "Origin": SAME_ORIGIN})
    assert r.status_code == 403 and "Origin" in r.json()["detail"], r.text
    _assert_untouched(sink, before)
    r = api_client.post("/airflow-tpc/api/abort", params=q, json=body,
                        headers={**headers, "Origin": "https://airflow.example.com"})
    assert r.status_code == 200, r.text
    assert sink.describe(EPOCH)[0].state is TxnState.ABORTED


def test_user_without_edit_permission_is_refused(api_client, precommitted):
    """Per-DAG authorization is kept: a viewer's unforgeable request is still 403."""
    q, sink, before = precommitted
    r = api_client.post("/airflow-tpc/api/abort", params=q, json=BODY,
                        headers={**_session("viewer"), "Origin": SAME_ORIGIN})
    assert r.status_code == 403, r.text
    assert CSRF_HEADER not in r.text and "Origin" not in r.text  # refused by authorization
    _assert_untouched(sink, before)
    # ... while the same request without credentials is 401.
    r = api_client.post("/airflow-tpc/api/abort", params=q, json=BODY,
                        headers={CSRF_HEADER: "1", "Origin": SAME_ORIGIN})
    assert r.status_code == 401, r.text
    _assert_untouched(sink, before)


def test_body_cannot_name_another_dag_or_a_bad_attempt(api_client, precommitted):
    """dag_id is authorized from the query only: extra body fields are refused (422), as
    are attempts that are not positive integers."""
    q, sink, before = precommitted
    headers = {**_session("admin"), "Origin": SAME_ORIGIN}
    for body in ({"epoch": EPOCH, "attempt": 1, "dag_id": "other"},
                 {"epoch": EPOCH, "attempt": 0}, {"epoch": EPOCH, "attempt": "1"},
                 {"epoch": EPOCH, "attempt": True}, {"epoch": "", "attempt": 1}):
        r = api_client.post("/airflow-tpc/api/abort", params=q, json=body, headers=headers)
        assert r.status_code == 422, (body, r.text)
        _assert_untouched(sink, before)


def test_page_aborts_with_fetch_not_a_form(api_client, precommitted):
    """The page's Abort button: fetch() with JSON and the session's token, after an in-page
    <dialog> (Airflow's iframe has no allow-modals: window.confirm() would be blocked).
    tests/airflow/test_run_page.py clicks it in a real browser."""
    q, _, _ = precommitted
    jwt = ui._token("admin")
    r = api_client.get("/airflow-tpc/run", params=q, headers={"Cookie": f"_token={jwt}"})
    assert r.status_code == 200, r.text
    page = r.text
    assert "<form" not in page.lower() and "window.confirm(" not in page
    assert "fetch(" in page and '<dialog id="tpc-abort-dialog"' in page
    assert f'<meta name="tpc-csrf" content="{csrf_token(jwt)}">' in page
    assert '"X-Airflow-TPC": csrf' in page and '"Content-Type": "application/json"' in page
    assert 'data-url="/airflow-tpc/api/abort?dag_id=tpc_it_gate&amp;run_id=ui-test-run"' in page
    # The button posts the transaction's full identity, never just epoch and attempt.
    assert "data-identity=" in page and "&quot;task_id&quot;: &quot;events.submit&quot;" in page
    assert f"&quot;epoch&quot;: &quot;{EPOCH}&quot;" in page and "&quot;attempt&quot;: 1" in page


@pytest.mark.parametrize(("headers", "base_url", "refused"), [
    ({CSRF_HEADER: "1", "content-type": "application/json"}, "", False),
    ({CSRF_HEADER: "1", "content-type": "application/json; charset=utf-8",
      "origin": "http://api.local:80"}, "", False),  # default port spelled out
    ({CSRF_HEADER: "1", "content-type": "application/json", "origin": "http://API.local"},
     "", False),  # host names are case-insensitive
    ({CSRF_HEADER: "1", "content-type": "application/json", "origin": "http://api.local"},
     "https://api.local/", True),  # base_url wins over the request's own scheme
    ({CSRF_HEADER: "1", "content-type": "application/json", "origin": "http://[::1]:8080"},
     "http://[::1]:8080/airflow", False),
    ({CSRF_HEADER: "1", "content-type": "application/json", "origin": "http://api.local"},
     "/airflow/", False),  # a base_url without a host: the request's own origin
    ({CSRF_HEADER: " ", "content-type": "application/json"}, "", True),
    ({CSRF_HEADER: "1", "content-type": "application/jsonx"}, "", True),
    ({CSRF_HEADER: "1"}, "", True),  # no content type: FastAPI would parse it as JSON
    ({CSRF_HEADER: "1", "content-type": "application/json", "origin": "http://api.local:99999"},
     "", True),  # unparsable port
    ({CSRF_HEADER: "1", "content-type": "application/json", "referer": "javascript:1"},
     "", True),
])
def test_csrf_refusal_rules(headers, base_url, refused):
    from starlette.datastructures import Headers

    reason = csrf_refusal("POST", Headers(headers), "http://api.local/airflow-tpc/api/abort",
                          base_url)
    assert (reason is not None) is refused, reason
    assert csrf_refusal("GET", Headers({"origin": FOREIGN}), "http://api.local/", "") is None


def _audit_outcomes(dag_id: str, run_id: str) -> list[str]:
    """The outcomes of the airflow-tpc aborts of a run in Airflow's audit log."""
    import json

    from airflow import settings
    from airflow.models.log import Log
    from sqlalchemy import select

    with settings.Session() as session:
        extras = session.scalars(select(Log.extra).where(
            Log.event == "airflow-tpc.abort", Log.dag_id == dag_id,
            Log.run_id == run_id).order_by(Log.id)).all()
    return [json.loads(e)["outcome"] for e in extras]


def test_abort_that_loses_to_a_concurrent_abort_says_already_aborted(api_client, precommitted):
    """Two operators abort the same attempt at once: the one whose abort decision lands
    second is told "already aborted" (and so is the audit log), never a second "aborted".
    The other abort is made to land exactly between the UI's read of the state and its
    decision (a crash point of the protocol, armed with that abort)."""
    from airflow_tpc import Sink
    from airflow_tpc.core.faults import armed

    q, sink, _ = precommitted
    other = Sink(sink.target, sink.namespace)
    raced: list[str] = []

    def abort_first(_: str) -> None:
        if not raced:  # once: the other abort passes this point too
            raced.append("other")
            other.abort(other.transaction(EPOCH, 1), "aborted by the admin DAG")

    with armed("abort.before_decision", abort_first):
        r = api_client.post("/airflow-tpc/api/abort", params=q, json=BODY,
                            headers={**_session("admin"), "Origin": SAME_ORIGIN})
    assert raced == ["other"]
    assert r.status_code == 200, r.text
    answer = r.json()
    assert answer["outcome"] == "already aborted" and answer["aborted"] == [], answer
    [info] = sink.describe(EPOCH)
    assert info.state is TxnState.ABORTED and info.reason == "aborted by the admin DAG"
    assert info.staging_files == 0
    assert _audit_outcomes(q["dag_id"], q["run_id"])[-1] == "already aborted"


def test_abort_of_an_abort_that_crashed_finishes_its_cleanup(api_client, precommitted):
    """An abort that died after its decision left the staged files: the attempt is
    ABORTED, so the UI's abort answers "already aborted" — and removes what was left,
    rather than leaving staging behind while saying there is nothing to do."""
    from airflow_tpc.core.faults import InjectedCrash, armed

    q, sink, _ = precommitted
    with armed("abort.after_decision"), pytest.raises(InjectedCrash):
        sink.abort(sink.transaction(EPOCH, 1), "the abort task died half way")
    [info] = sink.describe(EPOCH)
    assert info.state is TxnState.ABORTED and info.staging_files > 0
    r = api_client.post("/airflow-tpc/api/abort", params=q, json=BODY,
                        headers={**_session("admin"), "Origin": SAME_ORIGIN})
    assert r.status_code == 200, r.text
    assert r.json()["outcome"] == "already aborted", r.text
    [info] = sink.describe(EPOCH)
    assert info.state is TxnState.ABORTED and info.staging_files == 0, info
    assert info.reason == "the abort task died half way"
    # Clean and decided: asking again writes nothing at all.
    before = snapshot(around(sink))
    r = api_client.post("/airflow-tpc/api/abort", params=q, json=BODY,
                        headers={**_session("admin"), "Origin": SAME_ORIGIN})
    assert r.status_code == 200 and r.json()["outcome"] == "already aborted", r.text
    assert snapshot(around(sink)) == before
