"""The run page, end to end: a real ``airflow api-server``, real Chromium, real ledgers.

The API server runs as its own process on 127.0.0.1 (this session's AIRFLOW_HOME and
SQLite DB, the simple auth manager with an admin and a viewer).  Transactions are made
first: a dag.test run of ``tpc_it_nospark`` (an aborted try and a committed attempt; its
commit task stores the *TPC manifest* extra link), a run of ``tpc_it_gate`` that wrote a
local target (an aborted and a pre-committed attempt) and a run of ``tpc_it_s3`` that
wrote an S3 target on moto's server (committed and published).  Chromium, driven by
Playwright, logs in through Airflow's login form, opens the pages inside Airflow's UI (the run's
*Transactions* tab, the Plugins menu entry) and directly, reads the DOM, and aborts
through the page's dialog; the ledger is read back with the core Sink.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_tpc import Sink, TxnState
from airflow_tpc.tables import open_sink

from .helpers import day

pytestmark = pytest.mark.timeout(900)

REPO = Path(__file__).resolve().parents[2]
SCREENSHOT = REPO / "docs" / "img" / "run-page.png"
CHROMIUM = os.environ.get("TPC_CHROMIUM", "/usr/bin/chromium")
PASSWORDS = {"admin": "admin-pw-run-page", "viewer": "viewer-pw-run-page",
             "limited": "limited-pw-run-page"}
#: The only DAG user ``limited`` may read (tests/airflow/auth_manager.py).
LIMITED_DAGS = "tpc_it_group_gate_nospark"
DAG_ID, RUN_ID = "tpc_it_gate", "run-page-test"
S3_DAG_ID, S3_RUN_ID = "tpc_it_s3", "run-page-s3"
EPOCH = "2026-09-01"
S3_CONN = "tpc_run_page_s3"
S3_SECRET = "run-page-S3cret-not-shown"
#: A run holding the same epoch and attempt in two targets: a folder and an Iceberg table.
TWO_DAG_ID, TWO_RUN_ID = "tpc_it_two", "run-page-two-targets"
CAT_CONN = "tpc_run_page_cat"
TABLE = "iceberg://runpage/analytics.events"
#: A run of tables only, with commits in them: an Iceberg table (task daily.submit) and a
#: Delta table (task events.submit); each shown by its URI and its commits' versions.
TABLES_RUN_ID = "run-page-tables"
ICEBERG = "iceberg://runpage/analytics.daily"


def _chromium() -> str:
    """The OS's Chromium (Playwright downloads nothing): a missing one fails, loudly."""
    path = shutil.which(CHROMIUM) or shutil.which("chromium")
    assert path, (f"Chromium not found at {CHROMIUM} nor on PATH: the browser test needs it. "
                  "Install it (as root: apt-get update && apt-get install -y chromium; "
                  "scripts/bootstrap.sh does), or set TPC_CHROMIUM to its path.")
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stage(sink: Sink, txn: Any, files: dict[str, bytes]) -> None:
    staging = sink.layout.staging(txn.epoch, txn.attempt)
    for rel, data in files.items():
        sink.storage.put(sink.storage.join(staging, rel), data)


def _doc(txn: Any, conn_id: str | None = None, public: dict | None = None) -> dict[str, Any]:
    return {**txn.to_dict(), "storage_conn_id": conn_id, "storage_options": public or {}}


def _table_attempt(sink: Any, owner: dict[str, Any], ids: list[int]) -> Any:
    """Begin an attempt of EPOCH in a table, stage one Parquet file and pre-commit it."""
    txn = sink.begin(EPOCH, owner=owner)
    staged = sink.storage.join(sink.layout.staging(EPOCH, txn.attempt), "part-0.parquet")
    sink.storage.put(staged, b"")
    pq.write_table(pa.table({"id": pa.array(ids, pa.int64()),
                             "epoch": pa.array([EPOCH] * len(ids))}), staged)
    sink.precommit(txn)
    return txn


def _snapshot_of(sink: Any, txn_id: str) -> str:
    """The id of the Iceberg snapshot whose summary names the transaction (pyiceberg)."""
    [snap] = [s for s in sink.table_target.load_table().snapshots()
              if (s.summary or {}).get("airflow-tpc.txn-id") == txn_id]
    return str(snap.snapshot_id)


def _seed_tables(tmp: Path, catalog: dict[str, str]) -> dict[str, Any]:
    """The tables-only run: Iceberg attempts 1 and 2 committed (2 supersedes 1, whose
    files stay: snapshot 1 still references them) and 3 pre-committed; Delta attempt 1
    committed and 2 pre-committed.  Its XComs are the newest of their tasks, so the
    target pages of tpc_it_two's daily.submit and events.submit show these tables."""
    from airflow import settings
    from airflow.models.xcom import XComModel

    owner = {"dag_id": TWO_DAG_ID, "run_id": TABLES_RUN_ID}
    ice = open_sink(ICEBERG, "tpc_tables", catalog_properties=catalog)
    for ids in ([1, 2], [3]):
        assert ice.commit(_table_attempt(ice, owner, ids)).outcome == "committed"
    ice_open = _table_attempt(ice, owner, [4, 5, 6])
    delta_uri = f"delta+file://{tmp}/delta_events"
    delta = open_sink(delta_uri, "tpc_tables_delta")
    assert delta.commit(_table_attempt(delta, owner, [7])).outcome == "committed"
    delta_open = _table_attempt(delta, owner, [8])
    with settings.Session() as session:
        XComModel.set(key="tpc_txn", value={**_doc(ice_open), "table": ICEBERG,
                                            "catalog_conn_id": CAT_CONN},
                      dag_id=TWO_DAG_ID, task_id="daily.submit", run_id=TABLES_RUN_ID,
                      session=session)
        XComModel.set(key="tpc_txn", value={**_doc(delta_open), "table": delta_uri},
                      dag_id=TWO_DAG_ID, task_id="events.submit", run_id=TABLES_RUN_ID,
                      session=session)
        session.commit()
    return {"iceberg": ice, "delta": delta, "delta_uri": delta_uri}


