"""A new table's first commit: its creation is settled before the commit is decided.

Real parts only, local disk: pyiceberg's SQL catalog on SQLite, delta-rs, a plain folder
target, in the mixed-group lake of :mod:`tests.tables.test_groups_tables`.  The staged
files put ``epoch`` first, in the middle, last or (Delta only: it takes the value from
the log) nowhere; the first commit must create the table every time, alone and in a
group.  Staged files no table of the decided layout can take must be refused before the
decision, with nothing decided and nothing changed (not the folder member either).
"""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from airflow_tpc import Sink, TxnState
from airflow_tpc.core.records import DECISION
from airflow_tpc.group import Group
from airflow_tpc.tables import DeltaSink, IcebergSink, TableSchemaError

from .conftest import TABLE, rows, write_parquet
from .test_groups_tables import (
    DELTA,
    EPOCH,
    FILES,
    ICE,
    NEW,
    NS,
    Lake,
    _cut,
    _cut_of,
    _delta_ids,
    _iceberg_ids,
    make_lake,
)

#: Where the staged files hold ``epoch`` (None: they do not hold it).
ORDERS = {"first": ["epoch", "id", "value"], "middle": ["id", "epoch", "value"],
          "last": ["id", "value", "epoch"], "absent": ["id", "value"]}
#: (format, order): Iceberg needs the column (it infers each file's partition from it).
CASES = [(fmt, order) for fmt in (ICE, DELTA) for order in ORDERS
         if not (fmt == ICE and order == "absent")]


def batch(epoch: str, ids: list[int], order: str) -> pa.Table:
    """The events batch with its columns in ``order`` (ORDERS)."""
    return rows(epoch, ids).select(ORDERS[order])


def sinks(lake: Lake, **scope: object) -> dict[str, Sink]:
    """Fresh sinks of the lake's three targets (a new process sees only storage);
    ``scope``: the tables' ``mode`` / ``replace_where``."""
    return {FILES: Sink(str(lake.root / "files"), NS),
            ICE: IcebergSink(f"iceberg://local/{TABLE}", NS,
                             catalog_properties=lake.catalog_props, **scope),
            DELTA: DeltaSink(f"delta+file://{lake.delta_path}", NS, **scope)}


def group_of(lake: Lake, **scope: object) -> Group:
    return Group(sinks(lake, **scope), str(lake.root / "groups"))


def tree(root: Path) -> dict[str, bytes]:
    """Every file below ``root``, byte for byte: targets, staging, seals, ledgers and
    the catalog's database."""
    out = {}
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            path = Path(dirpath) / name
            out[str(path.relative_to(root))] = path.read_bytes()
    return out


def table_columns(lake: Lake, fmt: str) -> tuple[list[str], list[str]]:
    """The table's columns in order, and what it is partitioned by (identity only)."""
    if fmt == ICE:
        table = lake.iceberg()
        schema = table.schema()
        parts = [schema.find_field(f.source_id).name for f in table.spec().fields
                 if str(f.transform) == "identity"]
        return [f.name for f in schema.fields], parts
    table = DeltaTable(lake.delta_path)
    return ([f.name for f in table.schema().fields],
            list(table.metadata().partition_columns))


def ids_of(lake: Lake, fmt: str, epoch: str | None = None) -> list[int]:
    """The ids the format's own reader reads (of one epoch)."""
    return (_iceberg_ids if fmt == ICE else _delta_ids)(lake, epoch)[0]


@pytest.mark.parametrize(("fmt", "order"), CASES)
def test_the_first_commit_creates_the_table_whatever_the_column_order(tmp_path, fmt, order):
    """Alone: pre-commit, commit (decides and creates the table: committed), the table
    partitioned by identity(epoch) with the staged column order, its reader reading
    the rows; a second epoch commits into it, and recover finds nothing to do."""
    lake = make_lake(tmp_path)
    sink = sinks(lake)[fmt]
    txn = sink.begin(EPOCH)
    write_parquet(sink, txn, "a.parquet", batch(EPOCH, NEW[fmt], order))
    manifest = sink.precommit(txn)
    assert sink.commit(txn, expected_digest=manifest.digest).outcome == "committed"

    columns, parts = table_columns(lake, fmt)
    assert parts == ["epoch"]
    assert columns == (ORDERS[order] if order != "absent" else ["id", "value", "epoch"])
    assert ids_of(lake, fmt, EPOCH) == NEW[fmt]
    later = sinks(lake)[fmt]
    txn2 = later.begin("6")
    write_parquet(later, txn2, "a.parquet", batch("6", [99], order))
    assert later.commit(txn2, expected_digest=later.precommit(txn2).digest).outcome \
        == "committed"
    assert ids_of(lake, fmt) == sorted([*NEW[fmt], 99])
    report = sinks(lake)[fmt].recover()
    assert report.errors == [] and report.rolled_forward == []
    assert [i.state for i in sinks(lake)[fmt].describe(EPOCH)] == [TxnState.COMMITTED]


