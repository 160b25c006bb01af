"""Iceberg targets with the warehouse on Azure (``abfs://container@account...``), on
Azurite: pyiceberg's fsspec FileIO over adlfs (``adls.connection-string``) for the
table, airflow-tpc's Azure store (the account from the URI, the endpoint and key from
the storage options) for the ledger and staging — a commit, a crash after the table
commit rolled forward, a rerun, gc."""

from __future__ import annotations

import pytest

from airflow_tpc.core.faults import InjectedCrash, armed
from airflow_tpc.tables import IcebergSink
from airflow_tpc.tables.iceberg import PROP_ATTEMPT

from .conftest import TABLE
from .test_iceberg_s3 import _ids, _stage


def test_azure_commit_rerun_and_crash_after_the_table_commit(azurite, tmp_path):
    container = azurite.new_container()
    props = {"type": "sql", "uri": f"sqlite:///{tmp_path}/catalog.db",
             "warehouse": f"abfs://{container}@devstoreaccount1.dfs.core.windows.net/wh",
             "py-io-impl": "pyiceberg.io.fsspec.FsspecFileIO",
             "adls.connection-string": azurite.connection_string()}

    def make() -> IcebergSink:
        return IcebergSink(f"iceberg://local/{TABLE}", "events", catalog_properties=props,
                           storage_options=azurite.options())

    sink = make()
    assert sink.target.startswith(f"abfs://{container}@devstoreaccount1.dfs.core.windows.net/")
    txn, _ = _stage(sink, "5", [1, 2])
    sink.commit(txn)
    txn, _ = _stage(sink, "6", [6])
    sink.commit(txn)
    txn, manifest = _stage(sink, "5", [7])
    with armed("iceberg.after_table_commit"), pytest.raises(InjectedCrash):
        sink.commit(txn, expected_digest=manifest.digest)
    make().recover()
    assert make().commit(txn, expected_digest=manifest.digest).outcome == "already_committed"
    table = sink.table_target.load_table()
    assert _ids(table) == [6, 7]
    assert [s.summary[PROP_ATTEMPT] for s in table.snapshots()] == ["1", "1", "2"]
    first = table.snapshots()[0]
    assert sorted(table.scan(snapshot_id=first.snapshot_id).to_arrow()["id"].to_pylist()) \
        == [1, 2]  # attempt 1's staged file is kept: an older snapshot references it
    sink.gc()
    assert _ids(make().table_target.load_table()) == [6, 7]
