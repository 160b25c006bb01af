"""Existing Iceberg tables of any partitioning: an epoch is a predicate (``replace_where``)
or an append (``mode="append"``).  Real pyiceberg, through the SQL catalog and the REST
catalog (SeaweedFS, ledger apart); tables made by a "foreign" writer with their own
partitioning (``days(ts)``, ``bucket(4, id)``, none) and their own data."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest
from pyiceberg.catalog import load_catalog
from pyiceberg.partitioning import PartitionField
from pyiceberg.transforms import BucketTransform, DayTransform

from airflow_tpc import TpcError, TxnState
from airflow_tpc.core.faults import InjectedCrash, armed
from airflow_tpc.core.records import DECISION
from airflow_tpc.tables import IcebergSink, TableSchemaError
from airflow_tpc.tables.iceberg import PROP_ATTEMPT, PROP_EPOCH
from airflow_tpc.tables.scope import Scope

from ..core.helpers import full_tree
from .conftest import TABLE, duckdb_ids, write_parquet
from .conftest import commit_epoch as commit

DAY = "ts >= '2026-11-{d}T00:00:00' AND ts < '2026-11-{e}T00:00:00'"


def day(d: int) -> str:
    return DAY.format(d=d, e=d + 1)


def events(d: int, ids: list[int]) -> pa.Table:
    """Rows of one day: id, value, ts (no epoch column: the table has none)."""
    base = dt.datetime(2026, 11, d, 6)
    return pa.table({"id": pa.array(ids, pa.int64()),
                     "value": pa.array([f"v{i}" for i in ids], pa.string()),
                     "ts": pa.array([base + dt.timedelta(minutes=i) for i in ids],
                                    pa.timestamp("us"))})


@pytest.fixture()
def foreign(catalog_props):
    """Make the table as its owner would: a spec of their choosing, rows of their own."""
    def make(spec: str, *batches: pa.Table):
        catalog = load_catalog("local", **catalog_props)
        catalog.create_namespace_if_not_exists("analytics")
        table = catalog.create_table(TABLE, schema=events(1, [0]).schema)
        schema = table.schema()
        fields = {"days": [PartitionField(schema.find_field("ts").field_id, 1000,
                                          DayTransform(), "ts_day")],
                  "bucket": [PartitionField(schema.find_field("id").field_id, 1000,
                                            BucketTransform(4), "id_bucket")],
                  "none": []}[spec]
        if fields:
            with table.update_spec() as update:
                for f in fields:
                    update.add_field(schema.find_field(f.source_id).name, f.transform, f.name)
        table = catalog.load_table(TABLE)
        for batch in batches:
            table.append(batch)
        return catalog.load_table(TABLE)
    return make


@pytest.fixture()
def scoped(catalog_props, sink_options):
    def make(namespace: str = "events", **kwargs) -> IcebergSink:
        return IcebergSink(f"iceberg://local/{TABLE}", namespace,
                           catalog_properties=catalog_props, **sink_options, **kwargs)
    return make


def ids(table) -> list[int]:
    """The table's ids as pyiceberg reads them, checked against DuckDB's own reader."""
    seen = sorted(table.scan().to_arrow()["id"].to_pylist())
    assert duckdb_ids(table) == seen
    return seen


def test_a_days_partitioned_table_replaces_exactly_the_epochs_rows(foreign, scoped):
    foreign("days", events(19, [1, 2]), events(20, [3, 4]), events(21, [5]))
    result, txn = commit(scoped(replace_where=day(20)), "2026-11-20",
                         {"a.parquet": events(20, [30, 31, 32])})
    assert result.outcome == "committed"
    table = scoped().table_target.load_table()
    assert ids(table) == [1, 2, 5, 30, 31, 32]
    decision = scoped().ledger.read("2026-11-20", 1, DECISION)
    assert decision.scope == {"kind": "where", "where": day(20)}
    # A rerun replaces its own rows again: the epoch's rows are the rerun's only.
    commit(scoped(replace_where=day(20)), "2026-11-20", {"b.parquet": events(20, [40])})
    table = scoped().table_target.load_table()
    assert ids(table) == [1, 2, 5, 40]
    ours = [s for s in table.snapshots() if s.summary[PROP_EPOCH] == "2026-11-20"]
    assert {s.summary[PROP_ATTEMPT] for s in ours} == {"1", "2"}


def test_staged_rows_outside_the_predicate_are_refused_and_nothing_changes(foreign, scoped):
    table = foreign("days", events(20, [3]))
    sink = scoped(replace_where=day(20))
    txn = sink.begin("2026-11-20")
    write_parquet(sink, txn, "ok.parquet", events(20, [7]))
    write_parquet(sink, txn, "straddles.parquet",
                  pa.concat_tables([events(20, [8]), events(21, [9])]))
    before = full_tree(sink)  # ledger, staging, table files and metadata, byte for byte
    with pytest.raises(TableSchemaError, match="straddles.parquet") as exc:
        sink.precommit(txn)
    assert full_tree(sink) == before
    assert "ok.parquet" not in str(exc.value)
    assert sink.describe("2026-11-20")[0].state is TxnState.OPEN
    assert [s.snapshot_id for s in sink.table_target.load_table().snapshots()] \
        == [s.snapshot_id for s in table.snapshots()]


def test_a_bucket_partitioned_table_takes_one_file_per_bucket(foreign, scoped):
    from pyiceberg.transforms import BucketTransform
    from pyiceberg.types import LongType

    foreign("bucket", events(19, [1, 2, 3]), events(20, [4, 5, 6]))
    bucket = BucketTransform(4).transform(LongType())
    by_bucket: dict[int, list[int]] = {}
    for i in range(10, 30):
        by_bucket.setdefault(bucket(i), []).append(i)
    files = {f"b{b}.parquet": events(20, sorted(v)) for b, v in by_bucket.items()}
    commit(scoped(replace_where=day(20)), "2026-11-20", files)
    assert ids(scoped().table_target.load_table()) == [1, 2, 3, *range(10, 30)]
    # A file spanning buckets cannot be added as it is: refused, naming the spec.
    sink = scoped(replace_where=day(20))
    txn = sink.begin("2026-11-20")
    write_parquet(sink, txn, "mixed.parquet", events(20, list(range(40, 50))))
    with pytest.raises(TableSchemaError, match="one partition of the table's spec"):
        sink.precommit(txn)


def test_an_unpartitioned_table_keeps_the_other_rows_of_a_mixed_file(foreign, scoped):
    """A foreign file holds days 19 and 20: the epoch's rows leave it (Iceberg rewrites
    the file without them), the day-19 rows stay."""
    foreign("none", pa.concat_tables([events(19, [1, 2]), events(20, [3, 4])]))
    commit(scoped(replace_where=day(20)), "2026-11-20", {"a.parquet": events(20, [9])})
    assert ids(scoped().table_target.load_table()) == [1, 2, 9]


def test_roll_forward_applies_the_decided_predicate_not_the_recovering_sinks(foreign,
                                                                            scoped):
    foreign("days", events(20, [3]), events(21, [5]))
    sink = scoped(replace_where=day(20))
    txn = sink.begin("2026-11-20")
    write_parquet(sink, txn, "a.parquet", events(20, [30]))
    sink.precommit(txn)
    with armed("iceberg.before_table_commit"), pytest.raises(InjectedCrash):
        sink.commit(txn)
    # The next run renders another day's predicate; its recover finishes 11-20 as decided.
    scoped(replace_where=day(21)).recover()
    assert ids(scoped().table_target.load_table()) == [5, 30]


@pytest.mark.parametrize("step", ["iceberg.before_table_commit", "iceberg.after_table_commit",
                                  "promote.before_marker"])
def test_append_is_idempotent_across_a_crash_at_each_step(foreign, scoped, step):
    foreign("days", events(19, [1]))
    sink = scoped(mode="append")
    txn = sink.begin("2026-11-20")
    write_parquet(sink, txn, "a.parquet", events(20, [2, 3]))
    manifest = sink.precommit(txn)
    with armed(step), pytest.raises(InjectedCrash):
        sink.commit(txn, expected_digest=manifest.digest)
    scoped(mode="append").recover()
    assert scoped(mode="append").commit(txn).outcome == "already_committed"
    table = scoped().table_target.load_table()
    assert ids(table) == [1, 2, 3]  # appended once, nothing replaced
    # A new attempt of the epoch appends again: append never replaces.
    commit(scoped(mode="append"), "2026-11-20", {"b.parquet": events(20, [4])})
    assert ids(scoped().table_target.load_table()) == [1, 2, 3, 4]


def test_append_makes_a_new_table_unpartitioned(scoped):
    commit(scoped(mode="append"), "1", {"a.parquet": events(20, [1])})
    table = scoped().table_target.load_table()
    assert table.spec().fields == () or list(table.spec().fields) == []
    assert ids(table) == [1]


def test_bad_scopes_get_one_clear_error_before_anything_is_written(foreign, scoped,
                                                                   tmp_path):
    with pytest.raises(TpcError, match="not a predicate"):
        scoped(replace_where="ts >>= 3")
    with pytest.raises(TpcError, match="non-empty"):
        scoped(replace_where="  ")
    with pytest.raises(TpcError, match="never replaces"):
        scoped(replace_where=day(20), mode="append")
    with pytest.raises(TpcError, match="unknown write mode"):
        scoped(mode="upsert")
    # A predicate on a column the table does not have: refused at pre-commit.
    table = foreign("days", events(20, [3]))
    sink = scoped(replace_where="region = 'eu'")
    txn = sink.begin("2026-11-20")
    write_parquet(sink, txn, "a.parquet", events(20, [7]))
    with pytest.raises(TableSchemaError, match="does not fit the table's schema"):
        sink.precommit(txn)
    # replace_where on a table that does not exist: refused, the table is not made.
    load_catalog("local", **scoped().table_target.catalog_properties).drop_table(TABLE)
    del table
    fresh = scoped(replace_where=day(20))
    txn = fresh.begin("2026-11-20")
    write_parquet(fresh, txn, "a.parquet", events(20, [7]))
    with pytest.raises(TableSchemaError, match="needs an existing table"):
        fresh.precommit(txn)


def test_a_column_mapping_is_an_equality_predicate():
    assert Scope.of({"event_date": "2026-11-20", "region": None}).where \
        == "event_date = '2026-11-20' AND region IS NULL"
    assert Scope.of({"d": dt.date(2026, 11, 20), "n": 3}).where == "d = '2026-11-20' AND n = 3"
    with pytest.raises(TpcError, match="plain column name"):
        Scope.of({"a b": 1})
    with pytest.raises(TpcError, match="holds a quote"):
        Scope.of({"a": "it's"})
    assert Scope.from_doc(Scope.of(day(20)).to_doc()) == Scope.of(day(20))
    assert Scope.from_doc(None) == Scope()
    with pytest.raises(TpcError, match="unknown scope"):
        Scope.from_doc({"kind": "merge"})


def test_an_append_may_add_columns_too_and_its_decision_says_so(foreign, scoped):
    """``add_columns`` holds for ``mode="append"`` as for a replacing scope: the commit
    adds the staged files' new column, and the decision record keeps both (a recover
    that rolls the decision forward reads the scope back from it)."""
    foreign("days", events(19, [1]))
    wider = events(20, [5, 6]).append_column("country", pa.array(["fr", "de"]))
    result, txn = commit(scoped(mode="append", add_columns=True), "2026-11-20",
                         {"a.parquet": wider})
    table = scoped().table_target.load_table()
    assert table.schema().column_names[-1] == "country"
    assert sorted(r["country"] or "" for r in table.scan().to_arrow().to_pylist()) == [
        "", "de", "fr"]
    decision = scoped().ledger.read("2026-11-20", txn.attempt, DECISION)
    assert decision.scope == {"kind": "append", "add_columns": True}
    assert Scope.from_doc(decision.scope) == Scope.of(mode="append", add_columns=True)
    assert Scope.from_doc(decision.scope).add_columns is True


def test_new_columns_are_refused_unless_add_columns_then_added_in_the_commit(foreign,
                                                                             scoped):
    foreign("days", events(19, [1]))
    wider = events(20, [5, 6]).append_column("country", pa.array(["fr", "de"]))
    sink = scoped(replace_where=day(20))
    txn = sink.begin("2026-11-20")
    write_parquet(sink, txn, "a.parquet", wider)
    with pytest.raises(TableSchemaError, match="columns not in the table: country"):
        sink.precommit(txn)
    before = scoped().table_target.load_table().schema().column_names
    assert "country" not in before
    result, txn = commit(scoped(replace_where=day(20), add_columns=True), "2026-11-20",
                         {"a.parquet": wider})
    table = scoped().table_target.load_table()
    assert table.schema().column_names == [*before, "country"]
    rows = {r["id"]: r["country"] for r in table.scan().to_arrow().to_pylist()}
    assert rows == {1: None, 5: "fr", 6: "de"}
    assert ids(table) == [1, 5, 6]
    decision = scoped().ledger.read("2026-11-20", txn.attempt, DECISION)
    assert decision.scope == {"kind": "where", "where": day(20), "add_columns": True}
    with pytest.raises(TpcError, match="add_columns is supported for Iceberg"):
        from airflow_tpc.tables import DeltaSink

        DeltaSink("delta+file:///nonexistent/d", "events", add_columns=True)
