"""Delta targets on S3: moto's server over HTTP; delta-rs's object store, pyarrow's S3
filesystem and airflow-tpc's S3 store pointed at the same endpoint through one set of
storage_options (translated for delta-rs, never logged)."""

from __future__ import annotations

import logging

import pyarrow.parquet as pq
import pytest

from airflow_tpc.core.faults import InjectedCrash, armed
from airflow_tpc.tables import DeltaSink, open_sink
from airflow_tpc.tables.base import PROP_ATTEMPT, PROP_TXN_ID

from .conftest import rows


@pytest.fixture()
def s3_sink(s3_options, s3_bucket):
    def make() -> DeltaSink:
        sink = open_sink(f"delta+s3://{s3_bucket}/tables/events", "events",
                         storage_options=s3_options)
        assert isinstance(sink, DeltaSink)
        return sink
    return make


def _stage(sink: DeltaSink, epoch: str, ids: list[int]):
    """What the job does on S3: write Parquet into staging through pyarrow's S3 client."""
    txn = sink.begin(epoch)
    fs, _ = sink.table_target.arrow_filesystem()
    staging = sink.layout.staging(epoch, txn.attempt)  # bucket/key, as pyarrow names it
    with fs.open_output_stream(f"{staging}/part-0.parquet") as out:
        pq.write_table(rows(epoch, ids), out)
    return txn, sink.precommit(txn)


def _ids(sink: DeltaSink, version: int | None = None) -> list[int]:
    return sorted(sink.table_target.pyarrow_dataset(version).to_table()["id"].to_pylist())


def test_s3_commit_rerun_crash_after_the_table_commit_and_gc(s3_sink, s3_options, caplog):
    caplog.set_level(logging.DEBUG, logger="airflow_tpc")
    sink = s3_sink()
    assert sink.target.startswith("s3://")
    txn, _ = _stage(sink, "5", [1, 2])
    sink.commit(txn)
    txn, _ = _stage(sink, "6", [6])
    sink.commit(txn)
    txn, manifest = _stage(sink, "5", [7])
    with armed("delta.after_table_commit"), pytest.raises(InjectedCrash):
        sink.commit(txn, expected_digest=manifest.digest)
    assert _ids(sink) == [6, 7]  # in the table; the ledger does not know yet
    s3_sink().recover()
    assert s3_sink().commit(txn, expected_digest=manifest.digest).outcome == "already_committed"
    table = sink.table_target.load_table()
    assert table.version() == 2
    assert [h[PROP_ATTEMPT] for h in reversed(sink.table_target.commit_infos())
            if h.get(PROP_TXN_ID)] \
        == ["1", "1", "2"]
    assert sink.table_version("5", manifest.digest)["version"] == "2"
    assert _ids(sink, version=0) == [1, 2]
    sink.gc()
    assert _ids(sink, version=0) == [1, 2]  # attempt 1's file kept: version 0 references it
    assert sink.committed_files(["5"]) == {"5": [
        f"s3://{sink.layout.staging('5', 2)}/part-0.parquet"]}
    assert s3_options["secret"] not in caplog.text


def test_s3_replace_where_over_a_data_column_rewrites_a_mixed_file(s3_options, s3_bucket):
    """The rewrite of a file holding rows inside and outside the predicate reads and
    writes through pyarrow's S3 client, beside the old file, in the one commit."""
    import datetime as dt

    import pyarrow as pa

    def batch(pairs: list[tuple[int, int]]) -> pa.Table:
        return pa.table({"id": pa.array([i for i, _ in pairs], pa.int64()),
                         "ts": pa.array([dt.datetime(2026, 11, d, 12) for _, d in pairs],
                                        pa.timestamp("us"))})

    def sink_of(**kwargs) -> DeltaSink:
        return open_sink(f"delta+s3://{s3_bucket}/tables/ts_events", "ts",
                         storage_options=s3_options, **kwargs)

    def stage_and_commit(sink: DeltaSink, epoch: str, data: pa.Table) -> None:
        txn = sink.begin(epoch)
        fs, _ = sink.table_target.arrow_filesystem()
        with fs.open_output_stream(f"{sink.layout.staging(epoch, txn.attempt)}/a.parquet") as out:
            pq.write_table(data, out)
        assert sink.commit(txn, expected_digest=sink.precommit(txn).digest).outcome \
            == "committed"

    stage_and_commit(sink_of(mode="append"), "load", batch([(1, 20), (2, 21), (3, 19)]))
    where = "ts >= '2026-11-20T00:00:00' AND ts < '2026-11-21T00:00:00'"
    stage_and_commit(sink_of(replace_where=where), "2026-11-20", batch([(10, 20)]))
    sink = sink_of()
    assert _ids(sink) == [2, 3, 10]
    paths = [f for f in sink.table_target.pyarrow_dataset().files]
    assert sum("part-tpc-rewrite-" in p for p in paths) == 1, paths
