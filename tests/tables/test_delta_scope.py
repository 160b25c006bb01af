"""Existing Delta tables of their own partitioning: ``replace_where`` over partition
columns (Delta's replaceWhere, whole files) and ``mode="append"`` (over data columns:
test_delta_data_columns.py).  Real delta-rs, a
table made by a "foreign" writer (``write_deltalake``, partitioned by ``day``), every
state read by delta-rs and by DuckDB's own ``delta_scan``."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from airflow_tpc import TxnState
from airflow_tpc.core.faults import InjectedCrash, armed
from airflow_tpc.tables import DeltaSink, TableSchemaError
from tests.duckdb_readers import duckdb_rows

from ..core.helpers import full_tree
from .conftest import commit_epoch as commit
from .conftest import write_parquet


def events(d: int, ids: list[int], with_day: bool = True) -> pa.Table:
    cols = {"id": pa.array(ids, pa.int64()),
            "value": pa.array([f"v{i}" for i in ids], pa.string())}
    if with_day:
        cols["day"] = pa.array([dt.date(2026, 11, d)] * len(ids), pa.date32())
    return pa.table(cols)


@pytest.fixture()
def table(tmp_path):
    """The owner's table: partitioned by day, two days of rows."""
    path = str(tmp_path / "events")
    write_deltalake(path, pa.concat_tables([events(19, [1, 2]), events(20, [3, 4])]),
                    partition_by=["day"])
    return path


def sink_of(path: str, **kwargs) -> DeltaSink:
    return DeltaSink(f"delta+file://{path}", "events", **kwargs)


def ids(path: str) -> list[int]:
    """The table's ids by delta-rs, checked against DuckDB's own reader."""
    seen = sorted(DeltaTable(path).to_pyarrow_table()["id"].to_pylist())
    assert sorted(r[0] for r in duckdb_rows("delta", path, ["id"])) == seen
    return seen


def day_of(path: str) -> dict[int, str]:
    rows = DeltaTable(path).to_pyarrow_table().select(["id", "day"]).to_pylist()
    return {r["id"]: r["day"].isoformat() for r in rows}


def test_replace_where_on_the_partition_column_replaces_exactly_that_day(table):
    # Spark's partitionBy leaves the column out of the files: the equality fixes it.
    result, _ = commit(sink_of(table, replace_where={"day": "2026-11-20"}), "2026-11-20",
                       {"a.parquet": events(20, [30, 31], with_day=False)})
    assert result.outcome == "committed"
    assert ids(table) == [1, 2, 30, 31]
    assert day_of(table)[30] == "2026-11-20" and day_of(table)[1] == "2026-11-19"
    # A rerun replaces its own rows again; a file holding the column works the same.
    commit(sink_of(table, replace_where="day = '2026-11-20'"), "2026-11-20",
           {"b.parquet": events(20, [40])})
    assert ids(table) == [1, 2, 40]
    assert DeltaTable(table).metadata().partition_columns == ["day"]


def test_staged_rows_of_another_partition_are_refused_and_nothing_changes(table):
    version = DeltaTable(table).version()
    sink = sink_of(table, replace_where="day = '2026-11-20'")
    txn = sink.begin("2026-11-20")
    write_parquet(sink, txn, "ok.parquet", events(20, [7]))
    write_parquet(sink, txn, "wrong.parquet", events(21, [8]))
    write_parquet(sink, txn, "mixed.parquet", pa.concat_tables([events(20, [9]),
                                                                events(21, [10])]))
    before = full_tree(sink)  # ledger, staging, log and data files, byte for byte
    with pytest.raises(TableSchemaError) as exc:
        sink.precommit(txn)
    assert full_tree(sink) == before
    assert "wrong.parquet lies in partition" in str(exc.value)
    assert "mixed.parquet holds several values" in str(exc.value)
    assert "ok.parquet" not in str(exc.value)
    assert DeltaTable(table).version() == version
    assert sink.describe("2026-11-20")[0].state is TxnState.OPEN


def test_a_predicate_over_a_column_the_table_lacks_is_refused(table):
    sink = sink_of(table, replace_where="event_day = '2026-11-20'")
    txn = sink.begin("2026-11-20")
    write_parquet(sink, txn, "a.parquet", events(20, [10]))
    before = full_tree(sink)
    with pytest.raises(TableSchemaError, match="replace_where \"event_day = '2026-11-20'\" "
                       "does not fit the table's schema: Could not find field with name "
                       "event_day"):
        sink.precommit(txn)
    assert full_tree(sink) == before


@pytest.mark.parametrize("step", ["delta.before_table_commit", "delta.after_table_commit",
                                  "promote.before_marker"])
def test_append_adds_once_across_a_crash_at_each_step(table, step):
    sink = sink_of(table, mode="append")
    txn = sink.begin("2026-11-21")
    write_parquet(sink, txn, "a.parquet", events(21, [5, 6]))
    manifest = sink.precommit(txn)
    with armed(step), pytest.raises(InjectedCrash):
        sink.commit(txn, expected_digest=manifest.digest)
    sink_of(table, mode="append").recover()
    assert sink_of(table, mode="append").commit(txn).outcome == "already_committed"
    assert ids(table) == [1, 2, 3, 4, 5, 6]
    assert day_of(table)[5] == "2026-11-21"


def test_roll_forward_applies_the_decided_predicate(table):
    sink = sink_of(table, replace_where="day = '2026-11-20'")
    txn = sink.begin("2026-11-20")
    write_parquet(sink, txn, "a.parquet", events(20, [50]))
    sink.precommit(txn)
    with armed("delta.before_table_commit"), pytest.raises(InjectedCrash):
        sink.commit(txn)
    sink_of(table, replace_where="day = '2026-11-19'").recover()
    assert ids(table) == [1, 2, 50]


def test_append_makes_a_new_table_unpartitioned(tmp_path):
    path = str(tmp_path / "fresh")
    commit(sink_of(path, mode="append"), "1", {"a.parquet": events(20, [1])})
    assert DeltaTable(path).metadata().partition_columns == []
    assert ids(path) == [1]
    sink = sink_of(str(tmp_path / "none"), replace_where="day = '2026-11-20'")
    txn = sink.begin("2026-11-20")
    write_parquet(sink, txn, "a.parquet", events(20, [7]))
    with pytest.raises(TableSchemaError, match="needs an existing table"):
        sink.precommit(txn)