@pytest.fixture(scope="module")
def seeded(api_process, dagbag, moto_endpoint, tmp_path_factory,
           catalog: dict[str, str]) -> dict[str, Any]:
    """The transactions the pages show (see the module docstring); made while the API
    server starts (its start-up is most of this module's time)."""
    import boto3
    from airflow import settings
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import sync_bag_to_db
    from airflow.models.dagrun import get_or_create_dagrun
    from airflow.models.xcom import XComModel
    from airflow.serialization.serialized_objects import DagSerialization
    from airflow.utils.types import DagRunTriggeredByType

    # 1. A real run of the protocol's tasks: the commit task stores the manifest link.
    nospark = dagbag.get_dag("tpc_it_nospark").test(
        logical_date=day("2026-09-15"), run_conf={"epoch": "2026-09-15", "stale": 1})
    assert str(getattr(nospark.state, "value", nospark.state)) == "success"

    # 2. A run of tpc_it_gate (local target) and one of tpc_it_s3 (S3 target).
    DagBundlesManager().sync_bundles_to_db()
    sync_bag_to_db(dagbag, "dags-folder", None)
    for dag_id, run_id in ((DAG_ID, RUN_ID), (S3_DAG_ID, S3_RUN_ID)):
        sdag = DagSerialization.deserialize_dag(DagSerialization.serialize_dag(
            dagbag.get_dag(dag_id)))
        with settings.Session() as session:
            get_or_create_dagrun(dag=sdag, run_id=run_id, logical_date=day(EPOCH),
                                 data_interval=(day(EPOCH), day(EPOCH)), run_after=day(EPOCH),
                                 conf=None, triggered_by=DagRunTriggeredByType.TEST,
                                 triggering_user_name="test", start_date=day(EPOCH),
                                 session=session)
            session.commit()
    owner = {"dag_id": DAG_ID, "run_id": RUN_ID, "task_id": "events.submit", "try_number": 1}
    local = Sink(str(tmp_path_factory.mktemp("run_page") / "events"), "tpc_run_page")
    failed = local.begin(EPOCH, owner=owner)
    _stage(local, failed, {"part-0.parquet": b"f" * 10})
    local.abort(failed, "the Spark job died (executor lost)")
    open_txn = local.begin(EPOCH, owner={**owner, "try_number": 2})
    _stage(local, open_txn, {"part-0.parquet": b"a" * 1000, "part-1.parquet": b"b" * 2048})
    local.precommit(open_txn, rows={"part-0.parquet": 1200, "part-1.parquet": 34})

    public = {"endpoint_url": moto_endpoint, "region_name": "us-east-1"}
    boto3.client("s3", aws_access_key_id="run-page", aws_secret_access_key=S3_SECRET,
                 **public).create_bucket(Bucket="tpc-run-page")
    s3 = Sink("s3://tpc-run-page/daily", "tpc_run_page_s3",
              storage_options={**public, "key": "run-page", "secret": S3_SECRET})
    s3_txn = s3.begin(EPOCH, owner={**owner, "dag_id": S3_DAG_ID, "run_id": S3_RUN_ID})
    _stage(s3, s3_txn, {"part-0.parquet": b"s" * 3 * 1024 * 1024})
    s3.precommit(s3_txn, rows={"part-0.parquet": 250_000})
    assert s3.commit(s3_txn).outcome == "committed"

    # 3. One run of tpc_it_two writing two targets, attempt 1 of EPOCH in each: a folder
    # (task events.submit) and an Iceberg table (task daily.submit), both pre-committed.
    sdag_two = DagSerialization.deserialize_dag(DagSerialization.serialize_dag(
        dagbag.get_dag(TWO_DAG_ID)))
    # (get_or_create_dagrun replaces a run of the same logical date, None included: the
    # tables run has its own.)
    for run_id, logical in ((TWO_RUN_ID, None), (TABLES_RUN_ID, day("2026-09-02"))):
        with settings.Session() as session:
            get_or_create_dagrun(dag=sdag_two, run_id=run_id, logical_date=logical,
                                 data_interval=logical and (logical, logical),
                                 run_after=day(EPOCH), conf=None,
                                 triggered_by=DagRunTriggeredByType.TEST,
                                 triggering_user_name="test", start_date=day(EPOCH),
                                 session=session)
            session.commit()
    two_owner = {"dag_id": TWO_DAG_ID, "run_id": TWO_RUN_ID}
    folder = Sink(str(tmp_path_factory.mktemp("run_page_two") / "events"), "tpc_two")
    folder_txn = folder.begin(EPOCH, owner={**two_owner, "task_id": "events.submit"})
    _stage(folder, folder_txn, {"part-0.parquet": b"f" * 100})
    folder.precommit(folder_txn)
    table = open_sink(TABLE, "tpc_two", catalog_properties=catalog)
    table_txn = table.begin(EPOCH, owner={**two_owner, "task_id": "daily.submit"})
    staged = table.storage.join(table.layout.staging(EPOCH, table_txn.attempt), "part-0.parquet")
    table.storage.put(staged, b"")
    pq.write_table(pa.table({"id": pa.array([1, 2, 3], pa.int64()),
                             "epoch": pa.array([EPOCH] * 3)}), staged)
    table.precommit(table_txn)
    assert (folder_txn.epoch, folder_txn.attempt) == (table_txn.epoch, table_txn.attempt)

    with settings.Session() as session:
        XComModel.set(key="tpc_txn", value=_doc(open_txn), dag_id=DAG_ID,
                      task_id="events.submit", run_id=RUN_ID, session=session)
        XComModel.set(key="tpc_txn", value=_doc(folder_txn), dag_id=TWO_DAG_ID,
                      task_id="events.submit", run_id=TWO_RUN_ID, session=session)
        XComModel.set(key="tpc_txn", value={**_doc(table_txn), "table": TABLE,
                                            "catalog_conn_id": CAT_CONN},
                      dag_id=TWO_DAG_ID, task_id="daily.submit", run_id=TWO_RUN_ID,
                      session=session)
        XComModel.set(key="tpc_txn", value=_doc(s3_txn, S3_CONN, public), dag_id=S3_DAG_ID,
                      task_id="events.submit", run_id=S3_RUN_ID, session=session)
        session.commit()
    # 4. A real run of two groups (two folders, the same epoch and attempt): each commit
    # task stores its own TPC manifest link.
    two = dagbag.get_dag("tpc_it_two").test(logical_date=day("2026-09-16"),
                                            run_conf={"epoch": "2026-09-16"})
    assert str(getattr(two.state, "value", two.state)) == "success"
    # 5. The tables-only run (after 4: its XComs are the newest of their tasks).
    tables = _seed_tables(tmp_path_factory.mktemp("run_page_tables"), catalog)
    return {"nospark_run": nospark.run_id, "local": local, "s3": s3, "open": open_txn,
            "folder": folder, "table": table, "two_run": two.run_id, **tables}


