"""An S3 target (moto's real HTTP server) through the "tpc" data source, and one run on a
real Spark standalone cluster (client mode) started from pyspark's own launch scripts."""

from __future__ import annotations

import json
import os

import pytest

from airflow_tpc import Sink, TxnState

from .helpers import assert_secret_kept_out, asset_events, day, read_rows, states

pytestmark = pytest.mark.timeout(1800)

SECRET = "tpc-S3cret-never-logged-42"


def test_s3_target_via_tpc_format(dagbag, moto_endpoint, capfd):
    import boto3

    boto3.client("s3", endpoint_url=moto_endpoint, aws_access_key_id="tpc-key",
                 aws_secret_access_key=SECRET, region_name="us-east-1").create_bucket(
        Bucket="tpc-it")
    os.environ["AIRFLOW_CONN_TPC_S3"] = json.dumps({
        "conn_type": "generic", "login": "tpc-key", "password": SECRET,
        "extra": {"endpoint_url": moto_endpoint, "region_name": "us-east-1"}})
    dag = dagbag.get_dag("tpc_it_s3")
    dr = dag.test(logical_date=day("2026-04-01"), run_conf={"rows": 1500})
    assert dr.state == "success", states(dr)

    sink = Sink("s3://tpc-it/tables/daily", "tpc_it_s3",
                storage_options={"endpoint_url": moto_endpoint, "key": "tpc-key",
                                 "secret": SECRET, "region_name": "us-east-1"})
    [info] = sink.describe("2026-04-01")
    assert info.state is TxnState.COMMITTED and info.published and info.staging_files == 0
    files = sink.committed_files()["2026-04-01"]
    assert files and all(f.startswith("s3://tpc-it/tables/daily/epoch=2026-04-01/") for f in files)

    import pyarrow.parquet as pq
    import s3fs

    fs = s3fs.S3FileSystem(key="tpc-key", secret=SECRET,
                           client_kwargs={"endpoint_url": moto_endpoint,
                                          "region_name": "us-east-1"})
    total = sum(sum(pq.read_table(f.removeprefix("s3://"), filesystem=fs)
                    .column("events").to_pylist()) for f in files)
    assert total == 1500
    assert asset_events("s3://tpc-it/tables/daily")[-1]["txn_id"] == "tpc_it_s3/2026-04-01/1"

    # The secret never reaches logs, XComs, trigger rows or rendered fields.
    assert_secret_kept_out(SECRET, capfd.readouterr())


def test_standalone_cluster_client_mode(dagbag, spark_cluster, data_root):
    master, logs, _ui = spark_cluster
    dag = dagbag.get_dag("tpc_it_cluster")
    dr = dag.test(logical_date=day("2026-05-01"), run_conf={"rows": 1200})
    assert dr.state == "success", states(dr)
    target = os.path.join(data_root, "cluster_target")
    assert read_rows(target) == {"2026-05-01": 1200}
    # The application really ran on the cluster (the master saw it register).
    master_log = (logs / "master.log").read_text()
    assert "Registered app tpc-aggregate-events" in master_log
    assert "Launching executor" in master_log
