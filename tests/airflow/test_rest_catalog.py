"""A REST catalog and an existing ``days(ts)``-partitioned table through real Airflow.

SeaweedFS (tests/seaweed.py) serves the REST catalog and a table bucket that takes only
the table's own files; the DAG (``tpc_it_rest``) names them by connection, keeps its
ledger at ``ledger_uri`` and owns one day of the table per run with a templated
``replace_where``.  Two runs of one day and one of the next: each run replaces exactly
its day's rows, the owner's other rows survive, the table bucket holds nothing of
airflow-tpc's but data files, and the Asset event names the snapshot.
"""

from __future__ import annotations

import datetime as dt
import json
import os

import pyarrow as pa
import pytest
from pyiceberg.catalog import load_catalog
from pyiceberg.transforms import DayTransform

from tests import seaweed as sw

from .helpers import asset_events, day, states, xcom_value

pytestmark = pytest.mark.timeout(1800)

TARGET = "iceberg://sw/analytics.events"


def _rows(d: int, ids: list[int]) -> pa.Table:
    base = dt.datetime(2026, 11, d, 12)
    return pa.table({"id": pa.array(ids, pa.int64()),
                     "value": pa.array([f"v{i}" for i in ids], pa.string()),
                     "ts": pa.array([base] * len(ids), pa.timestamp("us"))})


def _ids(table) -> list[int]:
    return sorted(table.scan().to_arrow()["id"].to_pylist())


def _existing_table(seaweed, ledger_root: str | None = None):
    """A ``days(ts)`` table that already holds two days, in a fresh table bucket, and
    the connections a platform team would define (the secrets never reach the DAG)."""
    warehouse = seaweed.new_warehouse()
    props = seaweed.catalog_properties(warehouse)
    catalog = load_catalog("owner", **props)
    catalog.create_namespace_if_not_exists("analytics")
    table = catalog.create_table("analytics.events", schema=_rows(1, [0]).schema)
    with table.update_spec() as spec:
        spec.add_field("ts", DayTransform(), "ts_day")
    table = catalog.load_table("analytics.events")
    table.append(_rows(19, [1, 2]))
    table.append(_rows(20, [3, 4]))
    extra = {k: v for k, v in props.items() if k not in ("uri", "warehouse", "credential")}
    if ledger_root:
        extra["tpc.ledger-root"] = ledger_root
    os.environ["AIRFLOW_CONN_TPC_IT_REST_CATALOG"] = json.dumps({
        "conn_type": "iceberg_catalog", "host": seaweed.catalog_uri, "schema": warehouse,
        "login": sw.KEY, "password": sw.SECRET, "extra": extra})
    os.environ["AIRFLOW_CONN_TPC_IT_REST_S3"] = json.dumps({
        "conn_type": "generic", "login": sw.KEY, "password": sw.SECRET,
        "extra": {"endpoint_url": seaweed.s3_endpoint, "region_name": "us-east-1"}})
    return warehouse, catalog


def _table_bucket_keys(seaweed, warehouse: str, table) -> list[str]:
    """Every key of the table bucket, checked to be the table's data or metadata."""
    bucket = warehouse[len("s3://"):].strip("/")
    keys = [o["Key"] for page in seaweed.client().get_paginator("list_objects_v2")
            .paginate(Bucket=bucket) for o in page.get("Contents", [])]
    location = table.location()[len(f"s3://{bucket}/"):].rstrip("/")
    assert keys and all(k.startswith(f"{location}/data/") and k.endswith(".parquet")
                        or k.startswith(f"{location}/metadata/") for k in keys), keys
    return keys


def _ledger_keys(seaweed, ledger: str) -> list[str]:
    return [o["Key"] for o in seaweed.client().list_objects_v2(
        Bucket=sw.LAKE, Prefix=ledger[len(f"s3://{sw.LAKE}/"):] + "/").get("Contents", [])]


def test_each_run_replaces_its_day_of_an_existing_table_behind_a_rest_catalog(dagbag,
                                                                              seaweed):
    warehouse, catalog = _existing_table(seaweed)
    ledger = seaweed.new_prefix()
    dag = dagbag.get_dag("tpc_it_rest")

    dr = dag.test(logical_date=day("2026-11-20"), run_conf={"ledger": ledger, "ids": [7, 8]})
    assert states(dr)["committed"] == "success", states(dr)
    assert _ids(catalog.load_table("analytics.events")) == [1, 2, 7, 8]
    dr = dag.test(logical_date=day("2026-11-20"), run_conf={"ledger": ledger, "ids": [9]},
                  run_after=day("2026-11-20") + dt.timedelta(hours=1))
    assert states(dr)["committed"] == "success", states(dr)
    dr = dag.test(logical_date=day("2026-11-21"), run_conf={"ledger": ledger, "ids": [10]})
    assert states(dr)["committed"] == "success", states(dr)
    table = catalog.load_table("analytics.events")
    assert _ids(table) == [1, 2, 9, 10]

    event = asset_events(TARGET)[-1]
    assert event["epoch"] == "2026-11-21"
    assert event["snapshot_id"] == str(table.current_snapshot().snapshot_id)
    # Nothing of airflow-tpc's but data files in the table bucket; its ledger is apart.
    _table_bucket_keys(seaweed, warehouse, table)
    assert any(k.endswith("epoch=2026-11-21/_tpc_published.json")
               for k in _ledger_keys(seaweed, ledger))


def test_the_catalog_connection_names_where_ledgers_live(dagbag, seaweed):
    """No ``ledger_uri`` in the DAG: the ``iceberg_catalog`` connection's
    ``tpc.ledger-root`` gives every table of the catalog its ledger apart, at
    ``<root>/<namespace>.<table>``; the submit task's XCom names it, so the sensor,
    commit and abort tasks find the same ledger."""
    root = seaweed.new_prefix()
    warehouse, catalog = _existing_table(seaweed, ledger_root=root)
    dag = dagbag.get_dag("tpc_it_rest")
    dr = dag.test(logical_date=day("2026-11-22"), run_conf={"ids": [5, 6]})
    assert states(dr)["committed"] == "success", states(dr)
    table = catalog.load_table("analytics.events")
    assert _ids(table) == [1, 2, 3, 4, 5, 6]
    ledger = f"{root}/analytics.events"
    assert xcom_value("tpc_it_rest", dr.run_id, "submit", "tpc_txn")["ledger_uri"] == ledger
    _table_bucket_keys(seaweed, warehouse, table)
    keys = _ledger_keys(seaweed, ledger)
    assert any(k.endswith("epoch=2026-11-22/_tpc_published.json") for k in keys), keys
    assert any(k.endswith("_tpc/sink.json") for k in keys), keys