@pytest.fixture(scope="module")
def catalog(tmp_path_factory) -> dict[str, str]:
    """The embedded Iceberg catalog of the two-target run's table."""
    home = tmp_path_factory.mktemp("run_page_catalog")
    (home / "warehouse").mkdir()
    return {"type": "sql", "uri": f"sqlite:///{home}/catalog.db",
            "warehouse": f"file://{home}/warehouse"}


@pytest.fixture(scope="module")
def api_process(airflow_db, moto_endpoint, tmp_path_factory,
                catalog: dict[str, str]) -> Iterator[tuple[Any, str, Path]]:
    """``airflow api-server`` started on a free 127.0.0.1 port (this session's home and
    DB, the simple auth manager with an admin and a viewer, the S3 and catalog
    connections)."""
    os.environ[f"AIRFLOW_CONN_{CAT_CONN.upper()}"] = json.dumps({
        "conn_type": "iceberg_catalog", "host": catalog["uri"], "schema": catalog["warehouse"],
        "extra": {"type": "sql"}})
    home = tmp_path_factory.mktemp("api_server")
    passwords = home / "passwords.json"
    passwords.write_text(json.dumps(PASSWORDS))
    os.environ[f"AIRFLOW_CONN_{S3_CONN.upper()}"] = json.dumps({
        "conn_type": "generic", "login": "run-page", "password": S3_SECRET,
        "extra": {"endpoint_url": moto_endpoint, "region_name": "us-east-1"}})
    port = _free_port()
    env = {**os.environ,
           "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin,viewer:viewer,"
                                                       "limited:viewer",
           # the simple auth manager, with user "limited" reading LIMITED_DAGS only
           "AIRFLOW__CORE__AUTH_MANAGER": "tests.airflow.auth_manager.PerDagAuthManager",
           "AIRFLOW_TPC_TEST_LIMITED_DAGS": LIMITED_DAGS,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO),
                                                      os.environ.get("PYTHONPATH")])),
           "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
           "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False"}
    log_path = home / "api-server.log"
    log = open(log_path, "wb")  # noqa: SIM115 (closed below)
    proc = subprocess.Popen([sys.executable, "-m", "airflow", "api-server", "-H", "127.0.0.1",
                             "-p", str(port)], env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        yield proc, f"http://127.0.0.1:{port}", log_path
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        log.close()


@pytest.fixture(scope="module")
def server(api_process, seeded) -> str:
    """The API server's base URL, once it answers (and the transactions exist)."""
    proc, base, log_path = api_process
    deadline = time.monotonic() + 300  # start-up on a busy 2-core machine
    while True:
        assert proc.poll() is None, log_path.read_text()[-3000:]
        try:
            if httpx.get(f"{base}/api/v2/monitor/health", timeout=5).status_code == 200:
                return base
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, "api-server did not answer within 300 s"
        time.sleep(0.5)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=_chromium(), headless=True)
        yield b
        b.close()


def _login(browser: Any, base: str, user: str) -> Any:
    """A browser context logged in through Airflow's own login form."""
    context = browser.new_context(viewport={"width": 1600, "height": 820})
    context.set_default_timeout(120_000)
    page = context.new_page()
    page.goto(f"{base}/auth/login")
    page.get_by_label("Username").fill(user)
    page.get_by_label("Password").fill(PASSWORDS[user])
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(lambda u: "/auth/login" not in u)
    assert any(c["name"] == "_token" for c in context.cookies()), context.cookies()
    return page


