"""Spark's read_committed on a table target: exactly the files of each epoch's committed
snapshot, read by Spark itself.  The job side opens no catalog (no pyiceberg on it): the
file list is resolved where the table library is (here, the test process standing for the
Airflow side) and handed over as a mapping or a JSON file."""

from __future__ import annotations

import json
from pathlib import Path

import pyiceberg  # noqa: F401  (the tables extra, in dev: a missing one fails, never skips)
import pytest

from airflow_tpc import TpcError
from airflow_tpc.spark import read_committed
from airflow_tpc.spark.context import JobTransaction, build_payload
from airflow_tpc.tables import open_sink

TABLE = "iceberg://local/analytics.reads"


@pytest.fixture()
def sink(tmp_path):
    (tmp_path / "warehouse").mkdir()
    props = {"type": "sql", "uri": f"sqlite:///{tmp_path}/catalog.db",
             "warehouse": f"file://{tmp_path}/warehouse"}
    return open_sink(TABLE, "reads", catalog_properties=props)


def _job(spark, sink, epoch: str, ids: list[int], *, commit: bool = True):
    """The job side as under Airflow: a payload, a JobTransaction (core only), Spark's
    native writer with the epoch column, sealed by the core; the commit on the other side."""
    txn = sink.begin(epoch)
    job = JobTransaction.from_payload(build_payload(txn, promotion="manifest", table=TABLE))
    df = spark.createDataFrame([(i, f"v{i}") for i in ids], "id long, s string")
    job.with_epoch_column(df).repartition(2).write.mode("overwrite").parquet(job.output_uri)
    manifest = job.precommit()
    if commit:
        sink.commit(txn, expected_digest=manifest.digest)
    return txn


def _rows(df) -> list[tuple[str, int]]:
    return sorted((r.epoch, r.id) for r in df.select("epoch", "id").collect())


def test_read_committed_reads_the_committed_snapshots_files(spark, sink, tmp_path):
    _job(spark, sink, "2026-11-01", [1, 2, 3])
    _job(spark, sink, "2026-11-01", [10, 11])          # a rerun replaces the epoch
    _job(spark, sink, "2026-11-02", [20])
    _job(spark, sink, "2026-11-03", [99], commit=False)  # pre-committed only: never read
    committed = sink.committed_files()
    assert list(committed) == ["2026-11-01", "2026-11-02"]
    df = read_committed(spark, TABLE, committed=committed)
    want = [("2026-11-01", 10), ("2026-11-01", 11), ("2026-11-02", 20)]
    assert _rows(df) == want
    # the same as a reader of the table's current snapshot sees
    scan = sink.table_target.load_table().scan().to_arrow()
    assert sorted(zip(scan["epoch"].to_pylist(), scan["id"].to_pylist(), strict=True)) == want
    # exactly the files of the epoch's snapshot, read by Spark from where they are
    assert sorted(df.inputFiles()) == sorted(u for v in committed.values() for u in v)
    # handed over as a JSON file, restricted to one epoch
    path = tmp_path / "committed.json"
    path.write_text(json.dumps(committed))
    assert _rows(read_committed(spark, TABLE, committed=str(path), epochs=["2026-11-02"])) \
        == [("2026-11-02", 20)]


def test_a_table_without_its_file_list_is_one_clear_error(spark, sink, tmp_path):
    with pytest.raises(TpcError, match="committed="):
        read_committed(spark, TABLE)
    with pytest.raises(TpcError, match="list of file URIs"):
        read_committed(spark, TABLE, committed={"2026-11-01": "not-a-list"})
    with pytest.raises(TpcError, match="cannot read the committed file list"):
        read_committed(spark, TABLE, committed=str(tmp_path / "missing.json"))
    # nothing committed: an empty frame typed by schema
    assert read_committed(spark, TABLE, committed={}, schema="id long").count() == 0


def test_read_committed_of_a_delta_table(spark, tmp_path):
    """The same job side and reader for a Delta target: the list comes from the table's
    log (DeltaSink.committed_files), the files from where the job wrote them."""
    import deltalake

    target = f"delta+file://{tmp_path}/delta_reads"
    sink = open_sink(target, "reads")
    for epoch, ids in (("2026-11-01", [1, 2]), ("2026-11-01", [7]), ("2026-11-02", [8])):
        txn = sink.begin(epoch)
        job = JobTransaction.from_payload(build_payload(txn, promotion="manifest",
                                                        table=target))
        df = spark.createDataFrame([(i, f"v{i}") for i in ids], "id long, s string")
        job.with_epoch_column(df).write.mode("overwrite").parquet(job.output_uri)
        sink.commit(txn, expected_digest=job.precommit().digest)
    committed = sink.committed_files()
    got = _rows(read_committed(spark, target, committed=committed))
    assert got == [("2026-11-01", 7), ("2026-11-02", 8)]
    table = deltalake.DeltaTable(f"{tmp_path}/delta_reads").to_pyarrow_table()
    assert sorted(zip(table["epoch"].to_pylist(), table["id"].to_pylist(), strict=True)) == got


def test_job_side_of_a_table_with_its_ledger_apart_and_no_epoch_column(spark, tmp_path):
    """The job side with ``ledger_uri`` and an append (no ``epoch`` column): the payload
    says so, the job's plain core sink finds the seal's place in the ledger's claim, and
    the table sink commits what the job sealed."""
    (tmp_path / "warehouse").mkdir()
    props = {"type": "sql", "uri": f"sqlite:///{tmp_path}/catalog.db",
             "warehouse": f"file://{tmp_path}/warehouse"}
    ledger = f"file://{tmp_path}/ledgers/events"
    sink = open_sink(TABLE, "apart", catalog_properties=props, ledger_uri=ledger,
                     mode="append")
    txn = sink.begin("2026-11-20")
    job = JobTransaction.from_payload(build_payload(txn, promotion="manifest", table=TABLE,
                                                    epoch_column=False))
    assert json.loads(job.to_json())["epoch_column"] is False
    df = spark.createDataFrame([(i, f"v{i}") for i in (1, 2, 3)], "id long, s string")
    assert job.with_epoch_column(df).columns == ["id", "s"]
    df.repartition(2).write.mode("overwrite").parquet(job.output_uri)
    manifest = job.precommit()
    sealed = tmp_path / "ledgers/events/_tpc/sealed/epoch=2026-11-20/attempt=000001"
    assert (sealed / "_tpc_manifest.json").exists()
    assert not list(Path(txn.staging_uri.removeprefix("file://")).glob("_tpc_manifest*"))
    assert sink.commit(txn, expected_digest=manifest.digest).outcome == "committed"
    table = sink.table_target.load_table()
    assert sorted(table.scan().to_arrow()["id"].to_pylist()) == [1, 2, 3]
