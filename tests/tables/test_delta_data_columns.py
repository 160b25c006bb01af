"""Delta's ``replaceWhere`` over data columns: an epoch owns the rows a predicate over
ordinary columns selects (``ts >= '…' AND ts < '…'``), in a table partitioned any way
or not at all.  Files wholly inside are removed, wholly outside kept, and files holding
both are rewritten without the predicate's rows — all in the epoch's one Delta commit.

Real delta-rs: the owner's table is written by ``write_deltalake`` (a foreign writer),
one file per batch, so each file's rows are known; every state is read by delta-rs and
by DuckDB's own ``delta_scan``.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake

from airflow_tpc import TxnState
from airflow_tpc.core.faults import InjectedCrash, armed
from airflow_tpc.tables import TableSchemaError

from ..core.helpers import full_tree
from .conftest import commit_epoch as commit
from .conftest import write_parquet
from .test_delta_scope import ids, sink_of  # the same sink and the same two readers

DAY20 = "ts >= '2026-11-20T00:00:00' AND ts < '2026-11-21T00:00:00'"


def at(d: int, hour: int = 12, micro: int = 0) -> dt.datetime:
    return dt.datetime(2026, 11, d, hour, 0, 0, micro)


def rows(pairs: list[tuple[int, dt.datetime | None]]) -> pa.Table:
    return pa.table({"id": pa.array([i for i, _ in pairs], pa.int64()),
                     "value": pa.array([f"v{i}" for i, _ in pairs], pa.string()),
                     "ts": pa.array([t for _, t in pairs], pa.timestamp("us"))})


#: The owner's files (one per foreign commit), by what day 20's predicate makes of them.
FILES = {
    "outside": [(1, at(19)), (2, at(19, 13))],
    "inside": [(3, at(20)), (4, at(20, 13))],
    "mixed": [(5, at(20)), (6, at(21))],
    "around": [(7, at(19)), (8, at(21))],  # bounds span day 20, no row in it
    "null": [(9, None), (10, at(20))],  # a null ts is not selected: it stays
}


@pytest.fixture()
def table(tmp_path):
    path = str(tmp_path / "events")
    for pairs in FILES.values():
        write_deltalake(path, rows(pairs), mode="append")
    return path


def files(path: str) -> dict[str, list[int]]:
    """The table's current files and the ids each holds."""
    listed = pa.table(DeltaTable(path).get_add_actions(flatten=True))["path"].to_pylist()
    return {f: sorted(pq.read_table(f"{path}/{f}")["id"].to_pylist()) for f in listed}


def owner_file(path: str, first_id: int) -> str:
    return next(f for f, got in files(path).items() if got and got[0] == first_id)


def test_an_epoch_replaces_exactly_the_rows_its_predicate_selects(table):
    around = owner_file(table, 7)
    outside = owner_file(table, 1)
    result, _ = commit(sink_of(table, replace_where=DAY20), "2026-11-20",
                       {"a.parquet": rows([(20, at(20, 1)), (21, at(20, 2))])})
    assert result.outcome == "committed"
    assert ids(table) == [1, 2, 6, 7, 8, 9, 20, 21]
    now = files(table)
    # Wholly outside: untouched (also the file whose bounds span the day, once its rows
    # were read).  Mixed: rewritten beside the old file with the rows outside only.
    assert now[outside] == [1, 2] and now[around] == [7, 8]
    rewritten = sorted(got for f, got in now.items() if "part-tpc-rewrite-" in f)
    assert rewritten == [[6], [9]]
    history = DeltaTable(table).history(1)[0]
    assert history["airflow-tpc.epoch"] == "2026-11-20"

    # A rerun replaces its own rows again: our files (statistics from their footers)
    # are wholly inside; nothing else is rewritten.
    commit(sink_of(table, replace_where=DAY20), "2026-11-20",
           {"b.parquet": rows([(30, at(20, 5))])})
    assert ids(table) == [1, 2, 6, 7, 8, 9, 30]
    assert sorted(got for f, got in files(table).items() if "part-tpc-rewrite-" in f) \
        == [[6], [9]]