def _session(base: str, user: str) -> tuple[dict[str, str], str]:
    """(cookie header, the page's CSRF token) of a fresh session, as a browser would hold."""
    r = httpx.post(f"{base}/auth/token", json={"username": user, "password": PASSWORDS[user]},
                   timeout=60)
    assert r.status_code in (200, 201), r.text
    cookie = {"Cookie": f"_token={r.json()['access_token']}"}
    page = httpx.get(f"{base}/airflow-tpc/run", params={"dag_id": DAG_ID, "run_id": RUN_ID},
                     headers=cookie, timeout=120)
    assert page.status_code == 200, page.text
    token = re.search(r'<meta name="tpc-csrf" content="([0-9a-f]+)">', page.text).group(1)
    return cookie, token


def _link_xcom(dag_id: str, run_id: str, task_id: str, key: str) -> str:
    """An extra link's XCom as the API server reads it (the task runner stores the bare
    string, not JSON)."""
    from airflow import settings
    from airflow.models.xcom import XComModel
    from sqlalchemy import select

    with settings.Session() as session:
        raw = session.scalar(select(XComModel.value).where(
            XComModel.dag_id == dag_id, XComModel.run_id == run_id,
            XComModel.task_id == task_id, XComModel.key == key))
    assert raw is not None, f"no {key} XCom"
    raw = raw.decode() if isinstance(raw, bytes) else str(raw)
    return json.loads(raw) if raw.startswith('"') else raw


def test_http_refusals(server, seeded):
    """Unauthenticated, forged cross-site, unknown and unauthorized requests are refused,
    and change nothing in the ledger."""
    q = {"dag_id": DAG_ID, "run_id": RUN_ID}
    local: Sink = seeded["local"]
    def ledger() -> list[dict[str, Any]]:
        return [{k: v for k, v in i.to_dict().items() if k != "age_s"} for i in local.describe()]

    before = ledger()

    # Not logged in: 401, a page offering the login (HTML routes) or JSON (API routes).
    r = httpx.get(f"{server}/airflow-tpc/run", params=q, timeout=120)
    assert r.status_code == 401 and "/auth/login?next=" in r.text, r.text
    assert httpx.get(f"{server}/airflow-tpc/api/transactions", params=q,
                     timeout=120).status_code == 401
    assert httpx.get(f"{server}/airflow-tpc/", timeout=120).status_code == 401

    admin, token = _session(server, "admin")
    # Unknown run, unknown target, unknown attempt: 404, never an empty page or "None".
    for path, params in (("/airflow-tpc/run", {"dag_id": DAG_ID, "run_id": "no-such-run"}),
                         ("/airflow-tpc/target", {"dag_id": DAG_ID, "task_id": "nope"}),
                         ("/airflow-tpc/manifest", {**q, "epoch": EPOCH, "attempt": 9}),
                         ("/airflow-tpc/api/transactions", {"dag_id": "nodag", "run_id": "x"})):
        r = httpx.get(f"{server}{path}", params=params, headers=admin, timeout=120)
        assert r.status_code == 404, (path, r.status_code, r.text)
        assert "None" not in r.text, r.text

    body = {"epoch": EPOCH, "attempt": seeded["open"].attempt, "task_id": "events.submit"}
    abort = f"{server}/airflow-tpc/api/abort"
    # A forged cross-site POST with the victim's cookie: form, then JSON from a foreign page.
    evil = {"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"}
    r = httpx.post(abort, params=q, data={k: str(v) for k, v in body.items()},
                   headers={**admin, **evil}, timeout=120)
    assert r.status_code == 403, r.text
    r = httpx.post(abort, params=q, json=body, timeout=120,
                   headers={**admin, **evil, "X-Airflow-TPC": token})
    assert r.status_code == 403, r.text
    # Same origin and JSON, but not this session's token (a guess, or another session's).
    r = httpx.post(abort, params=q, json=body, timeout=120,
                   headers={**admin, "Origin": server, "X-Airflow-TPC": "1"})
    assert r.status_code == 403 and "token" in r.json()["detail"], r.text

    # The viewer may read the run but not abort in it, even with its own valid token.
    viewer, viewer_token = _session(server, "viewer")
    r = httpx.post(abort, params=q, json=body, timeout=120,
                   headers={**viewer, "Origin": server, "X-Airflow-TPC": viewer_token})
    assert r.status_code == 403 and "token" not in r.text, r.text
    assert ledger() == before


