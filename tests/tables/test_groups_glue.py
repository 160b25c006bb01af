"""A group of Glue tables beside a folder on S3 (a mixed group), one epoch, all on
moto's server: two Iceberg tables through pyiceberg's GlueCatalog, a plain folder
target and the group's folder on moto's S3.

Glue has no multi-table commit, so the group switches its tables member by member, as
any mixed group does; a crash between the two table commits must leave the
consistent cut showing the epoch as all old, all new, or not at all, and a fresh
group's recover must finish the switch with each table holding its new rows once and
one table commit per attempt.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog import load_catalog

from airflow_tpc import Sink
from airflow_tpc.core.faults import InjectedCrash, armed
from airflow_tpc.group import Group
from airflow_tpc.tables import IcebergSink
from airflow_tpc.tables.base import PROP_ATTEMPT, PROP_EPOCH, PROP_TXN_ID

from .conftest import rows, write_parquet
from .glue import glue_props  # noqa: F401 (fixture)

NS, EPOCH = "etl", "5"
TABLES = {"daily": "analytics.daily", "events": "analytics.events"}
OLD = {"daily": [1, 2], "events": [3], "files": [4, 5]}
NEW = {"daily": [10], "events": [20, 21], "files": [30]}


@pytest.fixture()
def make_group(glue_props, s3_options, s3_bucket):  # noqa: F811 (fixture)
    """A fresh group each call (a new process sees only what is in storage)."""
    def make() -> Group:
        sinks: dict[str, Sink] = {
            name: IcebergSink(f"iceberg://glue/{table}", NS, catalog_properties=glue_props,
                              storage_options=s3_options)
            for name, table in TABLES.items()}
        sinks["files"] = Sink(f"s3://{s3_bucket}/files", NS, storage_options=s3_options)
        return Group(sinks, f"s3://{s3_bucket}/groups", storage_options=s3_options)
    return make


def _stage(group: Group, ids: dict[str, list[int]]):
    gtxn = group.begin(EPOCH)
    for name, sink in group.sinks.items():
        batch = rows(EPOCH, ids[name])
        if isinstance(sink, IcebergSink):
            write_parquet(sink, gtxn.member(name), "a.parquet", batch)
        else:  # the folder member: its store takes the bytes, as the job's writer does
            out = pa.BufferOutputStream()
            pq.write_table(batch, out)
            txn = gtxn.member(name)
            sink.storage.put(sink.storage.join(sink.layout.staging(txn.epoch, txn.attempt),
                                               "a.parquet"), out.getvalue().to_pybytes())
    group.precommit(gtxn)
    return gtxn


def _cut(group: Group, s3_options: dict) -> dict[str, list[int]] | None:
    """member -> ids of the epoch as the group's consistent cut names them."""
    import pyarrow.fs as pafs

    fs = pafs.S3FileSystem(endpoint_override=s3_options["endpoint_url"], scheme="http",
                           access_key=s3_options["key"], secret_key=s3_options["secret"],
                           region="us-east-1")
    cut = {name: per_epoch[EPOCH] for name, per_epoch in group.committed_files().items()
           if EPOCH in per_epoch}
    if not cut:
        return None
    return {name: sorted(i for u in uris for i in
                         pq.read_table(u.removeprefix("s3://"), filesystem=fs)["id"].to_pylist())
            for name, uris in cut.items()}


def _table_state(glue_props, table: str) -> tuple[list[int], list[str]]:  # noqa: F811
    """The table's rows (its own reader) and the attempts airflow-tpc committed to it."""
    t = load_catalog("glue", **glue_props).load_table(table)
    ours = [s.summary[PROP_ATTEMPT] for s in t.snapshots()
            if s.summary.get(PROP_TXN_ID) and s.summary.get(PROP_EPOCH) == EPOCH]
    return sorted(t.scan().to_arrow()["id"].to_pylist()), ours


def test_a_crash_between_the_glue_tables_switch_is_finished_by_recover(
        make_group, glue_props, s3_options):  # noqa: F811 (fixture)
    group = make_group()
    assert group.commit(_stage(group, OLD)).outcome == "committed"
    rerun = _stage(make_group(), NEW)
    assert rerun.attempt == 2
    # the first table's Glue commit is done, the second's not: the group is mid-switch
    with armed("iceberg.after_table_commit"), pytest.raises(InjectedCrash):
        make_group().commit(rerun)
    # members are walked in name order: "daily" switched, "events" not yet
    assert _table_state(glue_props, TABLES["daily"]) == (NEW["daily"], ["1", "2"])
    assert _table_state(glue_props, TABLES["events"]) == (OLD["events"], ["1"])
    assert _cut(make_group(), s3_options) in ({k: sorted(v) for k, v in OLD.items()}, None)

    assert make_group().recover().errors == []
    assert _cut(make_group(), s3_options) == {k: sorted(v) for k, v in NEW.items()}
    for name, table in TABLES.items():
        assert _table_state(glue_props, table) == (sorted(NEW[name]), ["1", "2"]), name
    assert make_group().commit(rerun).outcome == "already_committed"
