"""A group transaction on the run page, end to end: a real ``airflow api-server``, real
Chromium, real ledgers (a folder and an Iceberg table on a SQL catalog), no Spark.

The group's transactions are begun by the real ``GroupSparkSubmitOperator.begin_transaction``
(what its XCom holds is what the page opens the group from) and stored as the XCom of
task ``daily.submit`` in runs of ``tpc_it_two``; the jobs' work — a staged file per
member, the seal — is done here with the core API, as test_run_page.py seeds single
targets:

* run ``run-page-group``: group attempt 1 of EPOCH aborted (its job died after writing
  one member), attempt 2 pre-committed on both members; beside it a single-target
  transaction (task ``events.submit``), pre-committed;
* run ``run-page-group-committed``: the same group's attempt 1 of DONE_EPOCH, committed
  and published;
* run ``run-page-group-rogue``: a ``tpc_txn`` XCom naming a member's attempt directly;
* run ``run-page-group-bare`` (of ``tpc_it_group_gate_nospark``): the group's transaction
  pushed without the group's arguments.

The page shows one card for the group with both members; its Abort aborts every member
and nothing else; a committed group is refused; the single-target route refuses a member.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_tpc import Sink, TxnState

from . import test_run_page as run_page
from .helpers import day
from .test_run_page import CAT_CONN, LIMITED_DAGS, PASSWORDS, _doc, _login, _stage

# The fixtures of the run page's module: the API server (this module's own process, with
# the catalog connection CAT_CONN naming this module's catalog) and Chromium.
api_process = run_page.api_process
browser = run_page.browser
catalog = run_page.catalog

pytestmark = pytest.mark.timeout(900)

#: The runs are of tpc_it_two (two submit tasks; an XCom needs its task to exist): its
#: ``daily.submit`` is the group's submit task here, its ``events.submit`` a single target's.
DAG_ID = "tpc_it_two"
TASK, SINGLE_TASK = "daily.submit", "events.submit"
RUN_ID, DONE_RUN_ID, ROGUE_RUN_ID = ("run-page-group", "run-page-group-committed",
                                     "run-page-group-rogue")
#: A run of another DAG whose submit task pushes the group's transaction only (no arguments).
BARE_DAG_ID, BARE_RUN_ID = "tpc_it_group_gate_nospark", "run-page-group-bare"
EPOCH, DONE_EPOCH = "2026-10-01", "2026-10-02"
NS = "tpc_rpg"
TABLE = "iceberg://runpage/analytics.group_daily"


class _TI:
    """What begin_transaction asks of its task instance: who it is, and xcom_push."""

    def __init__(self, run_id: str, try_number: int) -> None:
        self.dag_id, self.run_id, self.task_id = DAG_ID, run_id, TASK
        self.try_number, self.map_index = try_number, -1
        self.pushed: dict[str, Any] = {}

    def xcom_push(self, key: str, value: Any) -> None:
        self.pushed[key] = value


def _write(group: Any, gtxn: Any, members: tuple[str, ...], ids: list[int]) -> None:
    """The job's part: one file into each member's staging (Parquet for the table)."""
    for name in members:
        sink, txn = group.sinks[name], gtxn.member(name)
        staged = sink.storage.join(sink.layout.staging(txn.epoch, txn.attempt),
                                   "part-0.parquet")
        if name == "folder":
            sink.storage.put(staged, b"g" * 100)
            continue
        sink.storage.put(staged, b"")
        pq.write_table(pa.table({"id": pa.array(ids, pa.int64()),
                                 "epoch": pa.array([txn.epoch] * len(ids))}), staged)


def _xcom(key: str, value: Any, run_id: str, task_id: str = TASK,
          dag_id: str = DAG_ID) -> None:
    from airflow import settings
    from airflow.models.xcom import XComModel

    with settings.Session() as session:
        XComModel.set(key=key, value=value, dag_id=dag_id, task_id=task_id, run_id=run_id,
                      session=session)
        session.commit()


@pytest.fixture(scope="module")
def seeded(api_process, dagbag, tmp_path_factory) -> dict[str, Any]:
    """The runs of the module docstring (made while the API server starts)."""
    from airflow import settings
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import sync_bag_to_db
    from airflow.models.dagrun import get_or_create_dagrun
    from airflow.serialization.serialized_objects import DagSerialization
    from airflow.utils.types import DagRunTriggeredByType

    from airflow_tpc.airflow.operators.group import GROUP_XCOM_KEY, GroupSparkSubmitOperator

    DagBundlesManager().sync_bundles_to_db()
    sync_bag_to_db(dagbag, "dags-folder", None)
    for dag_id, run_id, logical in ((DAG_ID, RUN_ID, day(EPOCH)),
                                    (DAG_ID, DONE_RUN_ID, day(DONE_EPOCH)),
                                    (DAG_ID, ROGUE_RUN_ID, day("2026-10-03")),
                                    (BARE_DAG_ID, BARE_RUN_ID, day(EPOCH))):
        sdag = DagSerialization.deserialize_dag(DagSerialization.serialize_dag(
            dagbag.get_dag(dag_id)))
        with settings.Session() as session:
            get_or_create_dagrun(dag=sdag, run_id=run_id, logical_date=logical,
                                 data_interval=(logical, logical), run_after=logical,
                                 conf=None, triggered_by=DagRunTriggeredByType.TEST,
                                 triggering_user_name="test", start_date=logical,
                                 session=session)
            session.commit()

    tmp = tmp_path_factory.mktemp("run_page_group")
    group_dir = tmp / "_tpc_groups" / NS

    def submit(epoch: str) -> GroupSparkSubmitOperator:
        """The group's submit task as a DAG declares it (its catalog by connection)."""
        return GroupSparkSubmitOperator(
            task_id=TASK, application="unused.py", epoch=epoch, conn_id="spark_local",
            namespace=NS, targets={"folder": str(tmp / "events"), "table": TABLE},
            group_uri=str(group_dir), catalog_conn_id=CAT_CONN)

    def begin(epoch: str, run_id: str, try_number: int) -> tuple[Any, Any, dict[str, Any]]:
        op = submit(epoch)
        ti = _TI(run_id, try_number)
        op.begin_transaction({"ti": ti})
        group, _ = op.open_group()
        doc = ti.pushed[GROUP_XCOM_KEY]
        return group, group.transaction(doc["epoch"], doc["attempt"]), doc

    # Run 1, try 1: the job dies after writing one member; the group is aborted.
    group, g1, _ = begin(EPOCH, RUN_ID, 1)
    _write(group, g1, ("folder",), [1])
    assert group.abort(g1, "the Spark job died (executor lost)")
    # Try 2: both members written and sealed; its XCom replaces try 1's.
    group, g2, doc = begin(EPOCH, RUN_ID, 2)
    assert g2.attempt == 2
    _write(group, g2, ("folder", "table"), [1, 2, 3])
    group.precommit(g2)
    _xcom(GROUP_XCOM_KEY, doc, RUN_ID)
    # Beside it, in the same run, a single target's transaction.
    single = Sink(str(tmp / "single"), "tpc_rpg_single")
    stxn = single.begin(EPOCH, owner={"dag_id": DAG_ID, "run_id": RUN_ID,
                                      "task_id": SINGLE_TASK})
    _stage(single, stxn, {"part-0.parquet": b"s" * 64})
    single.precommit(stxn)
    _xcom("tpc_txn", _doc(stxn), RUN_ID, SINGLE_TASK)

    # Run 2: the same group's attempt of another epoch, committed and published.
    group, done, done_doc = begin(DONE_EPOCH, DONE_RUN_ID, 1)
    _write(group, done, ("folder", "table"), [7, 8])
    group.precommit(done)
    assert group.commit(done).outcome == "committed"
    _xcom(GROUP_XCOM_KEY, done_doc, DONE_RUN_ID)

    # Run 3: a single-target XCom naming the folder member's attempt 2 of run 1.
    _xcom("tpc_txn", _doc(g2.member("folder")), ROGUE_RUN_ID, SINGLE_TASK)
    # Run 4: the group's transaction alone, as a task of one's own may push it.
    _xcom(GROUP_XCOM_KEY, g2.to_dict(), BARE_RUN_ID, "submit", BARE_DAG_ID)
    return {"group": group, "g1": g1, "g2": g2, "done": done, "doc": doc,
            "single": single, "single_txn": stxn, "group_dir": str(group_dir)}