def test_manifest_pages_and_extra_link(server, seeded, browser):
    """The commit task's extra link is an http page of the plugin; the manifest lists
    files, sizes, checksums and rows, for a local and an S3 target."""
    run_id = seeded["nospark_run"]
    link = _link_xcom("tpc_it_nospark", run_id, "commit", "_link_ManifestLink")
    assert link.startswith("/airflow-tpc/manifest?dag_id=tpc_it_nospark&"), link
    assert "epoch=2026-09-15" in link and "attempt=2" in link, link

    page = _login(browser, server, "admin")
    page.goto(f"{server}{link}")
    assert page.locator("h1").inner_text() == "Manifest of tpc_it_nospark/2026-09-15/2"
    assert page.locator(".badge").first.get_attribute("data-state") == "COMMITTED"
    assert "published marker" in page.locator("dl.facts").inner_text()
    [entry] = page.locator("tr.manifest-file").all()
    cells = entry.locator("td").all_inner_texts()
    assert cells[0].endswith("part-0.parquet") and cells[1] == "64 B", cells
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", cells[3]), cells

    # An S3 target, through the run page's manifest link.
    page.goto(f"{server}/airflow-tpc/run?dag_id={S3_DAG_ID}&run_id={S3_RUN_ID}")
    card = page.locator('section.card[data-target="s3://tpc-run-page/daily"]')
    row = card.locator("tbody tr")
    assert row.get_attribute("data-state") == "COMMITTED"
    assert row.locator('td[data-col="bytes"]').inner_text() == "3.0 MiB"
    assert row.locator('td[data-col="rows"]').inner_text() == "250,000"
    row.get_by_role("link", name="Manifest").click()
    page.wait_for_url(re.compile(r"/airflow-tpc/manifest\?"))
    facts = page.locator("dl.facts").inner_text()
    assert "s3://tpc-run-page/daily" in facts and "published marker" in facts, facts
    [entry] = page.locator("tr.manifest-file").all()
    cells = entry.locator("td").all_inner_texts()
    assert "part-0.parquet" in cells[0] and cells[1] == "3.0 MiB" and cells[2] == "250,000"
    assert cells[3].startswith("etag:"), cells
    assert S3_SECRET not in page.content()
    # Outside Airflow's frame the page follows the OS colour scheme.
    assert page.evaluate("document.documentElement.dataset.theme") == "light"
    page.emulate_media(color_scheme="dark")
    page.reload()
    assert page.evaluate("document.documentElement.dataset.theme") == "dark"
    page.context.close()


def test_run_page_in_airflow_ui_and_abort(server, seeded, browser):
    """Log in, open the run's Transactions tab in Airflow's UI, read it, screenshot it,
    abort the pre-committed attempt through the dialog; the ledger says ABORTED."""
    local: Sink = seeded["local"]
    txn = seeded["open"]
    page = _login(browser, server, "admin")

    # Reached from Airflow's navigation: the Plugins menu entry (an external view).
    page.goto(f"{server}/plugin/airflow-tpc")
    nav = page.frame_locator('iframe[title="TPC transactions"]')
    nav.get_by_role("link", name=f"{DAG_ID} / {RUN_ID}").first.wait_for()

    # The run view, as a tab of the DAG run in Airflow's UI.
    page.goto(f"{server}/dags/{DAG_ID}/runs/{RUN_ID}/plugin/tpc-run")
    frame = page.frame_locator('iframe[title="Transactions"]')
    card = frame.locator(f'section.card[data-target="{local.target}"]')
    rows = card.locator("tbody tr")
    rows.first.wait_for()
    assert rows.count() == 2
    states = {r.get_attribute("data-txn"): r.get_attribute("data-state") for r in rows.all()}
    assert states == {f"tpc_run_page/{EPOCH}/1": "ABORTED", txn.txn_id: "PRECOMMITTED"}
    open_row = card.locator(f'tr[data-txn="{txn.txn_id}"]')
    assert open_row.locator('td[data-col="files"]').inner_text() == "2"
    assert open_row.locator('td[data-col="rows"]').inner_text() == "1,234"
    assert open_row.locator('td[data-col="bytes"]').inner_text() == "3.0 KiB"
    assert re.search(r"in \d+ (h|min|d)", open_row.inner_text()), open_row.inner_text()
    aborted_row = card.locator(f'tr[data-txn="tpc_run_page/{EPOCH}/1"]')
    assert "executor lost" in aborted_row.inner_text()
    assert aborted_row.get_by_role("button", name="Abort").count() == 0
    # The badge has Airflow's state colour (failed: red) for ABORTED.
    colour = aborted_row.locator(".badge").evaluate(
        "e => getComputedStyle(e).getPropertyValue('--c').trim()")
    assert colour == "#ff0000", colour
    assert "None" not in frame.locator("body").inner_text()
    # Inside Airflow's UI the page takes the UI's own colour mode.
    ui_mode = page.evaluate("document.documentElement.classList.contains('dark')")
    theme = frame.locator("html").get_attribute("data-theme")
    assert theme == ("dark" if ui_mode else "light"), theme
    SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOT))

    # Abort: the dialog first (Cancel changes nothing), then confirm.
    open_row.get_by_role("button", name="Abort").click()
    dialog = frame.locator("#tpc-abort-dialog")
    assert dialog.is_visible() and txn.txn_id in dialog.inner_text()
    dialog.get_by_role("button", name="Cancel").click()
    assert not dialog.is_visible()
    assert local.describe(EPOCH)[-1].state is TxnState.PRECOMMITTED
    open_row.get_by_role("button", name="Abort").click()
    dialog.get_by_role("button", name="Abort transaction").click()
    # The page reloads from the ledger once the abort answered.
    frame.locator(f'tr[data-txn="{txn.txn_id}"][data-state="ABORTED"]').wait_for()
    info = next(i for i in local.describe(EPOCH) if i.attempt == txn.attempt)
    assert info.state is TxnState.ABORTED and info.staging_files == 0
    assert info.reason == "aborted from the airflow-tpc UI by admin"

    # The target view: every transaction of the target, newest first, with its run.
    page.goto(f"{server}/airflow-tpc/target?dag_id={DAG_ID}&task_id=events.submit")
    txns = page.locator("tbody tr").evaluate_all("rs => rs.map(r => r.dataset.txn)")
    assert txns == [txn.txn_id, f"tpc_run_page/{EPOCH}/1"], txns
    assert page.get_by_role("link", name=f"{DAG_ID} / {RUN_ID}").count() == 2
    page.context.close()


