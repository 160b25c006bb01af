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


#: The catalogs every Iceberg scenario runs through: pyiceberg's embedded SQL catalog
#: (a local warehouse) and a real REST catalog (SeaweedFS: a table bucket on S3, which
#: refuses anything but the table's own files, so the ledger is kept apart).
CATALOGS = ["sql", "rest"]


@pytest.fixture(params=CATALOGS)
def catalog_props(request, tmp_path) -> dict[str, str]:
    """The catalog's pyiceberg properties; a fresh catalog (or table bucket) per test."""
    if request.param == "rest":
        seaweed = request.getfixturevalue("seaweed")
        return seaweed.catalog_properties(seaweed.new_warehouse())
    (tmp_path / "warehouse").mkdir()
    return {"type": "sql", "uri": f"sqlite:///{tmp_path}/catalog.db",
            "warehouse": f"file://{tmp_path}/warehouse"}


@pytest.fixture()
def sink_options(request, catalog_props) -> dict:
    """What a sink of this catalog needs besides the catalog: the store's options and,
    for managed table storage, a ledger apart from the table."""
    if catalog_props["type"] != "rest":
        return {}
    seaweed = request.getfixturevalue("seaweed")
    return {"storage_options": seaweed.s3_options(), "ledger_uri": seaweed.new_prefix()}


@pytest.fixture()
def make_sink(catalog_props, sink_options):
    """A fresh IcebergSink each call: a new process sees only what is in storage."""
    def make(namespace: str = "events") -> IcebergSink:
        return IcebergSink(f"iceberg://local/{TABLE}", namespace,
                           catalog_properties=catalog_props, **sink_options)
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
    if sink.storage.scheme == "file":
        sink.storage.put(path, b"")  # creates the folders the way the store does
        out = None
    else:  # an object store: through the table's FileIO, as a job's writer would
        out = sink.table_target.file_io().new_output(sink.storage.uri(path)).create(
            overwrite=True)
    with out if out is not None else open(path, "wb") as stream:
        if table.num_rows == 0:  # as Spark writes an empty task's file: no row group
            pq.ParquetWriter(stream, table.schema).close()
        else:
            pq.write_table(table, stream)


def stage(sink: IcebergSink, epoch: str, batches: dict[str, pa.Table], *,
          precommit: bool = True):
    txn = sink.begin(epoch)
    for name, batch in batches.items():
        write_parquet(sink, txn, name, batch)
    manifest = sink.precommit(txn) if precommit else None
    return txn, manifest


def commit_epoch(sink, epoch: str, batches: dict[str, pa.Table]):
    """Begin, stage, pre-commit and commit one epoch: (the commit's result, the txn)."""
    txn, manifest = stage(sink, epoch, batches)
    return sink.commit(txn, expected_digest=manifest.digest), txn


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



def duckdb_ids(table, epoch: str | None = None) -> list[int]:
    """The ``id`` column (of one epoch) of a pyiceberg table's current snapshot as
    DuckDB's own reader sees it (tests/duckdb_readers.py), sorted: a table of a REST
    catalog through DuckDB's ``ATTACH`` of that catalog, as an engine reads it; any
    other through ``iceberg_scan`` of the metadata file the catalog points at."""
    from tests.duckdb_readers import duckdb_rows

    props = table.io.properties
    s3 = None
    if props.get("s3.endpoint"):
        s3 = {"endpoint": props["s3.endpoint"].split("://", 1)[-1],
              "key": props["s3.access-key-id"], "secret": props["s3.secret-access-key"]}
    if table.current_snapshot() is None:
        return []
    columns = ["id"] if epoch is None else ["id", "epoch"]
    cat = table.catalog.properties
    rest = None
    if cat.get("type") == "rest":
        client_id, _, client_secret = cat["credential"].partition(":")
        rest = {"endpoint": cat["uri"], "warehouse": cat["warehouse"],
                "client_id": client_id, "client_secret": client_secret,
                "oauth2_server_uri": cat.get("oauth2-server-uri")
                or f"{cat['uri'].rstrip('/')}/v1/oauth/tokens",
                "table": ".".join(table.name())}
    rows = duckdb_rows("iceberg", table.metadata_location, columns, s3, rest)
    return sorted(r[0] for r in rows if epoch is None or r[1] == epoch)
