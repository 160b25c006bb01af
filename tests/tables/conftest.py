"""Iceberg targets with real parts: pyiceberg's SQL catalog on SQLite, a local warehouse,
Parquet files written by pyarrow into staging as a Spark job would write them."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pyiceberg  # noqa: F401  (the tables extra, in dev: a missing one fails, never skips)
import pytest

from airflow_tpc import Transaction
from airflow_tpc.tables import IcebergSink

TABLE = "analytics.events"


@pytest.fixture()
def catalog_props(tmp_path) -> dict[str, str]:
    """An embedded catalog: nothing to start, one SQLite file and a warehouse folder."""
    (tmp_path / "warehouse").mkdir()
    return {"type": "sql", "uri": f"sqlite:///{tmp_path}/catalog.db",
            "warehouse": f"file://{tmp_path}/warehouse"}


@pytest.fixture()
def make_sink(catalog_props):
    """A fresh IcebergSink each call: a new process sees only what is in storage."""
    def make(namespace: str = "events") -> IcebergSink:
        return IcebergSink(f"iceberg://local/{TABLE}", namespace,
                           catalog_properties=catalog_props)
    return make


def rows(epoch: str, ids: list[int], **extra: list) -> pa.Table:
    """A batch of the events table: id, value, and the epoch column the job writes."""
    cols = {"id": pa.array(ids, pa.int64()),
            "value": pa.array([f"v{i}" for i in ids], pa.string()),
            "epoch": pa.array([epoch] * len(ids), pa.string())}
    cols.update({k: pa.array(v) for k, v in extra.items()})
    return pa.table(cols)


def write_parquet(sink: IcebergSink, txn: Transaction, name: str, table: pa.Table) -> None:
    """What the Spark job does: one Parquet file into the attempt's staging."""
    path = sink.storage.join(sink.layout.staging(txn.epoch, txn.attempt), name)
    sink.storage.put(path, b"")  # creates the folders the way the store does
    if table.num_rows == 0:  # as Spark writes an empty task's file: no row group at all
        pq.ParquetWriter(path, table.schema).close()
        return
    pq.write_table(table, path)


def stage(sink: IcebergSink, epoch: str, batches: dict[str, pa.Table], *,
          precommit: bool = True):
    txn = sink.begin(epoch)
    for name, batch in batches.items():
        write_parquet(sink, txn, name, batch)
    manifest = sink.precommit(txn) if precommit else None
    return txn, manifest


@pytest.fixture(scope="session")
def spark():
    """The suite's one SparkSession if one runs already; else one for the table tests."""
    from pyspark.sql import SparkSession

    existing = SparkSession.getActiveSession()
    session = existing or (
        SparkSession.builder.master("local[2,2]").appName("airflow-tpc-tests")
        .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4").getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    yield session
    if existing is None:
        session.stop()
