"""A table target through the Airflow layer: real Airflow (dag.test), real spark-submit, a
real pyiceberg SQL catalog on SQLite named by an ``iceberg_catalog`` connection.

One commit is one Iceberg snapshot whose id the Asset event carries; rerunning the
commit makes no second snapshot and no second event; a failed job's attempt is aborted
and publishes nothing; a sealed attempt the table cannot take fails the sensor; the
catalog connection's secret reaches no XCom or rendered field.
"""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from .conftest import ROOT
from .helpers import asset_events, day, rerun_tasks, states, xcom_value

pytestmark = pytest.mark.timeout(1800)

DAG_ID = "tpc_it_tables"
TABLE = "iceberg://itcat/analytics.daily_events"
NS = "tpc_it_tables"
CANARY = "tpc-catalog-canary-s3cr3t"
CATALOG_DIR = os.path.join(ROOT, "iceberg")
os.makedirs(os.path.join(CATALOG_DIR, "warehouse"), exist_ok=True)
PROPS = {"type": "sql", "uri": f"sqlite:///{CATALOG_DIR}/catalog.db",
         "warehouse": f"file://{CATALOG_DIR}/warehouse"}
# The catalog's connection: host = uri, schema = warehouse, extra = the rest of the
# properties; the canary stands for a secret property (a local warehouse ignores it).
os.environ["AIRFLOW_CONN_TPC_IT_CATALOG"] = json.dumps({
    "conn_type": "iceberg_catalog", "host": PROPS["uri"], "schema": PROPS["warehouse"],
    "extra": {"type": "sql", "s3.secret-access-key": CANARY}})


def _table():
    from pyiceberg.catalog import load_catalog

    return load_catalog("itcat", **PROPS).load_table("analytics.daily_events")


def _sink():
    from airflow_tpc.tables import open_sink

    return open_sink(TABLE, NS, catalog_properties=PROPS)


def _epoch_snapshots(epoch: str) -> list:
    return [s for s in _table().snapshots()
            if (s.summary or {}).get("airflow-tpc.epoch") == epoch]


@pytest.fixture(scope="module")
def dag(dagbag):
    return dagbag.get_dag(DAG_ID)


@pytest.fixture(scope="module")
def committed(dag):
    events_before = len(asset_events(TABLE))
    dr = dag.test(logical_date=day("2026-04-01"), run_conf={"rows": 2000})
    return dr, events_before


def test_commit_is_one_snapshot_and_the_asset_event_names_it(committed, dag):
    dr, events_before = committed
    assert dr.state == "success", states(dr)
    snaps = _epoch_snapshots("2026-04-01")
    assert len(snaps) == 1
    events = asset_events(TABLE)[events_before:]
    assert len(events) == 1
    extra = events[0]
    assert extra["table"] == TABLE and extra["format"] == "iceberg"
    assert extra["snapshot_id"] == str(snaps[0].snapshot_id)
    assert extra["epoch"] == "2026-04-01" and extra["attempt"] == 1
    # What was committed is what a reader of the table sees: the job's aggregates of
    # 2000 events, each row with its epoch.
    rows = _table().scan(row_filter="epoch == '2026-04-01'").to_arrow()
    assert sum(rows["events"].to_pylist()) == 2000
    assert set(rows["epoch"].to_pylist()) == {"2026-04-01"}
    summary = xcom_value(DAG_ID, dr.run_id, "events.commit", "tpc_commit")
    assert summary["snapshot_id"] == extra["snapshot_id"]
    # The commit XCom names the table by its URI; its location (where the sink is
    # rooted, what lineage's LOCATION symlink names) is beside it, not in its place.
    sink = _sink()
    assert (summary["target"], summary["location"]) == (TABLE, sink.target)
    assert sink.target.startswith("file://")
    # The admin DAG's status (its XCom) likewise, each commit with its snapshot id.
    from airflow_tpc.airflow.utils import admin

    status = admin.status(sink, "2026-04-01")
    assert (status["target"], status["location"]) == (TABLE, sink.target)
    [row] = status["transactions"]
    assert (row["snapshot_id"], row["in_table"]) == (extra["snapshot_id"], True)
    # The Asset URI is the table URI, as Airflow's normalisation keeps it.
    from airflow.sdk import Asset

    assert Asset(TABLE).uri == TABLE


