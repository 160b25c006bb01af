"""Issue 32 §3: the listed surviving mutants of table targets, each killed.

``replace_where``'s proof from footer statistics (``scope.proves``), the symlink refusal
when a table's staging is removed (``TableLayout.remove_staging``) and the partition
check that reads a staged file's values (``iceberg_partitions``).  Real delta-rs, real
pyiceberg on its SQL catalog, Parquet written by pyarrow into staging as a job writes
it.  docs/mutation.md ("Listed survivors of the issue") has the mutants and how each was checked.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake

from airflow_tpc import TxnState
from airflow_tpc.tables import DeltaSink, TableSchemaError
from airflow_tpc.tables.scope import Scope

from ..core.helpers import full_tree, local_tree
from .conftest import rows as epoch_rows
from .conftest import write_parquet
from .test_iceberg_scope import day, events, foreign, scoped  # noqa: F401 (fixtures)

DAY20 = day(20)  # ts >= '2026-11-20T00:00:00' AND ts < '2026-11-21T00:00:00'


def ts_rows(pairs: list[tuple[int, dt.datetime | None]]) -> pa.Table:
    """Rows of the owner's unpartitioned table: id, value, ts."""
    return pa.table({"id": pa.array([i for i, _ in pairs], pa.int64()),
                     "value": pa.array([f"v{i}" for i, _ in pairs], pa.string()),
                     "ts": pa.array([t for _, t in pairs], pa.timestamp("us"))})


def at(d: int, hour: int = 12) -> dt.datetime:
    return dt.datetime(2026, 11, d, hour)


#: (replace_where, staged rows a proof from the footer must refuse, the mutant it kills).
#: Every case also stages ``ok.parquet``, inside the predicate: that one passes.
OUTSIDE = {
    # ``and`` read as ``or``: ts < the 21st holds for every row, ts >= the 20th does not.
    "and-as-or": (DAY20, [(20, at(20)), (21, at(19))]),
    # a null ts is not selected by the predicate; the bounds skip nulls.
    "nulls-ignored": (DAY20, [(20, at(20)), (21, None)]),
    # the upper bound is exclusive: midnight of the 21st lies outside.
    "inclusive-upper": (DAY20, [(20, at(20)), (21, dt.datetime(2026, 11, 21))]),
    # id 2 lies between the listed ids: bounds 1..3 prove nothing for IN.
    "in-without-equal-bounds": ("id IN (1, 3)", [(1, at(20)), (2, at(20)), (3, at(20))]),
}
INSIDE = {"and-as-or": [(30, at(20, 1))], "nulls-ignored": [(30, at(20, 1))],
          "inclusive-upper": [(30, at(20, 23))], "in-without-equal-bounds": [(3, at(20))]}


@pytest.fixture()
def delta_table(tmp_path) -> str:
    """The owner's Delta table, unpartitioned, one file of day 19 and one of day 20."""
    path = str(tmp_path / "events")
    write_deltalake(path, ts_rows([(1, at(19)), (2, at(19, 13))]), mode="append")
    write_deltalake(path, ts_rows([(3, at(20)), (4, at(20, 13))]), mode="append")
    return path


@pytest.mark.parametrize("case", sorted(OUTSIDE))
def test_delta_unpartitioned_replace_where_refuses_a_file_with_rows_outside(delta_table, case):
    where, outside = OUTSIDE[case]
    version = DeltaTable(delta_table).version()
    sink = DeltaSink(f"delta+file://{delta_table}", "events", replace_where=where)
    txn = sink.begin("2026-11-20")
    write_parquet(sink, txn, "ok.parquet", ts_rows(INSIDE[case]))
    write_parquet(sink, txn, "outside.parquet", ts_rows(outside))
    before = full_tree(sink)
    with pytest.raises(TableSchemaError, match="outside.parquet lies in partition") as exc:
        sink.precommit(txn)
    assert "ok.parquet" not in str(exc.value)
    assert full_tree(sink) == before
    assert DeltaTable(delta_table).version() == version
    assert sink.describe("2026-11-20")[0].state is TxnState.OPEN


