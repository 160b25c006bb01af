"""Spark's own writers (parquet/orc/json/csv) into staging, sealed by txn.precommit()."""

from __future__ import annotations

import os

import pytest

from airflow_tpc import FencedError, Sink
from airflow_tpc.spark import read_committed

from .helpers import job_for, rows_of


def local_path(uri: str) -> str:
    return uri[len("file://"):] if uri.startswith("file://") else uri


def staged_names(uri: str) -> list[str]:
    root = local_path(uri)
    out = []
    for dirpath, _, files in os.walk(root):
        out += [os.path.relpath(os.path.join(dirpath, f), root) for f in files]
    return sorted(out)


def events(spark, n: int, offset: int = 0):
    return spark.range(offset, offset + n).selectExpr(
        "id", "cast(id % 3 as string) as country", "id * 2 as value")


def test_native_parquet_partitioned_staging_precommit_commit_read(spark, tmp_path):
    sink = Sink(str(tmp_path / "events"), "events")
    txn = job_for(spark, sink, "2026-11-20")
    events(spark, 300).repartition(2).write.partitionBy("country").parquet(txn.output_uri)

    # Spark's bookkeeping is in staging but never in the manifest
    on_disk = staged_names(txn.staging_uri)
    assert "_SUCCESS" in on_disk and any(n.endswith(".crc") for n in on_disk)
    assert not os.path.exists(local_path(sink.output_uri("2026-11-20")))

    manifest = txn.precommit()
    listed = sorted(f.path for f in manifest.files)
    assert listed == sorted(n for n in on_disk if n.endswith(".parquet")
                            and not n.split("/")[-1].startswith("."))
    assert all(p.startswith("country=") for p in listed)
    assert all(f.checksum.startswith("sha256:") for f in manifest.files)
    # rows from each file's footer (a native writer counts nothing itself)
    assert manifest.total_rows == 300 and all(f.rows for f in manifest.files)
    assert txn.precommit().digest == manifest.digest  # idempotent

    # nothing readable before the commit
    assert read_committed(spark, sink.target).count() == 0
    assert sink.commit(txn.txn, expected_digest=manifest.digest).outcome == "committed"

    df = read_committed(spark, sink.target)
    assert set(df.columns) == {"id", "value", "country", "epoch"}
    got = rows_of(df, "id", "country", "value", "epoch")
    assert got == [(i, i % 3, 2 * i, "2026-11-20") for i in range(300)]  # type inferred
    # and plain Spark on the target sees the same (the _tpc area is hidden by '_')
    assert spark.read.parquet(local_path(sink.target)).count() == 300


@pytest.mark.parametrize("fmt", ["orc", "json", "csv"])
def test_other_native_formats_round_trip(spark, tmp_path, fmt):
    sink = Sink(str(tmp_path / fmt), "fmt")
    txn = job_for(spark, sink, "1")
    writer = events(spark, 50).coalesce(1).write.partitionBy("country")
    if fmt == "csv":
        writer = writer.option("header", "true")
    writer.format(fmt).save(txn.output_uri)
    manifest = txn.precommit()
    assert manifest.total_files == 3
    sink.commit(txn.txn)
    opts = {"header": "true", "inferSchema": "true"} if fmt == "csv" else {}
    df = read_committed(spark, sink.target, format=fmt, options=opts)
    assert rows_of(df, "id", "country", "epoch") == [(i, i % 3, "1") for i in range(50)]


def test_precommit_of_a_fenced_attempt_is_refused(spark, tmp_path):
    sink = Sink(str(tmp_path / "t"), "ns")
    zombie = job_for(spark, sink, "5")
    events(spark, 10).write.parquet(zombie.output_uri)
    live = job_for(spark, sink, "5")  # a retry of the DAG task began attempt 2
    assert live.attempt > zombie.attempt
    with pytest.raises(FencedError):
        zombie.precommit()
    assert sink.read_manifest(zombie.txn) is None


def test_null_partition_values_round_trip(spark, tmp_path):
    """Spark names a null partition ``country=__HIVE_DEFAULT_PARTITION__``: not hidden, kept."""
    sink = Sink(str(tmp_path / "t"), "ns")
    txn = job_for(spark, sink, "1")
    df = spark.createDataFrame([(1, "a"), (2, None)], "id long, country string")
    df.write.partitionBy("country").parquet(txn.output_uri)
    manifest = txn.precommit()
    assert any("country=__HIVE_DEFAULT_PARTITION__/" in f.path for f in manifest.files)
    sink.commit(txn.txn)
    assert rows_of(read_committed(spark, sink.target), "id", "country") == [
        (1, "a"), (2, None)]


def test_a_failed_native_job_leaves_no_manifest_and_nothing_visible(spark, tmp_path):
    from pyspark.sql import functions as F

    sink = Sink(str(tmp_path / "t"), "ns")
    txn = job_for(spark, sink, "1")
    boom = F.udf(lambda i: 1 // (i - 7), "int")  # one row divides by zero, every attempt
    with pytest.raises(Exception, match="ZeroDivisionError"):
        events(spark, 20).repartition(2).withColumn("x", boom("id")).write.parquet(
            txn.output_uri)
    assert sink.read_manifest(txn.txn) is None
    assert [n for n in staged_names(txn.staging_uri) if n.endswith(".parquet")
            and "_temporary" not in n] == []
    assert read_committed(spark, sink.target).count() == 0
    sink.abort(txn.txn, "job failed")
    assert not os.path.exists(local_path(txn.staging_uri))
    assert [d for d in os.listdir(local_path(sink.target)) if not d.startswith("_")] == []