def _abort_in_page(page: Any, card: Any, txn_id: str) -> None:
    """Abort one row through the page's dialog; wait until the page shows it ABORTED."""
    card.locator(f'tr[data-txn="{txn_id}"]').get_by_role("button", name="Abort").click()
    dialog = page.locator("#tpc-abort-dialog")
    assert dialog.is_visible()
    dialog.get_by_role("button", name="Abort transaction").click()
    card.locator(f'tr[data-txn="{txn_id}"][data-state="ABORTED"]').wait_for()


def test_two_targets_one_epoch_abort_names_the_right_transaction(server, seeded, browser):
    """A run holds attempt 1 of the same epoch in a folder and in an Iceberg table.
    Aborting the table's row aborts the table's attempt only: the folder's attempt, its
    ledger and its staging stay byte for byte; then the reverse, on attempt 2."""
    from airflow import settings
    from airflow.models.log import Log
    from sqlalchemy import select

    from tests.core.helpers import full_tree

    folder: Sink = seeded["folder"]
    table: Sink = seeded["table"]
    txn_id = f"tpc_two/{EPOCH}/1"
    page = _login(browser, server, "admin")
    page.goto(f"{server}/airflow-tpc/run?dag_id={TWO_DAG_ID}&run_id={TWO_RUN_ID}")
    folder_card = page.locator(f'section.card[data-target="{folder.target}"]')
    table_card = page.locator(f'section.card[data-target="{TABLE}"]')  # the table's own name
    for card in (folder_card, table_card):
        assert card.locator(f'tr[data-txn="{txn_id}"]').get_attribute("data-state") \
            == "PRECOMMITTED"

    folder_before = full_tree(folder)
    _abort_in_page(page, table_card, txn_id)
    [t1] = [i for i in table.describe(EPOCH) if i.attempt == 1]
    assert t1.state is TxnState.ABORTED and "by admin" in t1.reason
    assert full_tree(folder) == folder_before
    assert folder.describe(EPOCH)[0].state is TxnState.PRECOMMITTED
    assert folder_card.locator(f'tr[data-txn="{txn_id}"]').get_attribute("data-state") \
        == "PRECOMMITTED"

    # The reverse, on a second attempt of each (the same number again).
    two_owner = {"dag_id": TWO_DAG_ID, "run_id": TWO_RUN_ID}
    f2 = folder.begin(EPOCH, owner=two_owner)
    _stage(folder, f2, {"part-0.parquet": b"g" * 10})
    folder.precommit(f2)
    t2 = table.begin(EPOCH, owner=two_owner)
    staged = table.storage.join(table.layout.staging(EPOCH, t2.attempt), "part-0.parquet")
    table.storage.put(staged, b"")
    pq.write_table(pa.table({"id": pa.array([4], pa.int64()), "epoch": pa.array([EPOCH])}),
                   staged)
    table.precommit(t2)
    assert (f2.attempt, t2.attempt) == (2, 2)
    table_before = full_tree(table)
    page.reload()
    _abort_in_page(page, folder_card, f2.txn_id)
    assert [i.state for i in folder.describe(EPOCH) if i.attempt == 2] == [TxnState.ABORTED]
    assert full_tree(table) == table_before
    assert [i.state for i in table.describe(EPOCH) if i.attempt == 2] == [TxnState.PRECOMMITTED]

    # The table's card names the table as itself (its location beside it); once the
    # table's attempt 2 is committed, the row shows the snapshot it made, and its staged
    # files (the table's data files now, added in place) are not shown as staging.
    assert table_card.locator("code[data-table]").inner_text() == TABLE
    assert table_card.locator("code[data-location]").inner_text() == table.target
    row = table_card.locator(f'tr[data-txn="{t2.txn_id}"]')
    assert re.fullmatch(r"\d+ / \d+(\.\d)? (B|KiB)",
                        row.locator('td[data-col="staged"]').inner_text()), row.inner_text()
    assert row.locator('td[data-col="version"]').inner_text() == "—"
    assert table.commit(t2).outcome == "committed"
    page.reload()
    row = table_card.locator(f'tr[data-txn="{t2.txn_id}"][data-state="COMMITTED"]')
    assert row.locator('td[data-col="version"]').inner_text() == _snapshot_of(table, t2.txn_id)
    assert row.locator('td[data-col="staged"]').inner_text() == "—"
    assert row.locator('[data-staged="in-table"]').count() == 1
    assert folder_card.locator("code[data-table]").count() == 0
    assert folder_card.locator('td[data-col="version"]').count() == 0

    # Both aborts are in Airflow's audit log, with the user, the target and the txn id.
    with settings.Session() as session:
        rows = session.scalars(select(Log).where(Log.event == "airflow-tpc.abort",
                                                 Log.run_id == TWO_RUN_ID)
                               .order_by(Log.id)).all()
    extras = [json.loads(r.extra) for r in rows]
    assert [(r.owner, r.dag_id, r.task_id) for r in rows] == [
        ("admin", TWO_DAG_ID, "daily.submit"), ("admin", TWO_DAG_ID, "events.submit")]
    assert [(e["target"], e["txn_id"], e["outcome"], e["via"]) for e in extras] == [
        (TABLE, txn_id, "aborted", "ui"), (folder.target, f2.txn_id, "aborted", "ui")]
    page.context.close()


