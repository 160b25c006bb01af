"""Spark's distributed ``read_committed`` of an Azure target (Azurite): the ``tpc`` data
source's reader on the executors, which get the store's public options (endpoint,
account name) as reader options and the key from their environment only.

The session's executors hold ``AZURE_STORAGE_ACCOUNT_KEY`` and nothing else of Azure
(tests/spark/conftest.py: the JVM's environment at launch); the account name is not in
their environment, so a read that succeeds got it from the reader's options.
"""

from __future__ import annotations

import os

import pytest

from airflow_tpc import Sink, TpcError
from airflow_tpc.spark import read_committed, write_tpc
from airflow_tpc.spark.datasource import TpcDataSource

from .conftest import EXECUTOR_AZURE_ENV
from .helpers import job_for, rows_of


@pytest.fixture(params=["az", "abfss"])
def azure_target(request, azurite, monkeypatch):
    """(target, the driver's full options, the public ones), in both spellings of an Azure
    target; the driver's environment holds the key as the executors' does (a job's driver
    lists the markers with it)."""
    assert "AZURE_STORAGE_ACCOUNT_NAME" not in EXECUTOR_AZURE_ENV
    monkeypatch.delenv("AZURE_STORAGE_ACCOUNT_NAME", raising=False)
    monkeypatch.delenv("AZURE_STORAGE_CONNECTION_STRING", raising=False)
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_KEY", azurite.options()["account_key"])
    public = {"endpoint_url": azurite.endpoint, "account_name": "devstoreaccount1"}
    if request.param == "az":
        return f"{azurite.new_prefix()}/tables/events", azurite.options(), public
    target = (f"abfss://{azurite.new_container()}@devstoreaccount1.dfs.core.windows.net/"
              "tables/events")
    return target, azurite.options(), public


def _write(spark, sink: Sink, epoch: str, ids: range, public: dict, *, seal: bool = True):
    """One attempt of ``epoch`` written by a job (the tpc writer on the executors), sealed
    unless ``seal`` is False; returns its transaction."""
    job = job_for(spark, sink, epoch, storage_options=public)
    df = spark.range(ids.start, ids.stop, numPartitions=2).selectExpr(
        "id", "cast(id % 2 as string) as side")
    write_tpc(df, job, partition_by=["side"], precommit=seal)
    return job.txn


def _commit(sink: Sink, txn) -> None:
    manifest = sink.read_manifest(txn)
    assert sink.commit(txn, expected_digest=manifest.digest).outcome == "committed"


def test_distributed_read_committed_of_an_azure_target(spark, azurite, azure_target):
    import adlfs
    import pyarrow as pa
    import pyarrow.parquet as pq

    target, options, public = azure_target
    key = options["account_key"]
    sink = Sink(target, "events", storage_options=options)
    # epoch A: attempt 1 committed, then a rerun (attempt 2) committed: only attempt 2
    _commit(sink, _write(spark, sink, "A", range(0, 100), public))
    _commit(sink, _write(spark, sink, "A", range(100, 250), public))
    # epoch B: attempt 1 committed; attempt 2 written and sealed, never committed
    _commit(sink, _write(spark, sink, "B", range(300, 350), public))
    staged = _write(spark, sink, "B", range(400, 450), public)
    # epoch C: written, sealed, then aborted
    sink.abort(_write(spark, sink, "C", range(500, 520), public), "test: thrown away")
    # a file dropped by hand into a published epoch folder: no marker names it
    fs = adlfs.AzureBlobFileSystem(connection_string=azurite.connection_string())
    stray = f"{sink.layout.root}/epoch=A/side=0/stray.parquet"  # container/path
    with fs.open(stray, "wb") as fh:
        pq.write_table(pa.table({"id": [999]}), fh)
    assert stray in fs.find(f"{sink.layout.root}/epoch=A")  # a plain folder read sees it
    assert {i.attempt: str(i.state) for i in sink.describe("B")}[staged.attempt] == \
        "PRECOMMITTED"

    expected = sorted([(i, str(i % 2), "A") for i in range(100, 250)]
                      + [(i, str(i % 2), "B") for i in range(300, 350)])
    df = read_committed(spark, target, storage_options=public)  # distributed by default
    files = sink.committed_files()
    assert all(f.startswith(f"{target}/epoch=") for v in files.values() for f in v)
    assert df.rdd.getNumPartitions() == sum(len(v) for v in files.values())  # one per file
    assert rows_of(df, "id", "side", "epoch") == expected
    only_b = read_committed(spark, target, storage_options=public, epochs=["B", "C"],
                            distributed=True)
    assert rows_of(only_b, "id", "side", "epoch") == [r for r in expected if r[2] == "B"]
    # the driver-side read (explicit credentials) sees the same rows (pyarrow infers the
    # partition's type; the distributed reader gives strings)
    driver = rows_of(read_committed(spark, target, storage_options=options), "id", "side",
                     "epoch")
    assert [(i, str(side), e) for i, side, e in driver] == expected

    # The plan carries the public options, never the key; nor does the Spark conf.  Its
    # printed form omits the reader's options: they are read off the parsed plan's node.
    qe = df._jdf.queryExecution()
    plan, reader_options = qe.toString(), qe.logical().options().toString()
    assert "BatchScan tpc" in plan and key not in plan
    assert "account_name -> devstoreaccount1" in reader_options
    assert f"endpoint_url -> {azurite.endpoint}" in reader_options
    assert key not in reader_options
    for conf in (spark.sparkContext.getConf().getAll(), spark.conf.getAll.items()):
        assert all(key not in str(v) for _, v in conf)
    assert key not in os.environ.get("PYSPARK_SUBMIT_ARGS", "")


def test_secrets_are_refused_as_reader_options(spark, azure_target):
    target, options, public = azure_target
    key = options["account_key"]
    with pytest.raises(TpcError, match=r"\['account_key'\] cannot go to executors") as err:
        read_committed(spark, target, storage_options=options, distributed=True)
    assert key not in str(err.value) and "AZURE_STORAGE_ACCOUNT_KEY" in str(err.value)
    for secret in ("account_key", "sas_token", "connection_string", "client_secret",
                   "key", "secret"):
        with pytest.raises(TpcError, match="query plan") as err:
            TpcDataSource({"target": target, **public, secret: key}).schema()
        assert key not in str(err.value) and secret in str(err.value)


def test_an_azure_reader_takes_azures_public_options_not_s3s(spark, azure_target):
    """Which options may travel is the store's to say: ``region_name`` is S3's."""
    target, _, public = azure_target
    with pytest.raises(TpcError, match=r"\['region_name'\]"):
        TpcDataSource({"target": target, **public, "region_name": "us-east-1"}).schema()
    with pytest.raises(TpcError, match=r"\['account_name'\]"):
        TpcDataSource({"target": "s3://b/t", "account_name": "devstoreaccount1"}).schema()