@pytest.fixture(scope="module")
def server(api_process, seeded) -> str:
    """The API server's base URL, once it answers (and the transactions exist)."""
    import time

    proc, base, log_path = api_process
    deadline = time.monotonic() + 300
    while True:
        assert proc.poll() is None, log_path.read_text()[-3000:]
        try:
            if httpx.get(f"{base}/api/v2/monitor/health", timeout=5).status_code == 200:
                return base
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, "api-server did not answer within 300 s"
        time.sleep(0.5)


def _bearer(base: str, user: str = "admin") -> dict[str, str]:
    r = httpx.post(f"{base}/auth/token", timeout=60,
                   json={"username": user, "password": PASSWORDS[user]})
    assert r.status_code in (200, 201), r.text
    return {"Authorization": f"Bearer {r.json()['access_token']}", "X-Airflow-TPC": "1"}


def _cookie_session(base: str, user: str) -> tuple[dict[str, str], str]:
    """(cookie header, the page's CSRF token) of a fresh session, as a browser holds them."""
    r = httpx.post(f"{base}/auth/token", timeout=60,
                   json={"username": user, "password": PASSWORDS[user]})
    cookie = {"Cookie": f"_token={r.json()['access_token']}"}
    page = httpx.get(f"{base}/airflow-tpc/run", params={"dag_id": DAG_ID, "run_id": RUN_ID},
                     headers=cookie, timeout=120)
    assert page.status_code == 200, page.text
    return cookie, re.search(r'<meta name="tpc-csrf" content="([0-9a-f]+)">',
                             page.text).group(1)


