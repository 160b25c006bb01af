"""The example pipeline pointed at Azure (issue 35): DAG ``tpc_it_azure`` is ``tpc_it_s3``
with an ``az://`` target on Azurite and a ``wasb`` connection as ``storage_conn_id`` —
nothing else changes.  The same job (dags/jobs/aggregate_events.py) writes through the
``tpc`` data source (adlfs on the executors: pyspark ships no hadoop-azure), the commit
publishes, a rerun of the epoch with other input replaces it, and the account key
reaches no log, XCom, trigger row, rendered field or task state."""

from __future__ import annotations

import contextlib
import json
import os

import pytest

from airflow_tpc import Sink, TxnState

from .helpers import assert_secret_kept_out, asset_events, day, states

pytestmark = pytest.mark.timeout(1800)

#: The container the DAG's target names (tests/airflow/dags/tpc_it_dags.py).
CONTAINER = "tpc-it-azure"
TARGET = f"az://{CONTAINER}/tables/daily"
EPOCH = "2026-04-02"


def _read_back(azurite, files: list[str]) -> list[dict]:
    """The published rows, read the way a plain reader does: pyarrow over adlfs."""
    import adlfs
    import pyarrow.parquet as pq

    fs = adlfs.AzureBlobFileSystem(connection_string=azurite.connection_string())
    rows: list[dict] = []
    for f in files:
        rows += pq.read_table(f.split("://", 1)[1], filesystem=fs).to_pylist()
    return rows


def _check_published(sink: Sink, azurite, attempt: int, rows: int) -> list[dict]:
    """The epoch is committed by ``attempt`` and published; its files lie in the target's
    epoch folder; read back they are one row per (event_type, hour) summing to ``rows``
    generated events — the job's input, once."""
    infos = {i.attempt: i for i in sink.describe(EPOCH)}
    info = infos[attempt]
    assert info.state is TxnState.COMMITTED and info.published and not info.superseded
    assert info.staging_files == 0
    files = sink.committed_files()[EPOCH]
    assert files and all(f.startswith(f"{TARGET}/epoch={EPOCH}/") for f in files), files
    assert len(files) == info.files
    back = _read_back(azurite, files)
    assert len(back) == info.rows  # what the job measured writing: every row, once
    keys = [(r["event_type"], r["hour"]) for r in back]
    assert len(keys) == len(set(keys))  # one aggregate per group: nothing twice
    assert {r["day"] for r in back} == {EPOCH}
    assert sum(r["events"] for r in back) == rows
    return back


def test_the_example_pipeline_on_an_azure_container(dagbag, azurite, capfd):
    from azure.core.exceptions import ResourceExistsError

    key = azurite.options()["account_key"]
    with contextlib.suppress(ResourceExistsError):
        azurite.service().create_container(CONTAINER)
    os.environ["AIRFLOW_CONN_TPC_AZURE"] = json.dumps({
        "conn_type": "wasb", "host": azurite.endpoint, "login": "devstoreaccount1",
        "password": key})
    dag = dagbag.get_dag("tpc_it_azure")

    dr = dag.test(logical_date=day(EPOCH), run_conf={"rows": 1500})
    assert dr.state == "success", states(dr)
    sink = Sink(TARGET, "tpc_it_azure", storage_options=azurite.options())
    first = _check_published(sink, azurite, 1, 1500)
    assert asset_events(TARGET)[-1]["txn_id"] == f"tpc_it_azure/{EPOCH}/1"

    # The input changed (late data): the rerun replaces the epoch, it does not add to it.
    dr = dag.test(logical_date=day(EPOCH), run_conf={"rows": 900, "seed": 5})
    assert dr.state == "success", states(dr)
    again = _check_published(sink, azurite, 2, 900)  # 900, not 2400
    assert again != first
    assert {i.attempt: i.superseded for i in sink.describe(EPOCH)} == {1: True, 2: False}
    assert asset_events(TARGET)[-1]["txn_id"] == f"tpc_it_azure/{EPOCH}/2"

    # The account key never reaches logs, XComs, trigger rows, rendered fields or the
    # task state store.
    assert_secret_kept_out(key, capfd.readouterr())