def test_a_maximum_the_log_truncated_to_milliseconds_is_not_trusted(tmp_path):
    """Delta keeps timestamp statistics in milliseconds: a file whose last row is at
    23:59:59.999500 has a logged maximum of 23:59:59.999.  Trusted as is, a predicate
    from 23:59:59.999200 would call the file wholly outside and keep a row it selects."""
    path = str(tmp_path / "ms")
    write_deltalake(path, rows([(1, at(19)), (2, dt.datetime(2026, 11, 19, 23, 59, 59, 999500))]))
    logged = DeltaTable(path).get_add_actions(flatten=True)
    assert pa.table(logged)["max.ts"].to_pylist() == [dt.datetime(2026, 11, 19, 23, 59, 59,
                                                                   999000)]
    where = "ts >= '2026-11-19T23:59:59.999200' AND ts < '2026-11-20T00:00:00'"
    commit(sink_of(path, replace_where=where), "tail",
           {"a.parquet": rows([(3, dt.datetime(2026, 11, 19, 23, 59, 59, 999300))])})
    assert ids(path) == [1, 3]


def test_staged_rows_outside_the_predicate_are_refused_and_nothing_changes(table):
    version = DeltaTable(table).version()
    sink = sink_of(table, replace_where=DAY20)
    txn = sink.begin("2026-11-20")
    write_parquet(sink, txn, "ok.parquet", rows([(20, at(20))]))
    write_parquet(sink, txn, "late.parquet", rows([(21, at(20)), (22, at(21))]))
    write_parquet(sink, txn, "nulls.parquet", rows([(23, None)]))
    before = full_tree(sink)  # ledger, staging, log and data files, byte for byte
    with pytest.raises(TableSchemaError) as exc:
        sink.precommit(txn)
    assert full_tree(sink) == before
    assert "late.parquet lies in partition {}, or its statistics of ts, outside " \
        f"replace_where {DAY20!r}" in str(exc.value)
    assert "nulls.parquet" in str(exc.value) and "ok.parquet" not in str(exc.value)
    assert DeltaTable(table).version() == version
    assert sink.describe("2026-11-20")[0].state is TxnState.OPEN


@pytest.mark.parametrize("step", ["delta.after_rewrite", "delta.after_table_commit",
                                  "promote.before_marker"])
def test_a_crash_at_each_step_rolls_forward_to_one_commit(table, step):
    sink = sink_of(table, replace_where=DAY20)
    txn = sink.begin("2026-11-20")
    write_parquet(sink, txn, "a.parquet", rows([(20, at(20))]))
    manifest = sink.precommit(txn)
    with armed(step), pytest.raises(InjectedCrash):
        sink.commit(txn, expected_digest=manifest.digest)
    sink_of(table, replace_where="ts IS NULL").recover()  # the decided predicate applies
    assert sink_of(table, replace_where=DAY20).commit(txn).outcome == "already_committed"
    assert ids(table) == [1, 2, 6, 7, 8, 9, 20]
    # The rewrite wrote each new file once, under a name fixed by the transaction.
    data = [p.name for p in Path(table).glob("part-tpc-rewrite-*")]
    assert len(data) == 2, data
    assert sum(h.get("operation") == "WRITE" and "airflow-tpc.epoch" in h
               for h in DeltaTable(table).history()) == 1


def test_a_foreign_commit_after_the_rewrite_is_rewritten_too(table):
    """The decision is taken, the mixed files rewritten, then the process dies; another
    writer appends a file holding day 20 and day 22.  The roll-forward reloads the
    table and replaces day 20 in that file as well."""
    sink = sink_of(table, replace_where=DAY20)
    txn = sink.begin("2026-11-20")
    write_parquet(sink, txn, "a.parquet", rows([(20, at(20))]))
    manifest = sink.precommit(txn)
    with armed("delta.after_rewrite"), pytest.raises(InjectedCrash):
        sink.commit(txn, expected_digest=manifest.digest)
    write_deltalake(table, rows([(40, at(20)), (41, at(22))]), mode="append")
    sink_of(table, replace_where=DAY20).recover()
    assert ids(table) == [1, 2, 6, 7, 8, 9, 20, 41]


def test_several_partition_columns_bind_each_to_its_own_column(tmp_path):
    """A table partitioned by (day, region): the predicate names both, and each
    literal is compared with its own column (not all with one)."""
    path = str(tmp_path / "regions")

    def part(day: str, region: str, id_: int) -> pa.Table:
        return pa.table({"id": pa.array([id_], pa.int64()), "day": [day], "region": [region]})

    write_deltalake(path, pa.concat_tables([part("2026-11-20", "eu", 1),
                                            part("2026-11-20", "us", 2),
                                            part("2026-11-21", "eu", 3)]),
                    partition_by=["day", "region"])
    commit(sink_of(path, replace_where={"day": "2026-11-20", "region": "eu"}), "eu-20",
           {"a.parquet": part("2026-11-20", "eu", 10)})
    assert ids(path) == [2, 3, 10]