def _trees(seeded: dict[str, Any]) -> dict[str, Any]:
    """Every file of both members (ledger, staging, data), the group's folder and the
    single target, byte for byte: what "changes nothing" is asserted on."""
    from tests.core.helpers import full_tree, local_tree

    group = seeded["group"]
    return {"members": {n: full_tree(s) for n, s in group.sinks.items()},
            "group": local_tree(seeded["group_dir"]), "single": full_tree(seeded["single"])}


def _audit(run_id: str) -> list[tuple[str, str | None, dict[str, Any]]]:
    from airflow import settings
    from airflow.models.log import Log
    from sqlalchemy import select

    with settings.Session() as session:
        rows = session.scalars(select(Log).where(Log.event == "airflow-tpc.abort",
                                                 Log.run_id == run_id).order_by(Log.id)).all()
        return [(r.owner, r.task_id, json.loads(r.extra)) for r in rows]


def _member_state(sink: Any, epoch: str, attempt: int) -> TxnState:
    [info] = [i for i in sink.describe(epoch) if i.attempt == attempt]
    return info.state


def test_group_is_one_card_with_its_members(server, seeded, browser):
    """Inside Airflow's UI (the run's Transactions tab, 1280 px wide: nothing scrolls
    sideways) the group is one card: its URI and epoch, each attempt's state from the
    group's ledger, and under it each member's name, target (the table by its URI, its
    location beside it), state and files; the single target beside it keeps its own
    card; members get no card of their own.  A member's Manifest link opens that
    member's manifest; a committed group says so, published."""
    group, g2 = seeded["group"], seeded["g2"]
    folder, table = group.sinks["folder"], group.sinks["table"]
    page = _login(browser, server, "admin")
    page.goto(f"{server}/dags/{DAG_ID}/runs/{RUN_ID}/plugin/tpc-run")
    frame = page.frame_locator('iframe[title="Transactions"]')
    card = frame.locator("section.group-card")
    card.locator("tr.group-row").first.wait_for()
    # In a 1280 px window (Airflow's UI around it) no card's table scrolls sideways: the
    # Abort group button is not hidden behind a scroll.
    page.set_viewport_size({"width": 1280, "height": 800})
    overflow = frame.locator(".table-wrap").evaluate_all(
        "ws => ws.map(w => [w.scrollWidth, w.clientWidth])")
    assert len(overflow) == 2 and all(s <= c for s, c in overflow), overflow
    assert card.get_by_role("button", name="Abort group").is_visible()
    assert card.count() == 1
    assert card.get_attribute("data-group") == group.uri
    assert card.locator("code[data-group-uri]").inner_text() == group.uri
    assert card.locator("code[data-epoch]").inner_text() == EPOCH
    assert frame.locator("section.card").count() == 2  # the group's and the single target's
    assert frame.locator(f'section.card[data-target="{seeded["single"].target}"]').count() == 1
    for target in (folder.target, TABLE, table.target):
        assert frame.locator(f'section.card[data-target="{target}"]').count() == 0, target

    attempts = card.locator("tbody").evaluate_all("bs => bs.map(b => b.dataset.groupTxn)")
    assert attempts == [g2.txn_id, f"{NS}/{EPOCH}/1"], attempts
    top = card.locator(f'tr.group-row[data-group-txn="{g2.txn_id}"]')
    assert top.get_attribute("data-state") == "PRECOMMITTED"
    assert top.locator('td[data-col="files"]').inner_text() == "2"
    assert top.get_by_role("button", name="Abort group").count() == 1
    old = card.locator(f'tr.group-row[data-group-txn="{NS}/{EPOCH}/1"]')
    assert old.get_attribute("data-state") == "ABORTED"
    assert "executor lost" in old.inner_text()
    assert old.get_by_role("button", name="Abort group").count() == 0

    members = card.locator(f'tbody[data-group-txn="{g2.txn_id}"] tr.member-row')
    assert members.evaluate_all("rs => rs.map(r => [r.dataset.member, r.dataset.state])") \
        == [["folder", "PRECOMMITTED"], ["table", "PRECOMMITTED"]]
    frow = card.locator(f'tbody[data-group-txn="{g2.txn_id}"] tr[data-member="folder"]')
    trow = card.locator(f'tbody[data-group-txn="{g2.txn_id}"] tr[data-member="table"]')
    assert frow.locator("code[data-target]").inner_text() == folder.target
    assert trow.locator("code[data-table]").inner_text() == TABLE
    assert trow.locator("code[data-location]").inner_text() == table.target
    assert frow.locator('td[data-col="files"]').inner_text() == "1"
    assert trow.locator('td[data-col="files"]').inner_text() == "1"
    assert trow.locator('td[data-col="rows"]').inner_text() == "3"
    # Attempt 1: the table member never got its file; the group aborted both members.
    first = card.locator(f'tbody[data-group-txn="{NS}/{EPOCH}/1"] tr.member-row')
    assert first.evaluate_all("rs => rs.map(r => r.dataset.state)") == ["ABORTED", "ABORTED"]
    assert "None" not in frame.locator("body").inner_text()

    # The table member's Manifest link: that member's sealed manifest, the table by its URI.
    href = trow.get_by_role("link", name="Manifest").get_attribute("href")
    page.goto(f"{server}{href}")
    facts = dict(zip(page.locator("dl.facts dt").all_inner_texts(),
                     page.locator("dl.facts dd").all_inner_texts(), strict=True))
    assert (facts["Table"], facts["State"].strip()) == (TABLE, "PRECOMMITTED"), facts
    assert "sealed manifest" in facts["Source"], facts
    assert page.locator("tr.manifest-file").count() == 1

    # The committed run: the group COMMITTED and published, no Abort, each member's commit
    # (the table's snapshot id in its Version column).
    page.goto(f"{server}/airflow-tpc/run?dag_id={DAG_ID}&run_id={DONE_RUN_ID}")
    done = page.locator("section.group-card tr.group-row")
    assert done.get_attribute("data-state") == "COMMITTED"
    assert "published" in done.locator("td.state").inner_text()
    assert page.get_by_role("button", name="Abort group").count() == 0
    rows = page.locator("section.group-card tr.member-row")
    assert rows.evaluate_all("rs => rs.map(r => r.dataset.state)") == ["COMMITTED"] * 2
    [snap] = [str(s.snapshot_id) for s in table.table_target.load_table().snapshots()
              if (s.summary or {}).get("airflow-tpc.txn-id") == seeded["done"].txn_id]
    assert rows.nth(1).locator("[data-version]").get_attribute("data-version") == snap
    page.context.close()


