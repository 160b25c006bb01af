"""Iceberg targets with the warehouse on S3: moto's server over HTTP, pyiceberg's
FileIO and airflow-tpc's S3 store pointed at the same endpoint."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from airflow_tpc.core.faults import InjectedCrash, armed
from airflow_tpc.tables import IcebergSink
from airflow_tpc.tables.iceberg import PROP_ATTEMPT

from .conftest import TABLE, rows


@pytest.fixture()
def s3_sink(tmp_path, s3_options, s3_bucket):
    props = {"type": "sql", "uri": f"sqlite:///{tmp_path}/catalog.db",
             "warehouse": f"s3://{s3_bucket}/warehouse",
             "s3.endpoint": s3_options["endpoint_url"], "s3.access-key-id": s3_options["key"],
             "s3.secret-access-key": s3_options["secret"], "s3.region": "us-east-1"}

    def make() -> IcebergSink:
        return IcebergSink(f"iceberg://local/{TABLE}", "events", catalog_properties=props,
                           storage_options=s3_options)
    return make


def _stage(sink: IcebergSink, epoch: str, ids: list[int]):
    """What the job does on S3: write Parquet into staging through pyarrow's S3 client."""
    txn = sink.begin(epoch)
    io = sink.table_target.file_io()
    with io.new_output(f"{txn.staging_uri}/part-0.parquet").create(overwrite=True) as out:
        pq.write_table(rows(epoch, ids), out)
    return txn, sink.precommit(txn)


def _ids(table) -> list[int]:
    return sorted(table.scan().to_arrow()["id"].to_pylist())


def test_s3_commit_rerun_and_crash_after_the_table_commit(s3_sink):
    sink = s3_sink()
    assert sink.target.startswith("s3://")
    txn, _ = _stage(sink, "5", [1, 2])
    sink.commit(txn)
    txn, _ = _stage(sink, "6", [6])
    sink.commit(txn)
    txn, manifest = _stage(sink, "5", [7])
    with armed("iceberg.after_table_commit"), pytest.raises(InjectedCrash):
        sink.commit(txn, expected_digest=manifest.digest)
    s3_sink().recover()
    assert s3_sink().commit(txn, expected_digest=manifest.digest).outcome == "already_committed"
    table = sink.table_target.load_table()
    assert _ids(table) == [6, 7]
    assert [s.summary[PROP_ATTEMPT] for s in table.snapshots()] == ["1", "1", "2"]
    first = table.snapshots()[0]
    assert sorted(table.scan(snapshot_id=first.snapshot_id).to_arrow()["id"].to_pylist()) \
        == [1, 2]  # attempt 1's staged file is kept: an older snapshot references it
    sink.gc()
    assert sorted(table.scan(snapshot_id=first.snapshot_id).to_arrow()["id"].to_pylist()) \
        == [1, 2]
