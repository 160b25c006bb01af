"""Spark's distributed ``read_committed`` of an Azure target (Azurite): the ``tpc`` data
source's reader on the executors gets the store's public options (endpoint, account
name) as reader options and never a secret.

The end-to-end read runs in a ``spark-submit`` child with an environment of its own (the
key, as a job gets it; not the account name, so a read that succeeds got that from the
reader's options): the executors' environment is the one their JVM started with, which
in this process depends on which test module started the shared session first.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_tpc import Sink, TpcError
from airflow_tpc.spark import read_committed
from airflow_tpc.spark.datasource import TpcDataSource

from ..core.helpers import stage
from .conftest import EXECUTOR_AZURE_ENV

JOBS = Path(__file__).parent / "jobs"


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


def _parquet(ids: list[int]) -> bytes:
    buf = io.BytesIO()
    pq.write_table(pa.table({"id": pa.array(ids, pa.int64())}), buf)
    return buf.getvalue()


def _attempt(sink: Sink, epoch: str, ids: range, *, commit: bool = True):
    """One attempt of ``epoch``, its rows split into ``side=0`` / ``side=1`` folders as a
    partitioned job writes them; sealed, and committed unless ``commit`` is False."""
    files = {f"side={s}/part-0.parquet": _parquet([i for i in ids if i % 2 == s])
             for s in (0, 1)}
    txn, manifest = stage(sink, epoch, files)
    if commit:
        assert sink.commit(txn, expected_digest=manifest.digest).outcome == "committed"
    return txn


def _history(sink: Sink) -> list[tuple[int, str, str]]:
    """Committed: epoch A's rerun (attempt 2 replaced attempt 1) and epoch B's attempt 1;
    not: B's sealed attempt 2, C's aborted attempt, a file dropped into epoch A's folder."""
    _attempt(sink, "A", range(0, 100))
    _attempt(sink, "A", range(100, 250))
    _attempt(sink, "B", range(300, 350))
    staged = _attempt(sink, "B", range(400, 450), commit=False)
    sink.abort(_attempt(sink, "C", range(500, 520), commit=False), "test: thrown away")
    stray = sink.storage.join(sink.layout.root, "epoch=A/side=0/stray.parquet")
    sink.storage.put(stray, _parquet([999]))
    assert {i.attempt: str(i.state) for i in sink.describe("B")}[staged.attempt] == \
        "PRECOMMITTED"
    return sorted([(i, str(i % 2), "A") for i in range(100, 250)]
                  + [(i, str(i % 2), "B") for i in range(300, 350)])


def test_distributed_read_committed_of_azure_targets_in_a_job(azurite, tmp_path):
    options = azurite.options()
    key = options["account_key"]
    public = {"endpoint_url": azurite.endpoint, "account_name": "devstoreaccount1"}
    targets = [f"{azurite.new_prefix()}/tables/events",
               f"abfss://{azurite.new_container()}@devstoreaccount1.dfs.core.windows.net/"
               "tables/events"]
    expected, committed = {}, {}
    for target in targets:
        sink = Sink(target, "events", storage_options=options)
        expected[target] = _history(sink)
        committed[target] = sink.committed_files()
        assert all(f.startswith(f"{target}/epoch=") for v in committed[target].values()
                   for f in v)

    env = {k: v for k, v in os.environ.items()
           if not k.startswith("AZURE_STORAGE_") and k != "AIRFLOW_TPC_TXN"}
    env.update(EXECUTOR_AZURE_ENV, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable,
               PYSPARK_DRIVER_PYTHON=sys.executable)
    result = tmp_path / "result.json"
    cmd = [os.path.join(os.path.dirname(sys.executable), "spark-submit"),
           "--master", "local[2]", "--conf", "spark.ui.enabled=false",
           str(JOBS / "azure_read_job.py"), str(result), json.dumps(targets),
           json.dumps(public)]
    assert key not in " ".join(cmd)
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-4000:]
    doc = json.loads(result.read_text())
    assert doc["env_has_account_name"] is False
    for target in targets:
        got = doc["targets"][target]
        assert [tuple(r) for r in got["rows"]] == expected[target]
        assert [tuple(r) for r in got["only_b"]] == [r for r in expected[target]
                                                     if r[2] == "B"]
        # one partition per committed file
        assert got["partitions"] == sum(len(v) for v in committed[target].values())
        # The plan carries the public options, never the key; nor does the Spark conf.
        # Its printed form omits the reader's options: the job read them off the node.
        assert "BatchScan tpc" in got["plan"] and key not in got["plan"]
        assert "account_name -> devstoreaccount1" in got["reader_options"]
        assert f"endpoint_url -> {azurite.endpoint}" in got["reader_options"]
        assert key not in got["reader_options"]
        assert all(key not in v for v in got["conf"])