def _api(server: str, path: str, user: str = "admin", **params: str) -> httpx.Response:
    return httpx.get(f"{server}/airflow-tpc/api/{path}", params=params,
                     headers=_bearer(server, user), timeout=120)


def test_api_transactions_lists_the_runs_group_attempts(server, seeded):
    """``/api/transactions`` answers the run's group attempts beside its single targets':
    each with the group's identity, its decision and cut status, and every member's
    attempt and state; a group that cannot be opened is a row saying why."""
    group, g2 = seeded["group"], seeded["g2"]
    folder, table = group.sinks["folder"], group.sinks["table"]
    r = _api(server, "transactions", dag_id=DAG_ID, run_id=RUN_ID)
    assert r.status_code == 200, r.text
    body = r.json()
    assert [t["task_id"] for t in body["transactions"]] == [SINGLE_TASK]
    assert [(g["task_id"], g["attempt"], g["state"]) for g in body["groups"]] == \
        [(TASK, 2, "PRECOMMITTED"), (TASK, 1, "ABORTED")], body["groups"]
    top = body["groups"][0]
    assert {k: top[k] for k in ("kind", "group", "namespace", "epoch", "txn_id", "published",
                                 "stable", "moved_on", "timeout_s")} == {
        "kind": "group", "group": group.uri, "namespace": NS, "epoch": EPOCH,
        "txn_id": g2.txn_id, "published": False, "stable": False, "moved_on": [],
        "timeout_s": g2.timeout_s}
    assert top["members"] == {
        "folder": {"target": folder.target, "namespace": NS, "attempt": 2,
                   "txn_id": g2.member("folder").txn_id, "state": "PRECOMMITTED",
                   "published": False, "files": 1, "rows": None},
        "table": {"target": TABLE, "location": table.target, "format": "iceberg",
                  "namespace": NS, "attempt": 2, "txn_id": g2.member("table").txn_id,
                  "state": "PRECOMMITTED", "published": False, "files": 1, "rows": 3}}
    assert {m["state"] for m in body["groups"][1]["members"].values()} == {"ABORTED"}
    assert "executor lost" in body["groups"][1]["reason"]

    done = _api(server, "transactions", dag_id=DAG_ID, run_id=DONE_RUN_ID).json()["groups"]
    assert [(g["state"], g["published"], g["stable"]) for g in done] == \
        [("COMMITTED", True, True)], done
    bare = _api(server, "transactions", dag_id=BARE_DAG_ID, run_id=BARE_RUN_ID).json()
    [row] = bare["groups"]
    assert row["task_id"] == "submit" and "not its arguments" in row["error"], row
    # per-DAG access as before: a user who may not read the DAG gets 403, not its groups
    r = _api(server, "transactions", "limited", dag_id=DAG_ID, run_id=RUN_ID)
    assert r.status_code == 403, r.text


