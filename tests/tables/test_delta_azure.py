"""Delta targets on Azure (``delta+az://``), on Azurite: delta-rs's Azure object store
(account, key and Azurite's path-style endpoint translated from the storage options),
pyarrow reading footers through adlfs, and airflow-tpc's Azure store for the ledger and
staging — a commit, a crash after the table commit rolled forward, a rerun, gc."""

from __future__ import annotations

import logging

import pytest

from airflow_tpc.core.faults import InjectedCrash, armed
from airflow_tpc.tables import DeltaSink, open_sink
from airflow_tpc.tables.base import PROP_ATTEMPT, PROP_TXN_ID

from .test_delta_s3 import _ids, _stage


def test_azure_commit_rerun_crash_after_the_table_commit_and_gc(azurite, caplog):
    caplog.set_level(logging.DEBUG, logger="airflow_tpc")
    container = azurite.new_container()

    def make() -> DeltaSink:
        sink = open_sink(f"delta+az://{container}/tables/events", "events",
                         storage_options=azurite.options())
        assert isinstance(sink, DeltaSink)
        return sink

    sink = make()
    assert sink.target.startswith("az://")
    txn, _ = _stage(sink, "5", [1, 2])
    sink.commit(txn)
    txn, _ = _stage(sink, "6", [6])
    sink.commit(txn)
    txn, manifest = _stage(sink, "5", [7])
    with armed("delta.after_table_commit"), pytest.raises(InjectedCrash):
        sink.commit(txn, expected_digest=manifest.digest)
    assert _ids(sink) == [6, 7]  # in the table; the ledger does not know yet
    make().recover()
    assert make().commit(txn, expected_digest=manifest.digest).outcome == "already_committed"
    assert sink.table_target.load_table().version() == 2
    assert [h[PROP_ATTEMPT] for h in reversed(sink.table_target.commit_infos())
            if h.get(PROP_TXN_ID)] == ["1", "1", "2"]
    assert _ids(sink, version=0) == [1, 2]
    sink.gc()
    assert _ids(sink, version=0) == [1, 2]  # attempt 1's file kept: version 0 references it
    assert sink.committed_files(["5"]) == {"5": [
        f"az://{sink.layout.staging('5', 2)}/part-0.parquet"]}
    assert azurite.options()["account_key"] not in caplog.text


def test_an_abfss_delta_table_names_its_account_in_the_uri(azurite, caplog):
    """``delta+abfss://<container>@<account>.dfs.core.windows.net/<path>`` (ADLS Gen2's
    spelling, the one Databricks and Synapse show): the account comes from the URI, the
    options need only the key and the endpoint; a commit and a rerun, the table read
    back (delta-rs's file list, the footers and rows through adlfs), every URI in the
    abfss spelling."""
    caplog.set_level(logging.DEBUG, logger="airflow_tpc")
    container = azurite.new_container()
    host = "devstoreaccount1.dfs.core.windows.net"
    options = {**azurite.options(), "account_name": None}

    def make() -> DeltaSink:
        sink = open_sink(f"delta+abfss://{container}@{host}/tables/events", "events",
                         storage_options=options)
        assert isinstance(sink, DeltaSink)
        return sink

    sink = make()
    assert sink.target == f"abfss://{container}@{host}/tables/events"
    txn, _ = _stage(sink, "5", [1, 2])
    assert sink.commit(txn).outcome == "committed"
    txn, manifest = _stage(make(), "5", [7, 8])
    assert make().commit(txn, expected_digest=manifest.digest).outcome == "committed"
    assert _ids(make()) == [7, 8]  # the rerun replaced the epoch
    assert _ids(make(), version=0) == [1, 2]
    staging = make().layout.staging("5", 2).split("/", 1)[1]  # <container>/<path>
    assert make().committed_files() == {
        "5": [f"abfss://{container}@{host}/{staging}/part-0.parquet"]}
    assert azurite.options()["account_key"] not in caplog.text


def test_bad_azure_delta_targets_are_refused_and_keys_never_shown(azurite):
    from airflow_tpc import TpcError
    from airflow_tpc.tables import open_table_sink
    from airflow_tpc.tables.delta import DeltaTarget

    for bad, says in (("delta+az:///x", "not a Delta target"),
                      ("delta+az://Bad_Container/x", "not an Azure container name"),
                      ("delta+az://lake/x?sig=1", "not a Delta target"),
                      ("delta+abfss://lake@localhost/x", "does not name an account host"),
                      ("delta+abfss:///x", "not a Delta target")):
        with pytest.raises(TpcError, match=says):
            open_table_sink(bad, "events", storage_options=azurite.options())
    target = DeltaTarget.parse("delta+az://lake/t", azurite.options())
    key = azurite.options()["account_key"]
    assert key not in repr(target) and key not in repr(DeltaSink(target, "n"))
