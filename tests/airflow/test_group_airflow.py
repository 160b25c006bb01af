"""One epoch, two outputs, one group transaction, through Airflow: real Airflow (dag.test
on the session's SQLite DB), real spark-submit, a folder and an Iceberg table on a real
pyiceberg SQL catalog (an ``iceberg_catalog`` connection).

One job writes both members; its first try dies after writing one member, and that
attempt is aborted on both; the retry's attempt is committed by one decision that
switches both; an Asset event per member follows only then; a rerun of the commit emits
nothing twice.
"""

from __future__ import annotations

import json
import os

import pytest

from airflow_tpc import Group, Sink, TxnState

from .conftest import ROOT
from .helpers import asset_events, day, read_rows, rerun_tasks, states, xcom_value

pytestmark = pytest.mark.timeout(1800)

DAG_ID = "tpc_it_group"
NS = "tpc_it_group"
TABLE = "iceberg://itgcat/analytics.group_events"
FOLDER = os.path.join(ROOT, "group_folder")
GROUP_URI = os.path.join(ROOT, "_tpc_groups", NS)
CATALOG_DIR = os.path.join(ROOT, "iceberg_group")
os.makedirs(os.path.join(CATALOG_DIR, "warehouse"), exist_ok=True)
PROPS = {"type": "sql", "uri": f"sqlite:///{CATALOG_DIR}/catalog.db",
         "warehouse": f"file://{CATALOG_DIR}/warehouse"}
os.environ["AIRFLOW_CONN_TPC_IT_GROUP_CATALOG"] = json.dumps({
    "conn_type": "iceberg_catalog", "host": PROPS["uri"], "schema": PROPS["warehouse"],
    "extra": {"type": "sql"}})


def _group() -> Group:
    from airflow_tpc.tables import open_sink

    return Group({"folder": Sink(FOLDER, NS),
                  "table": open_sink(TABLE, NS, catalog_properties=PROPS)}, GROUP_URI)


def _table_events(epoch: str) -> int:
    from pyiceberg.catalog import load_catalog

    table = load_catalog("itgcat", **PROPS).load_table("analytics.group_events")
    return sum(table.scan(row_filter=f"epoch == '{epoch}'").to_arrow()["events"].to_pylist())


@pytest.fixture(scope="module")
def dag(dagbag):
    return dagbag.get_dag(DAG_ID)


@pytest.fixture(scope="module")
def committed(dag):
    """One run whose job dies on its first try after writing one member: the retry is
    a new group attempt (spark-submit twice in all, ~40 s each on this machine)."""
    before = {uri: len(asset_events(uri)) for uri in (f"file://{FOLDER}", TABLE)}
    dr = dag.test(logical_date=day("2026-05-01"), run_conf={"rows": 2000, "fail_on_try": 1})
    return dr, before


def test_one_job_two_outputs_one_decision_after_a_failed_first_try(committed, dag):
    dr, before = committed
    st = states(dr)
    assert dr.state == "success", st
    assert st["submit"] == st["wait_precommit"] == st["commit"] == "success", st
    assert st["abort"] == "skipped", st
    # The first try's attempt is aborted on both members (its submit aborted the group
    # when the job died); the retry's attempt is the one both publish.
    group = _group()
    assert group.stable_epochs() == {"2026-05-01": 2}
    for name, sink in group.sinks.items():
        info = {i.attempt: i.state for i in sink.describe("2026-05-01")}
        assert info == {1: TxnState.ABORTED, 2: TxnState.COMMITTED}, name
    # Both outputs hold the epoch once, read by their own readers.
    assert read_rows(FOLDER) == {"2026-05-01": 2000}
    assert _table_events("2026-05-01") == 2000
    # One Asset event per member, naming the group, the member and the attempt.
    for uri, name in ((f"file://{FOLDER}", "folder"), (TABLE, "table")):
        events = asset_events(uri)[before[uri]:]
        assert len(events) == 1, uri
        assert events[0]["member"] == name and events[0]["attempt"] == 2
        assert events[0]["group"] == f"file://{GROUP_URI}"
    summary = xcom_value(DAG_ID, dr.run_id, "events.commit", "tpc_group_commit")
    assert summary["outcome"] == "committed" and summary["published"] is True
    assert set(summary["members"]) == {"folder", "table"}


def test_rerun_of_the_commit_emits_nothing_twice(committed, dag):
    dr, _ = committed
    counts = {uri: len(asset_events(uri)) for uri in (f"file://{FOLDER}", TABLE)}
    again = rerun_tasks(dag, dr.run_id, ["commit", "committed"])
    assert again.state == "success", states(again)
    assert {uri: len(asset_events(uri)) for uri in counts} == counts
    assert read_rows(FOLDER)["2026-05-01"] == 2000 and _table_events("2026-05-01") == 2000