def test_group_page_from_the_index_with_its_cut_and_abort(server, seeded, browser):
    """The index lists the group transactions beside single targets', each linking to
    the group's own page: its card (members, decision), its cut status, and an Abort
    group naming the group by its full identity; the run page's card links there too."""
    group, g2 = seeded["group"], seeded["g2"]
    page = _login(browser, server, "admin")
    page.goto(f"{server}/airflow-tpc/")
    href = f"/airflow-tpc/group?dag_id={DAG_ID}&run_id={RUN_ID}&task_id=daily.submit"
    link = page.locator(f'tr[data-kind="group"] a[href="{href}"]')
    assert link.count() == 1 and group.uri in link.inner_text(), link.count()
    assert page.locator('tr[data-kind="single"]').count() >= 1
    link.click()
    page.wait_for_url(lambda u: "/airflow-tpc/group?" in u)
    assert group.uri in page.locator("h1").inner_text()
    card = page.locator("section.group-card")
    assert card.count() == 1
    button = card.get_by_role("button", name="Abort group")
    assert button.count() == 1
    assert json.loads(button.get_attribute("data-identity")) == {
        "task_id": TASK, "group": group.uri, "namespace": NS, "epoch": EPOCH, "attempt": 2,
        "txn_id": g2.txn_id}
    assert "/api/abort-group?" in button.get_attribute("data-url")
    cut = page.locator("section[data-cut] tr[data-cut-attempt]")
    assert cut.evaluate_all("rs => rs.map(r => [r.dataset.cutAttempt, r.dataset.stable])") \
        == [["2", "false"], ["1", "false"]]
    page.goto(f"{server}/airflow-tpc/group?dag_id={DAG_ID}&run_id={DONE_RUN_ID}&task_id={TASK}")
    done = page.locator('section[data-cut] tr[data-cut-attempt="1"]')
    assert done.get_attribute("data-stable") == "true"
    assert "in the consistent cut" in done.inner_text()
    assert page.get_by_role("button", name="Abort group").count() == 0
    page.goto(f"{server}/airflow-tpc/run?dag_id={DAG_ID}&run_id={RUN_ID}")
    href = page.locator("section.group-card a[data-group-page]").get_attribute("href")
    assert href.endswith(f"/group?dag_id={DAG_ID}&run_id={RUN_ID}&task_id=daily.submit"), href
    page.context.close()
    r = httpx.get(f"{server}/airflow-tpc/group", headers=_bearer(server), timeout=120,
                  params={"dag_id": DAG_ID, "run_id": RUN_ID, "task_id": SINGLE_TASK})
    assert r.status_code == 404 and "began no group" in r.text, r.text
    r = httpx.get(f"{server}/airflow-tpc/group", headers=_bearer(server, "limited"),
                  timeout=120, params={"dag_id": DAG_ID, "run_id": RUN_ID, "task_id": TASK})
    assert r.status_code == 403, r.text