@pytest.mark.parametrize("catalog_props", ["sql"], indirect=True)
@pytest.mark.parametrize("case", sorted(OUTSIDE))
def test_iceberg_unpartitioned_replace_where_refuses_a_file_with_rows_outside(
        foreign, scoped, case):  # noqa: F811 (fixtures)
    where, outside = OUTSIDE[case]
    table = foreign("none", events(19, [1, 2]), events(20, [3, 4]))
    sink = scoped(replace_where=where)
    txn = sink.begin("2026-11-20")
    write_parquet(sink, txn, "ok.parquet", ts_rows(INSIDE[case]))
    write_parquet(sink, txn, "outside.parquet", ts_rows(outside))
    before = full_tree(sink)
    with pytest.raises(TableSchemaError, match="outside.parquet: its statistics do not "
                                               "prove every row inside") as exc:
        sink.precommit(txn)
    assert "ok.parquet" not in str(exc.value)
    assert full_tree(sink) == before
    assert [s.snapshot_id for s in sink.table_target.load_table().snapshots()] \
        == [s.snapshot_id for s in table.snapshots()]


# ------------------------------------------ the partition check reads every file
def _unreadable_values(table: pa.Table) -> bytes:
    """A Parquet file whose footer (and its statistics) is intact but whose ``id``
    pages are not: a torn or corrupted write that footers alone do not reveal."""
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="none", use_dictionary=False)
    data = bytearray(sink.getvalue().to_pybytes())
    md = pq.read_metadata(pa.BufferReader(bytes(data)))
    column = md.row_group(0).column(md.schema.to_arrow_schema().names.index("id"))
    start = column.data_page_offset
    data[start:start + column.total_compressed_size] = b"\xff" * column.total_compressed_size
    with pytest.raises(Exception):  # noqa: B017 - whatever pyarrow calls it: unreadable
        pq.read_table(pa.BufferReader(bytes(data)), columns=["id"])
    assert pq.read_metadata(pa.BufferReader(bytes(data))).num_rows == table.num_rows
    return bytes(data)


@pytest.mark.parametrize("catalog_props", ["sql"], indirect=True)
def test_a_staged_file_whose_partition_values_cannot_be_read_is_refused(
        foreign, scoped):  # noqa: F811 (fixtures)
    """``bucket(4, id)``: min/max cannot place a file, so its ids are read; a file they
    cannot be read from is refused at pre-commit, naming it, and nothing changes."""
    table = foreign("bucket", events(19, [1, 2, 3]))
    sink = scoped(replace_where=DAY20)
    txn = sink.begin("2026-11-20")
    write_parquet(sink, txn, "ok.parquet", events(20, [4]))
    write_parquet(sink, txn, "torn.parquet", events(20, [5]))
    path = sink.storage.join(sink.layout.staging(txn.epoch, txn.attempt), "torn.parquet")
    sink.storage.put(path, _unreadable_values(events(20, [5])))
    before = full_tree(sink)
    with pytest.raises(TableSchemaError, match="torn.parquet: its partition columns cannot "
                                               "be read") as exc:
        sink.precommit(txn)
    assert "ok.parquet" not in str(exc.value)
    assert full_tree(sink) == before
    assert [s.snapshot_id for s in sink.table_target.load_table().snapshots()] \
        == [s.snapshot_id for s in table.snapshots()]


# ------------------------------------- removing a table's staging through a symlink
def test_superseded_staging_that_holds_a_symlink_is_kept_and_old_versions_stay_readable(
        tmp_path):
    """TableLayout.remove_staging: a superseded attempt whose files retained versions
    still reference keeps them; if its staging holds a symlink (a folder of it swapped
    for a link to a copy elsewhere, after the commit) nothing of it is removed: deleting
    the link would take files from under the table's retained version."""
    path = str(tmp_path / "events")
    sink = DeltaSink(f"delta+file://{path}", "events")
    txn = sink.begin("5")
    write_parquet(sink, txn, "a.parquet", epoch_rows("5", [1]))
    write_parquet(sink, txn, "sub/b.parquet", epoch_rows("5", [2]))
    sink.commit(txn, expected_digest=sink.precommit(txn).digest)
    first = DeltaTable(path).version()
    staging = sink.layout.staging("5", 1)
    outside = str(tmp_path / "elsewhere")
    shutil.copytree(os.path.join(staging, "sub"), outside)
    shutil.rmtree(os.path.join(staging, "sub"))
    os.symlink(outside, os.path.join(staging, "sub"))
    before = local_tree(staging)

    again = DeltaSink(f"delta+file://{path}", "events")
    txn2 = again.begin("5")
    write_parquet(again, txn2, "c.parquet", epoch_rows("5", [3]))
    assert again.commit(txn2, expected_digest=again.precommit(txn2).digest).outcome \
        == "committed"
    assert sorted(DeltaTable(path).to_pyarrow_table()["id"].to_pylist()) == [3]
    assert local_tree(staging) == before, "the superseded staging was changed"
    old = DeltaTable(path, version=first).to_pyarrow_table()
    assert sorted(old["id"].to_pylist()) == [1, 2]
    assert local_tree(outside) != {}


