"""A real Spark job's output into a Delta target: Spark's native Parquet writer (part
files, ``_SUCCESS``, ``.crc`` files) stages, the sink commits one Delta version."""

from __future__ import annotations

from airflow_tpc.tables import DeltaSink
from airflow_tpc.tables.base import PROP_ATTEMPT


def _job(spark, txn, ids: list[int], *, with_epoch: bool) -> None:
    """The job: any DataFrame, written natively into staging (the epoch column is
    optional for Delta: the log carries the partition value)."""
    from pyspark.sql import functions as F

    df = spark.createDataFrame([(i, float(i) / 2, f"v{i}") for i in ids],
                               "id long, x double, s string")
    if with_epoch:
        df = df.withColumn("epoch", F.lit(txn.epoch))
    df.repartition(2).write.mode("append").parquet(txn.staging_uri)


def test_spark_output_becomes_one_delta_version_per_commit(spark, tmp_path):
    sink = DeltaSink(f"delta+file://{tmp_path}/events", "events")
    txn = sink.begin("2026-11-20")
    _job(spark, txn, [1, 2, 3, 4], with_epoch=True)
    manifest = sink.precommit(txn)
    assert manifest.total_files >= 1  # _SUCCESS and .crc files are hidden, not listed
    sink.commit(txn, expected_digest=manifest.digest)
    txn2 = sink.begin("2026-11-20")
    _job(spark, txn2, [5, 6], with_epoch=False)
    sink.commit(txn2, expected_digest=sink.precommit(txn2).digest)

    infos = [h for h in reversed(sink.table_target.commit_infos()) if h.get(PROP_ATTEMPT)]
    assert [h[PROP_ATTEMPT] for h in infos] == ["1", "2"]
    got = sink.table_target.pyarrow_dataset().to_table().to_pylist()
    assert sorted((r["id"], r["epoch"]) for r in got) == [(5, "2026-11-20"), (6, "2026-11-20")]
    assert sorted(r["id"] for r in sink.table_target.pyarrow_dataset(0).to_table().to_pylist()) \
        == [1, 2, 3, 4]
    back = spark.read.parquet(*sink.committed_files()["2026-11-20"])
    assert sorted(r.id for r in back.collect()) == [5, 6]