def test_undecided_lists_every_open_attempt_a_user_may_read(server, seeded, browser):
    """``/api/undecided`` and its page: the group's pre-committed attempt (one row, not
    one per member) and the single target's, with age and timeout; a user who may not
    read the DAG sees none of its rows, in the API, on the page or on the index."""
    group, g2, single, stxn = seeded["group"], seeded["g2"], seeded["single"], \
        seeded["single_txn"]
    r = _api(server, "undecided")
    assert r.status_code == 200, r.text
    rows = r.json()["undecided"]
    [grow] = [x for x in rows if x["txn_id"] == g2.txn_id and x["kind"] == "group"]
    assert {k: grow[k] for k in ("dag_id", "run_id", "task_id", "group", "state",
                                  "timeout_s")} == {
        "dag_id": DAG_ID, "run_id": RUN_ID, "task_id": TASK, "group": group.uri,
        "state": "PRECOMMITTED", "timeout_s": g2.timeout_s}
    assert 0 < grow["age_s"] < grow["timeout_s"] and grow["expires_in_s"] > 0, grow
    assert {n: m["state"] for n, m in grow["members"].items()} == \
        {"folder": "PRECOMMITTED", "table": "PRECOMMITTED"}
    [srow] = [x for x in rows if x["kind"] == "single" and x["target"] == single.target]
    assert (srow["txn_id"], srow["state"], srow["run_id"], srow["timeout_s"]) == \
        (stxn.txn_id, "PRECOMMITTED", RUN_ID, stxn.timeout_s), srow
    members = {s.target for s in group.sinks.values()} | {TABLE}
    assert not [x for x in rows if x["kind"] == "single" and x["target"] in members]
    assert not [x for x in rows if x["state"] not in ("OPEN", "PRECOMMITTED")]

    # A DAG the limited user may read names the single target too (a target two DAGs
    # write): its attempt, begun by tpc_it_two, stays hidden from that user.
    _xcom("tpc_txn", _doc(stxn), BARE_RUN_ID, "submit", BARE_DAG_ID)
    limited = _api(server, "undecided", "limited").json()
    assert all(x["dag_id"] == LIMITED_DAGS for x in limited["undecided"]), limited
    assert stxn.txn_id not in json.dumps(limited) and DAG_ID not in json.dumps(limited)
    def which(found: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
        return [(x["kind"], x["txn_id"], x.get("group") or x["target"]) for x in found]

    assert which(_api(server, "undecided").json()["undecided"]) == which(rows)  # admin
    assert all(e["dag_id"] == LIMITED_DAGS for e in limited["errors"]), limited

    page = _login(browser, server, "admin")
    page.goto(f"{server}/airflow-tpc/")
    page.locator("a[data-undecided]").click()
    page.wait_for_url(lambda u: u.endswith("/airflow-tpc/undecided"))
    tr = page.locator(f'tr[data-txn="{g2.txn_id}"][data-kind="group"]')
    assert tr.locator('td[data-col="age"]').inner_text().endswith("ago")
    from airflow_tpc.airflow.ui.frame import human_duration

    assert tr.locator('td[data-col="timeout"]').inner_text() == human_duration(g2.timeout_s)
    assert tr.locator('td[data-col="expires"]').inner_text().startswith("in ")
    assert tr.locator('a[href*="/group?"]').get_attribute("href").endswith(
        f"/group?dag_id={DAG_ID}&run_id={RUN_ID}&task_id=daily.submit")
    assert page.locator(f'tr[data-txn="{stxn.txn_id}"][data-kind="single"]').count() == 1
    page.context.close()
    page = _login(browser, server, "limited")
    page.goto(f"{server}/airflow-tpc/undecided")
    page.locator("h1").wait_for()
    assert DAG_ID not in page.locator("body").inner_text()
    assert page.locator(f'tr[data-txn="{g2.txn_id}"]').count() == 0
    page.goto(f"{server}/airflow-tpc/")
    assert DAG_ID not in page.locator("body").inner_text()
    page.context.close()


def test_single_target_route_refuses_a_member(server, seeded):
    """/api/abort naming a member of a group attempt — by its target (a table by URI or
    location), by the group's task, or through a tpc_txn XCom naming it — is 409 naming
    the group, also for a committed group's member: never "aborted", "refused" with 200,
    or another target's abort.  Nothing changes but the audit log: each refusal is a row
    naming what was asked, ``outcome`` refused, and why (issue 33 §3)."""
    group, g2 = seeded["group"], seeded["g2"]
    api = _bearer(server)
    abort = f"{server}/airflow-tpc/api/abort"
    before = _trees(seeded)
    cases = [
        (RUN_ID, {"epoch": EPOCH, "attempt": 2, "target": group.sinks["folder"].target,
                  "namespace": NS}, "member 'folder'"),
        (RUN_ID, {"epoch": EPOCH, "attempt": 2, "target": TABLE, "namespace": NS},
         "member 'table'"),
        (RUN_ID, {"epoch": EPOCH, "attempt": 2, "target": group.sinks["table"].target,
                  "namespace": NS, "txn_id": g2.txn_id}, "member 'table'"),
        (RUN_ID, {"epoch": EPOCH, "attempt": 2, "task_id": TASK}, "members 'folder', 'table'"),
        (DONE_RUN_ID, {"epoch": DONE_EPOCH, "attempt": 1, "task_id": TASK}, "members"),
        (DONE_RUN_ID, {"epoch": DONE_EPOCH, "attempt": 1, "target": TABLE, "namespace": NS},
         "member 'table'"),
        (ROGUE_RUN_ID, {"epoch": EPOCH, "attempt": 2, "task_id": SINGLE_TASK},
         "member 'folder'"),
    ]
    for run_id, body, which in cases:
        r = httpx.post(abort, params={"dag_id": DAG_ID, "run_id": run_id}, json=body,
                       headers=api, timeout=120)
        assert r.status_code == 409, (body, r.status_code, r.text)
        detail = r.json()["detail"]
        assert group.uri in detail and "abort the group" in detail, detail
        assert which in detail and "/api/abort-group" in detail, detail
    # The single target beside the group is still abortable through this route's rules
    # (a bad identity is still 400 there, not a group's 409).
    r = httpx.post(abort, params={"dag_id": DAG_ID, "run_id": RUN_ID}, headers=api,
                   json={"epoch": EPOCH, "attempt": 1}, timeout=120)
    assert r.status_code == 400, r.text
    assert _trees(seeded) == before
    assert _member_state(group.sinks["folder"], EPOCH, 2) is TxnState.PRECOMMITTED
    rows = [a for run in (RUN_ID, DONE_RUN_ID, ROGUE_RUN_ID) for a in _audit(run)]
    assert len(rows) == len(cases), rows
    for (owner, task_id, extra), (_, body, which) in zip(rows, sorted(
            cases, key=lambda c: (RUN_ID, DONE_RUN_ID, ROGUE_RUN_ID).index(c[0])),
            strict=True):
        assert (owner, extra["outcome"], extra["via"]) == ("admin", "refused", "api"), extra
        assert {k: extra[k] for k in body} == body and which in extra["error"], extra
        assert task_id == body.get("task_id"), (task_id, body)


def test_group_abort_needs_the_full_identity_and_a_real_session(server, seeded):
    """/api/abort-group refuses a body that does not name one group attempt (400), one
    whose fields name two different ones (400), names matching nothing (404), a forged
    cross-site request, a wrong session token and a viewer (403) — changing nothing."""
    seen = len(_audit(RUN_ID))  # earlier tests' refusals of this run are audited
    g2 = seeded["g2"]
    q = {"dag_id": DAG_ID, "run_id": RUN_ID}
    url = f"{server}/airflow-tpc/api/abort-group"
    api = _bearer(server)
    before = _trees(seeded)
    for body, why in (({"epoch": EPOCH, "attempt": 2}, "name the group transaction"),
                      ({"epoch": EPOCH, "attempt": 2, "group": g2.group},
                       "name the group transaction"),
                      ({"epoch": EPOCH, "attempt": 2, "task_id": TASK,
                        "group": "/elsewhere/_tpc_groups/x"}, "two different"),
                      ({"epoch": EPOCH, "attempt": 2, "task_id": TASK, "namespace": "other"},
                       "two different"),
                      ({"epoch": EPOCH, "attempt": 2, "task_id": TASK,
                        "txn_id": f"{NS}/{EPOCH}/1"}, "two different")):
        r = httpx.post(url, params=q, json=body, headers=api, timeout=120)
        assert r.status_code == 400 and why in r.json()["detail"], (body, r.text)
    for body in ({"epoch": EPOCH, "attempt": 2, "task_id": SINGLE_TASK},
                 {"epoch": EPOCH, "attempt": 3, "task_id": TASK},
                 {"epoch": DONE_EPOCH, "attempt": 1, "task_id": TASK}):  # not this run's
        r = httpx.post(url, params=q, json=body, headers=api, timeout=120)
        assert r.status_code == 404, (body, r.text)
    r = httpx.post(url, params=q, headers=api, timeout=120,
                   json={"epoch": EPOCH, "attempt": 2, "task_id": TASK, "target": "x"})
    assert r.status_code == 422, r.text  # a single target's field: not a group's identity

    body = {"epoch": EPOCH, "attempt": 2, "task_id": TASK}
    cookie, token = _cookie_session(server, "admin")
    evil = {"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"}
    r = httpx.post(url, params=q, data={k: str(v) for k, v in body.items()},
                   headers={**cookie, **evil}, timeout=120)
    assert r.status_code == 403, r.text
    r = httpx.post(url, params=q, json=body, headers={**cookie, **evil, "X-Airflow-TPC": token},
                   timeout=120)
    assert r.status_code == 403, r.text
    r = httpx.post(url, params=q, json=body, timeout=120,
                   headers={**cookie, "Origin": server, "X-Airflow-TPC": "1"})
    assert r.status_code == 403 and "token" in r.json()["detail"], r.text
    viewer, viewer_token = _cookie_session(server, "viewer")
    r = httpx.post(url, params=q, json=body, timeout=120,
                   headers={**viewer, "Origin": server, "X-Airflow-TPC": viewer_token})
    assert r.status_code == 403 and "token" not in r.text, r.text
    assert _trees(seeded) == before
    assert seeded["group"].poll(g2).outcome is None
    assert _audit(RUN_ID)[seen:] == []


def test_abort_through_the_page_aborts_the_whole_group(server, seeded, browser):
    """The card's Abort group, confirmed in the dialog: the group's ledger decides abort,
    both members' ledgers say ABORTED with their staging gone; the single target beside
    it, the committed group's epoch and attempt 1 are untouched; one audit row names the
    group.  Aborting again says "already aborted"."""
    seen = len(_audit(RUN_ID))  # earlier tests' refusals of this run are audited
    from tests.core.helpers import full_tree

    group, g2, single = seeded["group"], seeded["g2"], seeded["single"]
    single_before = full_tree(single)
    stable = group.stable_epochs()
    assert stable == {DONE_EPOCH: 1}
    page = _login(browser, server, "admin")
    page.goto(f"{server}/airflow-tpc/run?dag_id={DAG_ID}&run_id={RUN_ID}")
    top = page.locator(f'tr.group-row[data-group-txn="{g2.txn_id}"]')
    top.get_by_role("button", name="Abort group").click()
    dialog = page.locator("#tpc-abort-dialog")
    assert dialog.is_visible()
    assert g2.txn_id in dialog.inner_text() and f"group {group.uri}" in dialog.inner_text()
    dialog.get_by_role("button", name="Abort transaction").click()
    page.locator(f'tr.group-row[data-group-txn="{g2.txn_id}"][data-state="ABORTED"]').wait_for()
    members = page.locator(f'tbody[data-group-txn="{g2.txn_id}"] tr.member-row')
    assert members.evaluate_all("rs => rs.map(r => r.dataset.state)") == ["ABORTED"] * 2

    status = group.poll(g2)
    assert status.outcome == "abort", status
    assert status.reason == "aborted from the airflow-tpc UI by admin"
    for name, sink in group.sinks.items():
        [info] = [i for i in sink.describe(EPOCH) if i.attempt == 2]
        assert info.state is TxnState.ABORTED and info.staging_files == 0, (name, info)
        assert "aborted from the airflow-tpc UI by admin" in info.reason
    assert full_tree(single) == single_before
    assert single.describe(EPOCH)[0].state is TxnState.PRECOMMITTED
    assert group.stable_epochs() == stable
    assert [_member_state(s, DONE_EPOCH, 1) for s in group.sinks.values()] == \
        [TxnState.COMMITTED] * 2
    page.context.close()

    [(owner, task_id, extra)] = _audit(RUN_ID)[seen:]
    assert (owner, task_id) == ("admin", TASK)
    assert (extra["group"], extra["txn_id"], extra["outcome"], extra["via"]) == \
        (group.uri, g2.txn_id, "aborted", "ui"), extra
    assert extra["members"] == {"folder": group.sinks["folder"].target, "table": TABLE}

    r = httpx.post(f"{server}/airflow-tpc/api/abort-group", headers=_bearer(server),
                   params={"dag_id": DAG_ID, "run_id": RUN_ID}, timeout=120,
                   json={"epoch": EPOCH, "attempt": 2, "group": g2.group, "namespace": NS})
    assert r.status_code == 200, r.text
    assert (r.json()["outcome"], r.json()["task_id"]) == ("already aborted", TASK), r.text
    assert {n: m["state"] for n, m in r.json()["members"].items()} == \
        {"folder": "ABORTED", "table": "ABORTED"}


def test_committed_group_is_refused(server, seeded):
    """Aborting a committed group: 409 saying it is COMMITTED; the group's decision, both
    members and every file stay as they were (the refusal is in the audit log)."""
    seen = len(_audit(DONE_RUN_ID))
    group, done = seeded["group"], seeded["done"]
    before = _trees(seeded)
    r = httpx.post(f"{server}/airflow-tpc/api/abort-group", headers=_bearer(server),
                   params={"dag_id": DAG_ID, "run_id": DONE_RUN_ID}, timeout=120,
                   json={"epoch": DONE_EPOCH, "attempt": 1, "task_id": TASK,
                         "txn_id": done.txn_id})
    assert r.status_code == 409 and "COMMITTED" in r.json()["detail"], r.text
    assert _trees(seeded) == before
    status = group.poll(done)
    assert (status.outcome, status.published) == ("commit", True)
    assert group.stable_epochs() == {DONE_EPOCH: 1}
    [(owner, _, extra)] = _audit(DONE_RUN_ID)[seen:]
    assert (owner, extra["outcome"], extra["txn_id"]) == ("admin", "refused", done.txn_id)


def test_xcom_carries_the_groups_public_arguments(seeded):
    """What the submit task pushes beside the transaction: the group's arguments by name
    (connections by id, no secret), enough to open the group again."""
    doc = seeded["doc"]
    assert doc["group"] == seeded["group"].uri and doc["attempt"] == 2
    assert Path(doc["group_uri"]) == Path(seeded["group_dir"])
    assert (doc["catalog_conn_id"], doc["storage_conn_id"], doc["storage_options"]) == \
        (CAT_CONN, None, {})
    assert set(doc["member_args"]) == {"folder", "table"}
    assert doc["member_args"]["table"]["target"] == TABLE
    assert doc["member_args"]["table"]["catalog_conn_id"] == CAT_CONN
    assert doc["member_args"]["folder"]["catalog_conn_id"] is None


def test_group_without_its_arguments_says_so(server, seeded):
    """A group XCom without the group's arguments (a submit task of one's own): the run
    page shows the group's card saying it cannot be opened (not a failed page), and an
    abort of it is 409 with the reason; the group is untouched."""
    g2 = seeded["g2"]
    api = _bearer(server)
    q = {"dag_id": BARE_DAG_ID, "run_id": BARE_RUN_ID}
    page = httpx.get(f"{server}/airflow-tpc/run", params=q, headers=api, timeout=120)
    assert page.status_code == 200, page.text
    [card] = re.findall(r'<section class="card group-card"[^>]*>.*?</section>', page.text)
    assert "data-error" in card and "could not be opened" in card, card
    assert "not its arguments" in card and g2.group in card, card
    before = _trees(seeded)
    r = httpx.post(f"{server}/airflow-tpc/api/abort-group", params=q, headers=api,
                   timeout=120, json={"epoch": EPOCH, "attempt": 2, "task_id": "submit"})
    assert r.status_code == 409 and "not its arguments" in r.json()["detail"], r.text
    assert _trees(seeded) == before
    [(owner, task_id, extra)] = _audit(BARE_RUN_ID)  # the refusal, audited
    assert (owner, task_id, extra["outcome"]) == ("admin", "submit", "refused"), extra
    assert "not its arguments" in extra["error"], extra
