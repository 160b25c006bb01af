"""A real Spark job's output into an Iceberg target: Spark's native Parquet writer
(part files, ``_SUCCESS``, ``.crc`` files) stages, the sink commits one snapshot."""

from __future__ import annotations

import pytest

from airflow_tpc.tables.iceberg import PROP_ATTEMPT


def _job(spark, txn, ids: list[int]) -> None:
    """The job: any DataFrame plus the epoch column, written natively into staging."""
    from pyspark.sql import functions as F

    df = spark.createDataFrame([(i, float(i) / 2, f"v{i}") for i in ids],
                               "id long, x double, s string")
    (df.withColumn("epoch", F.lit(txn.epoch)).repartition(2)
       .write.mode("append").parquet(txn.staging_uri))


# Spark writes through Hadoop's local file system here (no hadoop-aws in pyspark): the
# SQL catalog's local warehouse.
@pytest.mark.parametrize("catalog_props", ["sql"], indirect=True)
def test_spark_output_becomes_one_snapshot_per_commit(spark, make_sink):
    sink = make_sink()
    txn = sink.begin("2026-11-20")
    _job(spark, txn, [1, 2, 3, 4])
    manifest = sink.precommit(txn)
    assert manifest.total_files >= 1  # _SUCCESS and .crc files are hidden, not listed
    sink.commit(txn, expected_digest=manifest.digest)
    txn2 = sink.begin("2026-11-20")
    _job(spark, txn2, [5, 6])
    sink.commit(txn2, expected_digest=sink.precommit(txn2).digest)

    table = sink.table_target.load_table()
    assert [s.summary[PROP_ATTEMPT] for s in table.snapshots()] == ["1", "2"]
    assert sorted(table.scan().to_arrow()["id"].to_pylist()) == [5, 6]
    back = spark.read.parquet(*sink.committed_files()["2026-11-20"])
    assert sorted(r.id for r in back.collect()) == [5, 6]