# ------------------------------------------ NaN: a float column's bounds prove nothing
NAN = float("nan")


def xs(pairs: list[tuple[int, float]]) -> pa.Table:
    return pa.table({"id": pa.array([i for i, _ in pairs], pa.int64()),
                     "x": pa.array([x for _, x in pairs], pa.float64())})


def test_delta_replace_where_over_a_float_column_refuses_a_staged_nan(tmp_path):
    """Parquet's min/max skip NaN: a file of 2.0 and NaN has bounds 2.0..2.0, which
    "proved" ``x < 5`` though its NaN row is not selected by it, and the row was
    published (found beside the null-count mutant; fixed in ``scope.proves``).  A
    footer holds no NaN count, so a comparison of a float column is never proven: one
    clear refusal that says so, nothing changed."""
    path = str(tmp_path / "events")
    write_deltalake(path, xs([(1, 1.0), (3, 7.0)]), mode="append")
    version = DeltaTable(path).version()
    sink = DeltaSink(f"delta+file://{path}", "events", replace_where="x < 5")
    txn = sink.begin("e1")
    write_parquet(sink, txn, "nan.parquet", xs([(10, 2.0), (11, NAN)]))
    before = full_tree(sink)
    with pytest.raises(TableSchemaError, match="nan.parquet lies in partition .* x is a "
                                               "floating-point column: Parquet's bounds "
                                               "skip NaN"):
        sink.precommit(txn)
    assert full_tree(sink) == before
    assert DeltaTable(path).version() == version


def test_delta_never_takes_a_table_file_with_a_nan_as_wholly_inside(tmp_path):
    """A file of the table whose log bounds (1.0..1.0: NaN skipped) lie inside ``x < 5``
    but which holds a NaN row is not "inside" (removed whole, the owner's NaN row
    lost): it is unknown, so its rows are read (``delta_rewrite``)."""
    path = str(tmp_path / "events")
    write_deltalake(path, xs([(1, 1.0), (2, NAN)]), mode="append")
    actions = pa.table(DeltaTable(path).get_add_actions(flatten=True))
    bounds = {"x": (actions["min.x"][0].as_py(), actions["max.x"][0].as_py(),
                    actions["null_count.x"][0].as_py())}
    assert bounds == {"x": (1.0, 1.0, 0)}  # what the log says of the file
    sink = DeltaSink(f"delta+file://{path}", "events", replace_where="x < 5")
    scope = sink.table_target.scope_for(DeltaTable(path), Scope.of("x < 5"))
    assert scope.classify(2, {}, bounds) == "unknown"
    assert scope.classify(2, {}, {"x": (7.0, 9.0, 0)}) == "unknown"  # nor wholly outside


@pytest.mark.parametrize("catalog_props", ["sql"], indirect=True)
def test_iceberg_replace_where_over_a_float_column_refuses_a_staged_nan(
        catalog_props, scoped):  # noqa: F811 (fixtures)
    from pyiceberg.catalog import load_catalog

    from .conftest import TABLE

    catalog = load_catalog("local", **catalog_props)
    catalog.create_namespace_if_not_exists("analytics")
    table = catalog.create_table(TABLE, schema=xs([(1, 1.0)]).schema)
    table.append(xs([(1, 1.0), (3, 7.0)]))
    sink = scoped(replace_where="x < 5")
    txn = sink.begin("e1")
    write_parquet(sink, txn, "nan.parquet", xs([(10, 2.0), (11, NAN)]))
    before = full_tree(sink)
    with pytest.raises(TableSchemaError, match="nan.parquet: its statistics do not prove "
                                               ".* x is a floating-point column"):
        sink.precommit(txn)
    assert full_tree(sink) == before