@pytest.mark.parametrize("order", ["first", "middle", "last"])
def test_a_group_creates_both_tables_with_its_folder_whatever_the_column_order(tmp_path,
                                                                              order):
    """In a group with a folder: a new Iceberg table and a new Delta table (``epoch`` in
    the same place in both members' files) are created by the group's one commit; the
    epoch is stable at once, and the consistent cut shows every member's rows."""
    lake = make_lake(tmp_path)
    group = group_of(lake)
    gtxn = group.begin(EPOCH)
    for name, sink in group.sinks.items():
        write_parquet(sink, gtxn.member(name), "a.parquet", batch(EPOCH, NEW[name], order))
    group.precommit(gtxn)
    result = group_of(lake).commit(gtxn)
    assert result.outcome == "committed"
    assert result.published == {DELTA: 1, FILES: 1, ICE: 1}
    assert group_of(lake).stable_epochs() == {EPOCH: 1}
    assert _cut(group_of(lake)) == {EPOCH: _cut_of(NEW)}
    for fmt in (ICE, DELTA):
        assert table_columns(lake, fmt) == (ORDERS[order], ["epoch"])
    assert group_of(lake).recover().errors == []


def _undecided_and_unchanged(lake: Lake, before: dict[str, bytes], attempt: int,
                             sealed: tuple[str, ...] = ()) -> None:
    """No member and no group decided the attempt, no table exists, the folder publishes
    nothing, and every byte below the lake is as it was (but the seals of ``sealed``:
    members a group's pre-commit sealed before another member's check refused, with
    the ``validated.json`` their pre-commit recorded beside its ledger, PROTOCOL 3.4.11)."""
    group = group_of(lake)
    assert group.ledger.read(EPOCH, attempt, DECISION) is None
    for name, sink in group.sinks.items():
        assert sink.ledger.read(EPOCH, attempt, DECISION) is None, name
    assert group.stable_epochs() == {}
    assert group.committed_files() == {DELTA: {}, FILES: {}, ICE: {}}
    assert group.sinks[ICE].table_target.load_table() is None
    assert group.sinks[DELTA].table_target.load_table() is None
    after = tree(lake.root)
    validated = {_relative(lake, group.sinks[name].layout.record(EPOCH, attempt,
                                                                 "validated"))
                 for name in sealed}
    added = {path for path in set(after) - set(before) - validated
             if not any(path.startswith(member_staging(lake, name)) for name in sealed)}
    assert added == set() and {p: after[p] for p in before} == before


def _relative(lake: Lake, uri: str) -> str:
    return str(Path(uri.removeprefix("file://")).relative_to(lake.root))


def member_staging(lake: Lake, name: str) -> str:
    """A member's staging folder, relative to the lake."""
    sink = group_of(lake).sinks[name]
    return str(Path(sink.layout.staging_root[len("file://"):]
                    if sink.layout.staging_root.startswith("file://")
                    else sink.layout.staging_root).relative_to(lake.root)) + "/"


def test_files_no_new_table_can_take_are_refused_at_precommit_in_a_group(tmp_path):
    """Iceberg files without ``epoch`` (Iceberg infers each file's partition from it):
    the group's pre-commit refuses them naming the table, before any decision; nothing
    is sealed or changed, the folder member is not published, no table is created."""
    lake = make_lake(tmp_path)
    group = group_of(lake)
    gtxn = group.begin(EPOCH)
    for name, sink in group.sinks.items():
        write_parquet(sink, gtxn.member(name), "a.parquet",
                      batch(EPOCH, NEW[name], "absent" if name == ICE else "first"))
    before = tree(lake.root)
    with pytest.raises(TableSchemaError, match="has no column 'epoch'") as exc:
        group_of(lake).precommit(gtxn)
    assert group.sinks[ICE].table_target.uri in str(exc.value)
    assert "Nothing was decided or changed" in str(exc.value)
    # The members before it in the group's order are sealed (their staging only).
    _undecided_and_unchanged(lake, before, gtxn.attempt, sealed=(DELTA, FILES))
    assert group_of(lake).sinks[ICE].read_manifest(gtxn.member(ICE)) is None