def test_abort_api_needs_the_full_identity(server, seeded):
    """The JSON API refuses a request that does not name one transaction (400), answers
    an abort of an aborted attempt with "already aborted", and logs it."""
    folder: Sink = seeded["folder"]
    table: Sink = seeded["table"]
    q = {"dag_id": TWO_DAG_ID, "run_id": TWO_RUN_ID}
    token = httpx.post(f"{server}/auth/token", timeout=60,
                       json={"username": "admin", "password": PASSWORDS["admin"]})
    api = {"Authorization": f"Bearer {token.json()['access_token']}", "X-Airflow-TPC": "1"}
    abort = f"{server}/airflow-tpc/api/abort"
    from tests.core.helpers import full_tree

    before = (full_tree(folder), full_tree(table))
    for body, why in (({"epoch": EPOCH, "attempt": 1}, "name the transaction"),
                      ({"epoch": EPOCH, "attempt": 1, "target": folder.target},
                       "name the transaction"),
                      ({"epoch": EPOCH, "attempt": 1, "namespace": "tpc_two"},
                       "name the transaction")):
        r = httpx.post(abort, params=q, json=body, headers=api, timeout=120)
        assert r.status_code == 400 and why in r.json()["detail"], (body, r.text)
    # A request whose fields name two different transactions: 400, neither is touched.
    for body in ({"epoch": EPOCH, "attempt": 1, "task_id": "events.submit",
                  "target": table.target},
                 {"epoch": EPOCH, "attempt": 1, "task_id": "events.submit",
                  "txn_id": "other/2026-09-01/1"}):
        r = httpx.post(abort, params=q, json=body, headers=api, timeout=120)
        assert r.status_code == 400 and "two different" in r.json()["detail"], (body, r.text)
    # Names that match nothing of this run: 404, never another transaction.
    r = httpx.post(abort, params=q, json={"epoch": EPOCH, "attempt": 1, "task_id": "nope.submit"},
                   headers=api, timeout=120)
    assert r.status_code == 404, r.text
    assert (full_tree(folder), full_tree(table)) == before

    # The table's attempt 1 is already aborted (by the page test, or here first).  A
    # table is named by its URI or by its location: the same transaction either way.
    body = {"epoch": EPOCH, "attempt": 1, "target": TABLE, "namespace": "tpc_two"}
    first = httpx.post(abort, params=q, json=body, headers=api, timeout=120)
    assert first.status_code == 200, first.text
    again = httpx.post(abort, params=q, json={**body, "target": table.target}, headers=api,
                       timeout=120)
    assert again.status_code == 200 and again.json()["outcome"] == "already aborted", again.text
    assert again.json()["target"] == TABLE and again.json()["task_id"] == "daily.submit"
    assert [i.state for i in folder.describe(EPOCH) if i.attempt == 1] == [TxnState.PRECOMMITTED]


def test_each_commit_tasks_manifest_link_names_its_own_target(server, seeded, browser):
    """Two groups committed attempt 1 of the same epoch: each commit task's TPC manifest
    link opens its own target's manifest; the run's manifest page without a target is
    refused as ambiguous (400), never guessed."""
    run_id = seeded["two_run"]
    page = _login(browser, server, "admin")
    for group, size in (("events", "64 B"), ("daily", "128 B")):
        link = _link_xcom("tpc_it_two", run_id, f"{group}.commit", "_link_ManifestLink")
        assert "target=" in link and "namespace=tpc_two_" + group in link, link
        page.goto(f"{server}{link}")
        facts = page.locator("dl.facts").inner_text()
        assert f"/two/{group}" in facts, (group, facts)
        [entry] = page.locator("tr.manifest-file").all()
        assert entry.locator("td").all_inner_texts()[1] == size
    page.context.close()
    admin, _ = _session(server, "admin")
    r = httpx.get(f"{server}/airflow-tpc/manifest", headers=admin, timeout=120,
                  params={"dag_id": "tpc_it_two", "run_id": run_id, "epoch": "2026-09-16",
                          "attempt": 1})
    assert r.status_code == 400 and "several targets" in r.text, r.text