def test_rerun_of_the_commit_makes_no_second_snapshot(committed, dag):
    dr, _ = committed
    assert dr.state == "success", states(dr)
    events = len(asset_events(TABLE))
    again = rerun_tasks(dag, dr.run_id, ["commit", "committed"])
    assert again.state == "success", states(again)
    assert len(_epoch_snapshots("2026-04-01")) == 1
    assert len(asset_events(TABLE)) == events


def test_failed_job_is_aborted_and_publishes_nothing(committed, dag):
    dr0, _ = committed
    assert dr0.state == "success", states(dr0)
    before = [s.snapshot_id for s in _table().snapshots()]
    events = len(asset_events(TABLE))
    dr = dag.test(logical_date=day("2026-04-02"), run_conf={"fail_on_try": 1})
    st = states(dr)
    assert dr.state == "failed" and st["submit"] == "failed", st
    assert st["abort"] == "success" and st["commit"] != "success", st
    assert [s.snapshot_id for s in _table().snapshots()] == before
    assert len(asset_events(TABLE)) == events
    sink = _sink()
    infos = sink.describe("2026-04-02")
    assert [str(i.state) for i in infos] == ["ABORTED"]
    assert all(i.staging_files == 0 for i in infos)
    assert sink.committed_files(["2026-04-02"]) == {}


def test_catalog_secret_reaches_no_xcom_or_rendered_field(committed, dag):
    from airflow import settings
    from airflow.models.renderedtifields import RenderedTaskInstanceFields
    from airflow.models.xcom import XComModel
    from sqlalchemy import select

    dr, _ = committed
    with settings.Session() as session:
        xcoms = session.scalars(select(XComModel.value).where(
            XComModel.dag_id == DAG_ID)).all()
        rendered = session.scalars(select(RenderedTaskInstanceFields.rendered_fields).where(
            RenderedTaskInstanceFields.dag_id == DAG_ID)).all()
    assert xcoms and rendered
    assert CANARY not in json.dumps([str(x) for x in xcoms])
    assert CANARY not in json.dumps([str(r) for r in rendered])
    txn_doc = xcom_value(DAG_ID, dr.run_id, "events.submit", "tpc_txn")
    assert txn_doc["table"] == TABLE and txn_doc["catalog_conn_id"] == "tpc_it_catalog"


def test_sensor_runs_the_table_check_on_a_sealed_attempt(airflow_db):
    """The job seals with the core alone (no pyiceberg on the job side); the sensor's
    check runs the table's schema check and fails an attempt the table cannot take."""
    from airflow_tpc import Sink, SinkConfig
    from airflow_tpc.airflow.hooks.tpc import SinkArgs

    hook = SinkArgs("iceberg://itcat/analytics.checked", "tpc_it_tables_bad",
                    catalog_conn_id="tpc_it_catalog").hook()
    sink = hook.get_sink()
    txn = sink.begin("2026-04-09")
    # the job side: a plain core sink on the table location, staging as the payload says
    staging_root = txn.staging_uri.rsplit("/epoch=", 1)[0]
    job_sink = Sink(txn.target, txn.namespace,
                    config=SinkConfig(promotion="manifest", staging_root=staging_root))
    path = txn.staging_uri.removeprefix("file://") + "/part-0.parquet"
    os.makedirs(os.path.dirname(path), exist_ok=True)
    pq.write_table(pa.table({"id": [1, 2]}), path)  # no epoch column
    job_sink.precommit(job_sink.transaction(txn.epoch, txn.attempt))
    check = hook.check_precommit(txn.to_dict())
    assert check.status == "failed", check
    assert "epoch" in check.message and "part-0.parquet" in check.message
    # a good file in a new attempt: ready
    txn2 = sink.begin("2026-04-09")
    path2 = txn2.staging_uri.removeprefix("file://") + "/part-0.parquet"
    os.makedirs(os.path.dirname(path2), exist_ok=True)
    pq.write_table(pa.table({"id": [1, 2], "epoch": ["2026-04-09"] * 2}), path2)
    job_sink.precommit(job_sink.transaction(txn2.epoch, txn2.attempt))
    assert hook.check_precommit(txn2.to_dict()).status == "ready"
