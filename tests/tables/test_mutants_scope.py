"""Issue 32 §3: surviving mutants of the replace_where checks (``tables/scope.py``,
``tables/delta_scope.py``), killed with real delta-rs tables.

``scope.nan_note`` says, in a refusal, which compared columns are floating-point
(their Parquet bounds skip NaN, so they never prove a comparison): the refusals checked
only one column at the top of the predicate, so a note that lost a column below an
``AND``, ``OR`` or ``NOT``, or was added where no float column is compared, survived.
Each case below stages a file the predicate's proof must refuse and checks the whole
refusal's tail, and that nothing changed.  (mutmut's test selection in pyproject.toml
does not include this file; docs/mutation.md, "Run of the group modules", says how its
kills were checked.)
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from airflow_tpc.tables import DeltaSink, TableSchemaError

from ..core.helpers import full_tree
from .conftest import write_parquet

NAN = float("nan")
NOTE = ("is a floating-point column: Parquet's bounds skip NaN, so they never prove a "
        "comparison of it (compare a column of another type))")


def table(rows: list[tuple[int, float, float]]) -> pa.Table:
    """id (long), x (double), y (float): two floating-point columns of two widths."""
    return pa.table({"id": pa.array([r[0] for r in rows], pa.int64()),
                     "x": pa.array([r[1] for r in rows], pa.float64()),
                     "y": pa.array([r[2] for r in rows], pa.float32())})


def refusal(tmp_path, where: str, staged: list[tuple[int, float, float]]) -> str:
    """The precommit refusal of ``staged`` under ``where``; nothing changed by it."""
    path = str(tmp_path / "events")
    write_deltalake(path, table([(1, 1.0, 1.0), (2, 7.0, 7.0)]), mode="append")
    version = DeltaTable(path).version()
    sink = DeltaSink(f"delta+file://{path}", "events", replace_where=where)
    txn = sink.begin("e1")
    write_parquet(sink, txn, "staged.parquet", table(staged))
    before = full_tree(sink)
    with pytest.raises(TableSchemaError) as err:
        sink.precommit(txn)
    assert full_tree(sink) == before and DeltaTable(path).version() == version
    return str(err.value)


@pytest.mark.parametrize(("where", "names"), [
    ("x < 5 AND y < 5", "x, y"),            # both sides of an AND, sorted
    ("id > 0 AND (y < 5 OR x < 5)", "x, y"),  # under an OR on the right
    ("NOT (y >= 5)", "y"),                  # under a NOT (its child)
    ("x < 5 AND id > 0", "x"),              # the long column is no float
])
def test_a_refusal_names_every_floating_point_column_it_compares(tmp_path, where, names):
    message = refusal(tmp_path, where, [(10, 2.0, 2.0), (11, NAN, NAN)])
    assert f"or keeps no bounds to prove otherwise; {names} {NOTE}. Nothing was decided" \
        in message, message


def test_a_refusal_over_other_columns_carries_no_floating_point_note(tmp_path):
    message = refusal(tmp_path, "id < 5", [(3, 2.0, 2.0), (30, 2.0, 2.0)])
    assert "(it holds rows of another epoch, or keeps no bounds to prove otherwise). " \
        "Nothing was decided" in message, message
    assert "floating-point" not in message


def test_a_rewrite_in_a_partitioned_table_keeps_its_rows_in_their_partition(tmp_path):
    """A file of partition ``eu`` holds rows inside (x=1) and outside (x=7) of
    ``region = 'eu' AND x < 5``: it is rewritten without x=1.  Delta's files leave the
    partition column out, so the rewrite adds it back, typed as the table's column
    (``DeltaScope.partition_type``; no test reached it before)."""
    from .conftest import commit_epoch as commit
    from .test_delta_scope import ids, sink_of

    path = str(tmp_path / "regions")

    def part(region: str, pairs: list[tuple[int, int]]) -> pa.Table:
        return pa.table({"id": pa.array([i for i, _ in pairs], pa.int64()),
                         "x": pa.array([x for _, x in pairs], pa.int64()),
                         "region": [region] * len(pairs)})

    write_deltalake(path, part("eu", [(1, 1), (2, 7)]), partition_by=["region"])
    write_deltalake(path, part("us", [(3, 1)]), partition_by=["region"], mode="append")
    commit(sink_of(path, replace_where="region = 'eu' AND x < 5"), "eu-small",
           {"a.parquet": part("eu", [(10, 2)])})
    assert ids(path) == [2, 3, 10]
    got = DeltaTable(path).to_pyarrow_table().sort_by("id").to_pylist()
    assert got == [{"id": 2, "x": 7, "region": "eu"}, {"id": 3, "x": 1, "region": "us"},
                   {"id": 10, "x": 2, "region": "eu"}]


def test_is_null_is_proved_only_by_a_file_whose_every_row_is_null(tmp_path):
    """``IS NULL`` holds for a file only when its null count is its row count
    (``scope.proves``): a file with one non-null value among nulls is refused, a file of
    nulls only is accepted.  (A mutation run found ``==`` turned into ``!=`` unnoticed:
    then the mixed file is published inside a predicate one of its rows fails.)"""
    message = refusal(tmp_path / "mixed", "id IS NULL",
                      [(None, 2.0, 2.0), (5, 2.0, 2.0)])  # type: ignore[list-item]
    assert "Nothing was decided" in message
    path = str(tmp_path / "nulls" / "events")
    write_deltalake(path, table([(1, 1.0, 1.0)]), mode="append")
    sink = DeltaSink(f"delta+file://{path}", "events", replace_where="id IS NULL")
    txn = sink.begin("e1")
    write_parquet(sink, txn, "staged.parquet",
                  table([(None, 2.0, 2.0), (None, 3.0, 3.0)]))  # type: ignore[list-item]
    manifest = sink.precommit(txn)
    assert manifest.total_files == 1


def test_a_staged_file_whose_footer_keeps_no_bounds_of_a_compared_column_is_refused(tmp_path):
    """A row group whose statistics of a compared column have no min/max (Parquet
    writers drop them for long strings) proves nothing: ``DeltaScope.footer_bounds``
    gives that column unknown bounds and the staged file is refused with the proof's
    message, nothing changed (a mutant that returned nothing there was not noticed)."""
    path = str(tmp_path / "events")
    write_deltalake(path, pa.table({"id": pa.array([1], pa.int64()),
                                    "name": pa.array(["b"])}), mode="append")
    version = DeltaTable(path).version()
    sink = DeltaSink(f"delta+file://{path}", "events", replace_where="name = 'b'")
    txn = sink.begin("e1")
    long = "b" * 10_000  # no min/max kept for it: the bounds are unknown, not 'b'..'b'
    write_parquet(sink, txn, "staged.parquet",
                  pa.table({"id": pa.array([2, 3], pa.int64()), "name": pa.array(["b", long])}))
    before = full_tree(sink)
    with pytest.raises(TableSchemaError) as err:
        sink.precommit(txn)
    assert "outside replace_where \"name = 'b'\"" in str(err.value)
    assert "keeps no bounds to prove otherwise" in str(err.value)
    assert full_tree(sink) == before and DeltaTable(path).version() == version


def test_a_column_without_bounds_leaves_the_other_columns_proof_standing(tmp_path):
    """The footer's bounds are per column: ``name`` keeping no min/max must not cost
    ``id`` its bounds, so ``name = 'b' OR id = 2`` is proved by ``id`` alone and the
    staged file is accepted (a mutant that gave up on every column did refuse it)."""
    path = str(tmp_path / "events")
    write_deltalake(path, pa.table({"id": pa.array([1], pa.int64()),
                                    "name": pa.array(["b"])}), mode="append")
    sink = DeltaSink(f"delta+file://{path}", "events", replace_where="name = 'b' OR id = 2")
    txn = sink.begin("e1")
    write_parquet(sink, txn, "staged.parquet",
                  pa.table({"id": pa.array([2, 2], pa.int64()),
                            "name": pa.array(["b", "c" * 10_000])}))
    assert sink.precommit(txn).total_files == 1


def test_a_delta_partition_column_of_another_type_is_refused_by_name(tmp_path):
    """``DeltaScope`` refuses a table partitioned by a column whose type it cannot write
    partition values of (a double here), naming the column and its type, nothing
    changed (``__post_init____mutmut_11``: the refusal's text lost)."""
    path = str(tmp_path / "events")
    write_deltalake(path, table([(1, 1.0, 1.0)]), mode="append", partition_by=["x"])
    version = DeltaTable(path).version()
    sink = DeltaSink(f"delta+file://{path}", "events", replace_where="x = 1.0")
    txn = sink.begin("e1")
    write_parquet(sink, txn, "staged.parquet", table([(2, 1.0, 1.0)]))
    before = full_tree(sink)
    with pytest.raises(TableSchemaError) as err:
        sink.precommit(txn)
    assert ("partition column 'x' is double: airflow-tpc adds files to Delta partitions "
            "of strings, integers, booleans and dates only") in str(err.value)
    assert full_tree(sink) == before and DeltaTable(path).version() == version


def test_a_staged_file_written_without_statistics_is_refused_with_the_proofs_message(
        tmp_path):
    """A writer may keep no column statistics at all (``write_statistics=False``): every
    row group's statistics are then missing, the bounds unknown, and the staged file is
    refused by the proof with nothing changed — not a library error (a mutant that read
    the null count of missing statistics raised ``AttributeError`` there)."""
    import pyarrow.parquet as pq

    path = str(tmp_path / "events")
    write_deltalake(path, pa.table({"id": pa.array([1], pa.int64())}), mode="append")
    version = DeltaTable(path).version()
    sink = DeltaSink(f"delta+file://{path}", "events", replace_where="id = 2")
    txn = sink.begin("e1")
    staged = sink.storage.join(sink.layout.staging(txn.epoch, txn.attempt), "staged.parquet")
    sink.storage.put(staged, b"")  # the folders, as the store makes them
    pq.write_table(pa.table({"id": pa.array([2, 2], pa.int64())}), staged,
                   write_statistics=False)
    assert pq.ParquetFile(staged).metadata.row_group(0).column(0).statistics is None
    before = full_tree(sink)
    with pytest.raises(TableSchemaError) as err:
        sink.precommit(txn)
    assert "staged.parquet lies in partition {}, or its statistics of id, outside " \
        "replace_where 'id = 2'" in str(err.value)
    assert "keeps no bounds to prove otherwise" in str(err.value)
    assert full_tree(sink) == before and DeltaTable(path).version() == version


def test_refusals_of_a_file_outside_a_partitioned_tables_predicate_say_which_partition(
        tmp_path):
    """``DeltaScope.partition_of``: a file lacking a partition column that the
    predicate does not fix is refused naming the column and what to do; a file in
    another partition than a predicate over partition columns only is refused naming
    that partition alone (no "statistics of" clause: there are no data columns)."""
    path = str(tmp_path / "regions")
    rows = pa.table({"id": pa.array([1], pa.int64()), "region": pa.array(["eu"])})
    write_deltalake(path, rows, mode="append", partition_by=["region"])
    sink = DeltaSink(f"delta+file://{path}", "events", replace_where="region IN ('eu', 'us')")
    txn = sink.begin("e1")
    write_parquet(sink, txn, "no_region.parquet", pa.table({"id": pa.array([2], pa.int64())}))
    with pytest.raises(TableSchemaError) as err:
        sink.precommit(txn)
    assert "no_region.parquet has no column 'region' (a partition column of the table) and " \
        "replace_where does not fix it with an equality: write the column, or name its " \
        "value in replace_where" in str(err.value)

    sink = DeltaSink(f"delta+file://{path}", "events", replace_where="region = 'eu'")
    txn = sink.begin("e2")
    write_parquet(sink, txn, "us.parquet", pa.table({"id": pa.array([3], pa.int64()),
                                                     "region": pa.array(["us"])}))
    with pytest.raises(TableSchemaError) as err:
        sink.precommit(txn)
    assert "us.parquet lies in partition {'region': 'us'} outside replace_where " \
        "\"region = 'eu'\" (it holds rows" in str(err.value)