def test_table_targets_show_as_themselves(server, seeded, browser):
    """A run writing an Iceberg and a Delta table: the run page, the target page, the
    manifest page and /api/transactions name each table by its URI (the location beside
    it), show the snapshot / version each commit made, and count as staged only what is
    really staging — not a committed attempt's files, which the table took in place."""
    ice, delta, delta_uri = seeded["iceberg"], seeded["delta"], seeded["delta_uri"]
    ice_infos = {i.attempt: i for i in ice.describe(EPOCH)}
    # What the ledger says: attempt 1's files are still there (snapshot 1 references them).
    assert ice_infos[1].superseded and ice_infos[1].staging_files >= 1
    assert ice_infos[2].staging_files >= 1 and str(ice_infos[3].state) == "PRECOMMITTED"
    snaps = {a: _snapshot_of(ice, f"tpc_tables/{EPOCH}/{a}") for a in (1, 2)}
    assert snaps[1] != snaps[2]
    q = {"dag_id": TWO_DAG_ID, "run_id": TABLES_RUN_ID}
    page = _login(browser, server, "admin")

    def cells(card: Any, attempt: int) -> dict[str, str]:
        row = card.locator(f'tr[data-txn$="/{EPOCH}/{attempt}"]')
        return dict(row.locator("td[data-col]").evaluate_all(
            "ts => ts.map(t => [t.dataset.col, t.innerText.trim()])"))

    staged = re.compile(r"\d+ / \d+(\.\d)? (B|KiB)")
    page.goto(f"{server}/airflow-tpc/run?dag_id={TWO_DAG_ID}&run_id={TABLES_RUN_ID}")
    ice_card = page.locator(f'section.card[data-target="{ICEBERG}"]')
    delta_card = page.locator(f'section.card[data-target="{delta_uri}"]')
    assert ice_card.locator("code[data-table]").inner_text() == ICEBERG
    assert ice_card.locator("code[data-location]").inner_text() == ice.target
    assert delta_card.locator("code[data-table]").inner_text() == delta_uri
    assert "Snapshot" in ice_card.locator("th").all_inner_texts()
    assert "Version" in delta_card.locator("th").all_inner_texts()
    for attempt in (1, 2):  # the committed attempts: their snapshots, nothing staged
        got = cells(ice_card, attempt)
        assert (got["version"], got["staged"]) == (snaps[attempt], "—"), got
    got = cells(ice_card, 3)
    assert got["version"] == "—" and staged.fullmatch(got["staged"]), got
    got = cells(delta_card, 1)
    assert (got["version"], got["staged"]) == ("0", "—"), got
    assert staged.fullmatch(cells(delta_card, 2)["staged"]), cells(delta_card, 2)

    page.goto(f"{server}/airflow-tpc/target?dag_id={TWO_DAG_ID}&task_id=daily.submit")
    assert page.locator("h1 code").inner_text() == ICEBERG
    tcard = page.locator("section.card")
    assert tcard.get_attribute("data-target") == ICEBERG
    assert cells(tcard, 2)["version"] == snaps[2]
    # The Abort button of the target page names the table by its URI.
    identity = tcard.locator("button.danger").get_attribute("data-identity")
    assert json.loads(identity)["target"] == ICEBERG

    page.goto(f"{server}/airflow-tpc/manifest?dag_id={TWO_DAG_ID}&run_id={TABLES_RUN_ID}"
              f"&epoch={EPOCH}&attempt=2&target={ICEBERG}&namespace=tpc_tables")
    facts = dict(zip(page.locator("dl.facts dt").all_inner_texts(),
                     page.locator("dl.facts dd").all_inner_texts(), strict=True))
    assert (facts["Table"], facts["Table location"], facts["Snapshot"]) == \
        (ICEBERG, ice.target, snaps[2]), facts
    page.context.close()

    admin, _ = _session(server, "admin")
    r = httpx.get(f"{server}/airflow-tpc/api/transactions", params=q, headers=admin,
                  timeout=120)
    assert r.status_code == 200, r.text
    rows = {(t["target"], t["attempt"]): t for t in r.json()["transactions"]}
    assert set(rows) == {(ICEBERG, 1), (ICEBERG, 2), (ICEBERG, 3), (delta_uri, 1),
                         (delta_uri, 2)}
    assert rows[(ICEBERG, 2)]["location"] == ice.target
    assert rows[(ICEBERG, 2)]["snapshot_id"] == snaps[2] and rows[(ICEBERG, 2)]["in_table"]
    assert rows[(ICEBERG, 3)]["snapshot_id"] is None and not rows[(ICEBERG, 3)]["in_table"]
    assert rows[(delta_uri, 1)]["version"] == "0" and rows[(delta_uri, 1)]["in_table"]
    assert rows[(delta_uri, 1)]["location"] == delta.target


def test_run_page_fits_a_1280_px_window(server, seeded, browser):
    """Inside Airflow's UI in a 1280 px wide window, every card's table fits its card
    (no column — the Abort button last of all — hides behind a horizontal scroll), and
    neither the page in the iframe nor Airflow's page around it scrolls sideways: on a
    folder run, the two-target run and the tables run (19-digit snapshot ids, long
    table locations)."""
    page = _login(browser, server, "admin")
    page.set_viewport_size({"width": 1280, "height": 800})
    width = "e => [e.scrollWidth, e.clientWidth]"
    for dag_id, run_id in ((DAG_ID, RUN_ID), (TWO_DAG_ID, TWO_RUN_ID),
                           (TWO_DAG_ID, TABLES_RUN_ID)):
        page.goto(f"{server}/dags/{dag_id}/runs/{run_id}/plugin/tpc-run")
        frame = page.frame_locator('iframe[title="Transactions"]')
        frame.locator("section.card tbody tr").first.wait_for()
        overflow = frame.locator(".table-wrap").evaluate_all(
            "ws => ws.map(w => [w.scrollWidth, w.clientWidth])")
        widths = frame.locator("section.card").first.locator("thead th").evaluate_all(
            "hs => hs.map(h => [h.innerText, h.offsetWidth])")
        assert overflow and all(s <= c for s, c in overflow), (run_id, overflow, str(widths))
        inner = frame.locator("html").evaluate(width)
        outer = page.locator("html").evaluate(width)
        assert inner[0] <= inner[1] and outer[0] <= outer[1], (run_id, inner, outer)
        # Nothing of a card's header is cut off either (the card clips what overflows).
        clipped = frame.locator("section.card > header").evaluate_all(
            "hs => hs.filter(h => h.scrollWidth > h.clientWidth).map(h => h.innerText)")
        assert clipped == [], (run_id, clipped)
    page.context.close()