@pytest.mark.parametrize("fmt", [ICE, DELTA])
def test_a_new_table_sealed_under_another_scope_is_refused_before_the_decision(tmp_path,
                                                                             fmt):
    """Pre-committed by sinks of ``mode="append"`` (an unpartitioned new table takes any
    ``epoch`` values), committed by sinks of the epoch layout (the operator's setting
    changed in between): the table the commit would create is partitioned by
    ``epoch``, and this file's ``epoch`` holds another epoch.  The check before the
    decision proves the creation again (the seal proved another table), so the group
    refuses before deciding: no decision, no table, the folder member not published,
    every byte as it was.  (Before, the seal was trusted, the group decided, and the
    switch failed on every run while the folder alone was published.)"""
    lake = make_lake(tmp_path)
    group = group_of(lake, mode="append")
    gtxn = group.begin(EPOCH)
    for name, sink in group.sinks.items():
        other = "4" if name == fmt else EPOCH
        write_parquet(sink, gtxn.member(name), "a.parquet", batch(other, NEW[name], "first"))
    group.precommit(gtxn)
    before = tree(lake.root)

    with pytest.raises(TableSchemaError, match="not only this epoch '5'") as exc:
        group_of(lake).commit(gtxn)
    assert group.sinks[fmt].table_target.uri in str(exc.value)
    assert "Nothing was decided or changed" in str(exc.value)
    _undecided_and_unchanged(lake, before, gtxn.attempt)
    # A retry meets the same files: refused again; the group's abort then ends it.
    with pytest.raises(TableSchemaError):
        group_of(lake).commit(gtxn)
    _undecided_and_unchanged(lake, before, gtxn.attempt)
    assert group_of(lake).abort(gtxn, "bad input") is True
    assert group_of(lake).recover().errors == []
    assert group_of(lake).sinks[fmt].table_target.load_table() is None


def test_a_delta_table_created_meanwhile_gets_its_own_partition_values(tmp_path):
    """``mode="append"``, no table at pre-commit (the check proves an unpartitioned new
    table); before the commit another writer creates the table partitioned by
    ``region``.  The commit checks against that table, and the files are added with
    the partition values found against it — never ones found against the proof's
    scratch table (sealed, they would add ``region``-less files to a partitioned
    table)."""
    from deltalake import write_deltalake

    lake = make_lake(tmp_path)
    sink = sinks(lake, mode="append")[DELTA]
    txn = sink.begin(EPOCH)
    staged = rows(EPOCH, NEW[DELTA]).append_column("region", pa.array(["eu"] * len(NEW[DELTA])))
    write_parquet(sink, txn, "a.parquet", staged)
    manifest = sink.precommit(txn)
    write_deltalake(lake.delta_path, rows("0", [7]).append_column("region", pa.array(["us"])),
                    partition_by=["region"])

    result = sinks(lake, mode="append")[DELTA].commit(txn, expected_digest=manifest.digest)
    assert result.outcome == "committed"
    table = DeltaTable(lake.delta_path)
    assert list(table.metadata().partition_columns) == ["region"]
    adds = pa.table(table.get_add_actions(flatten=True)).to_pylist()
    assert len(adds) == 2 and {a["partition.region"] for a in adds} == {"eu", "us"}
    got = sorted((r["id"], r["region"]) for r in table.to_pyarrow_table().to_pylist())
    assert got == sorted([(7, "us"), *((i, "eu") for i in NEW[DELTA])])


def test_each_catalog_creates_the_table_with_epoch_first(make_sink):
    """pyiceberg's SQL catalog and a real REST catalog (SeaweedFS): each client binds
    the partition spec to its column by field id when it creates the table; with
    ``epoch`` first, the first commit creates the table partitioned by it, and the
    rows read back through the catalog."""
    sink = make_sink()
    txn = sink.begin(EPOCH)
    write_parquet(sink, txn, "a.parquet", batch(EPOCH, NEW[ICE], "first"))
    assert sink.commit(txn, expected_digest=sink.precommit(txn).digest).outcome \
        == "committed"
    table = make_sink().table_target.load_table()
    assert [f.name for f in table.schema().fields] == ORDERS["first"]
    (field,) = table.spec().fields
    assert table.schema().find_field(field.source_id).name == "epoch"
    assert sorted(table.scan().to_arrow()["id"].to_pylist()) == NEW[ICE]
