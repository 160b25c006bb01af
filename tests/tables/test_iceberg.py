"""Iceberg targets end to end through the core Sink verbs, with real pyiceberg.

Catalog: pyiceberg's SQL catalog on SQLite; warehouse: local disk; readers:
pyiceberg's scan (pyarrow), DuckDB over it and over the committed file list.
"""

from __future__ import annotations

import subprocess
import sys

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog import load_catalog
from pyiceberg.expressions import EqualTo

from airflow_tpc import (
    FencedError,
    LedgerError,
    Sink,
    StorageError,
    TpcError,
    TxnState,
)
from airflow_tpc.core import faults
from airflow_tpc.core import promote as _promote
from airflow_tpc.core.faults import InjectedCrash, armed
from airflow_tpc.core.manifest import FileEntry, Manifest
from airflow_tpc.core.records import DECISION
from airflow_tpc.storage import open_storage
from airflow_tpc.tables import IcebergSink, TableSchemaError, open_sink, open_table_sink
from airflow_tpc.tables.iceberg import (
    PROP_ATTEMPT,
    PROP_DIGEST,
    PROP_EPOCH,
    PROP_NAMESPACE,
    PROP_TXN_ID,
    IcebergSnapshot,
    IcebergTarget,
)

from .conftest import TABLE, duckdb_ids, rows, stage, write_parquet


def ours(table, epoch: str | None = None) -> list:
    """Snapshots airflow-tpc committed (of one epoch), oldest first."""
    return [s for s in table.snapshots()
            if s.summary[PROP_TXN_ID] and (epoch is None or s.summary[PROP_EPOCH] == epoch)]


def ids(table, epoch: str | None = None, snapshot_id: int | None = None) -> list[int]:
    """The ids a reader of the table sees (of one epoch, at one snapshot)."""
    kwargs = {"row_filter": EqualTo("epoch", epoch)} if epoch else {}
    scan = table.scan(snapshot_id=snapshot_id, **kwargs)
    seen = sorted(scan.to_arrow()["id"].to_pylist())
    if snapshot_id is None:  # every current state is read by DuckDB's own reader too
        assert duckdb_ids(table, epoch) == seen
    return seen


def test_commit_is_one_snapshot_read_once_by_pyarrow_and_duckdb(make_sink):
    sink = make_sink()
    txn, manifest = stage(sink, "2026-11-20", {"part-0.parquet": rows("2026-11-20", [1, 2]),
                                               "part-1.parquet": rows("2026-11-20", [3])})
    assert sink.commit(txn, expected_digest=manifest.digest).outcome == "committed"

    table = sink.table_target.load_table()
    [snap] = table.snapshots()
    assert snap.summary[PROP_TXN_ID] == txn.txn_id == "events/2026-11-20/1"
    assert snap.summary[PROP_DIGEST] == manifest.digest
    assert snap.summary[PROP_EPOCH] == "2026-11-20"
    assert snap.summary[PROP_ATTEMPT] == "1"
    assert snap.summary[PROP_NAMESPACE] == "events"
    assert sink.table_version("2026-11-20", manifest.digest) == {
        "table": sink.table_target.uri, "format": "iceberg",
        "snapshot_id": str(snap.snapshot_id)}
    assert sink.table_version("2026-11-21", manifest.digest) is None
    # The files were added where they were staged: no copy.
    staged = {sink.storage.uri(sink.storage.join(sink.layout.staging("2026-11-20", 1), n))
              for n in ("part-0.parquet", "part-1.parquet")}
    assert {t.file.file_path for t in table.scan().plan_files()} == staged
    assert ids(table) == [1, 2, 3]
    con = duckdb.connect()
    table.scan().to_duckdb("events", connection=con)
    assert con.sql("select count(*), count(distinct id) from events").fetchall() == [(3, 3)]
    files = sink.committed_files()["2026-11-20"]
    assert sorted(files) == sorted(staged)
    if files[0].startswith("file://"):  # the committed files read as plain Parquet
        got = con.sql(f"select id from read_parquet({[f[len('file://'):] for f in files]})")
        assert sorted(r[0] for r in got.fetchall()) == [1, 2, 3]
    io = sink.table_target.file_io()
    assert sorted(i for f in files for i in pq.read_table(io.new_input(f).open())["id"]
                  .to_pylist()) == [1, 2, 3]
    assert sink.describe("2026-11-20")[0].state is TxnState.COMMITTED


def test_rerun_with_changed_input_replaces_the_epoch_in_one_snapshot(make_sink):
    sink = make_sink()
    txn1, _ = stage(sink, "5", {"a.parquet": rows("5", [1, 2, 3])})
    sink.commit(txn1)
    txn6, _ = stage(sink, "6", {"a.parquet": rows("6", [60])})
    sink.commit(txn6)
    txn2, m2 = stage(sink, "5", {"b.parquet": rows("5", [10, 11])})
    assert sink.commit(txn2).outcome == "committed"

    table = sink.table_target.load_table()
    assert len(table.snapshots()) == 3
    last = table.current_snapshot()
    assert last.summary[PROP_DIGEST] == m2.digest and last.summary.operation.value == "overwrite"
    assert ids(table, "5") == [10, 11] and ids(table, "6") == [60]
    # Time travel keeps working: attempt 1's files were not deleted by airflow-tpc.
    first = ours(table, "5")[0]
    assert ids(table, snapshot_id=first.snapshot_id) == [1, 2, 3]
    assert sink.storage.exists(sink.storage.join(sink.layout.staging("5", 1), "a.parquet"))


COMMIT_STEPS = ["commit.before_decision", "commit.after_decision",
                "iceberg.before_table_commit", "iceberg.after_table_commit",
                "promote.before_marker", "promote.before_cleanup", "commit.before_published",
                "tables.before_remove_staging"]


def _setup(sink):
    """Epoch 5 committed with ids 1,2 (attempt 1); attempt 2 pre-committed with 7."""
    txn1, _ = stage(sink, "5", {"a.parquet": rows("5", [1, 2])})
    sink.commit(txn1)
    return stage(sink, "5", {"a.parquet": rows("5", [7])})


def test_every_step_is_covered(make_sink):
    """The crash list is checked against the steps a real commit passes."""
    sink = make_sink()
    txn, _ = _setup(sink)
    faults.reset()
    sink.commit(txn)
    passed = [p for p in faults.seen()
              if p.startswith(("commit.", "promote.", "iceberg.", "tables."))]
    assert passed == COMMIT_STEPS


@pytest.mark.parametrize("step", COMMIT_STEPS)
def test_crash_during_commit_then_recover_gives_one_snapshot(make_sink, step):
    sink = make_sink()
    txn, manifest = _setup(sink)
    with armed(step), pytest.raises(InjectedCrash):
        sink.commit(txn, expected_digest=manifest.digest)
    table = sink.table_target.load_table()
    assert ids(table) in ([1, 2], [7])  # the old epoch or the new one, never a mix

    restarted = make_sink()  # a new process: only storage and the catalog survive
    restarted.recover()
    decided = step != "commit.before_decision"
    table = restarted.table_target.load_table()
    assert ids(table) == ([7] if decided else [1, 2])
    result = restarted.commit(restarted.transaction("5", 2), expected_digest=manifest.digest)
    assert result.outcome == ("already_committed" if decided else "committed")
    restarted.recover()
    table = restarted.table_target.load_table()
    assert ids(table) == [7]
    # Exactly one snapshot per epoch commit, never two for one decided attempt.
    assert [s.summary[PROP_ATTEMPT] for s in table.snapshots()] == ["1", "2"]
    assert {i.attempt: i.state for i in restarted.describe("5")} == {
        1: TxnState.COMMITTED, 2: TxnState.COMMITTED}
    # Attempt 1's data file is still referenced by snapshot 1: kept.
    assert restarted.storage.exists(
        restarted.storage.join(restarted.layout.staging("5", 1), "a.parquet"))


def test_zombie_attempt_is_fenced(make_sink):
    sink = make_sink()
    zombie, _ = stage(sink, "5", {"a.parquet": rows("5", [1])})
    live, _ = stage(sink, "5", {"a.parquet": rows("5", [2])})
    with pytest.raises(FencedError):
        sink.commit(zombie)
    sink.commit(live)
    with pytest.raises(FencedError):
        sink.precommit(zombie)
    table = sink.table_target.load_table()
    assert ids(table) == [2] and len(table.snapshots()) == 1


def test_stale_promoter_of_a_lower_attempt_is_not_applied(make_sink):
    """Attempt 1 decided; attempt 2 decided and in the table, but its marker not yet
    written (a crash): a late roll-forward of attempt 1 must not touch the table."""
    sink = make_sink()
    txn1, _ = stage(sink, "5", {"a.parquet": rows("5", [1])})
    with armed("commit.after_decision"), pytest.raises(InjectedCrash):
        sink.commit(txn1)
    decision1 = sink.ledger.read("5", 1, DECISION)
    manifest1 = sink.read_manifest(txn1)
    txn2, _ = stage(make_sink(), "5", {"a.parquet": rows("5", [2])})
    with armed("iceberg.after_table_commit"), pytest.raises(InjectedCrash):
        sink.commit(txn2)
    assert _promote.read_marker(sink.layout, "5") is None  # readers' marker not switched

    assert _promote.promote(sink.layout, "5", 1, decision1, lambda: manifest1) is False
    table = sink.table_target.load_table()
    assert [s.summary[PROP_ATTEMPT] for s in table.snapshots()] == ["2"]
    make_sink().recover()
    table = sink.table_target.load_table()
    assert [s.summary[PROP_ATTEMPT] for s in table.snapshots()] == ["2"]
    assert ids(table) == [2]


def test_foreign_append_to_another_epoch_survives(make_sink, catalog_props):
    sink = make_sink()
    txn, _ = stage(sink, "5", {"a.parquet": rows("5", [1])})
    sink.commit(txn)
    foreign = load_catalog("local", **catalog_props).load_table(TABLE)
    foreign.append(rows("manual", [99]))  # another writer, plain pyiceberg
    txn, _ = stage(sink, "6", {"a.parquet": rows("6", [6])})
    sink.commit(txn)
    txn, _ = stage(sink, "5", {"a.parquet": rows("5", [5])})
    sink.commit(txn)
    table = sink.table_target.load_table()
    assert ids(table, "manual") == [99]
    assert ids(table) == [5, 6, 99]


def test_schema_mismatch_is_refused_at_precommit_naming_columns(make_sink):
    sink = make_sink()
    txn, _ = stage(sink, "5", {"a.parquet": rows("5", [1])})
    sink.commit(txn)
    before = [s.snapshot_id for s in sink.table_target.load_table().snapshots()]
    bad = rows("6", [1]).drop_columns(["id"]).append_column(
        "id", rows("6", [1])["value"]).append_column("bogus", rows("6", [1])["value"])
    txn6, manifest = stage(sink, "6", {"a.parquet": bad}, precommit=False)
    with pytest.raises(TableSchemaError) as exc:
        sink.precommit(txn6)
    message = str(exc.value)
    assert "bogus" in message and "id (string in the file, long in the table)" in message
    assert "Nothing was decided or changed" in message
    assert sink.read_manifest(txn6) is None  # not sealed
    assert [s.snapshot_id for s in sink.table_target.load_table().snapshots()] == before
    assert sink.describe("6")[0].state is TxnState.OPEN


@pytest.mark.parametrize(("batch", "words"), [
    (rows("7", [1]).drop_columns(["epoch"]), "no column 'epoch'"),
    (rows("other", [1]), "not only this epoch '7'"),
])
def test_staged_files_must_carry_their_epoch(make_sink, batch, words):
    sink = make_sink()
    txn, _ = stage(sink, "7", {"a.parquet": batch}, precommit=False)
    with pytest.raises(TableSchemaError, match=words):
        sink.precommit(txn)
    assert sink.table_target.load_table() is None  # nothing created


def test_schema_mismatch_is_refused_at_commit_before_the_decision(make_sink):
    """Sealed while the table did not exist; the table was then created with another
    schema: the commit refuses before its decision and changes nothing."""
    sink = make_sink()
    txn6, m6 = stage(sink, "6", {"a.parquet": rows("6", [1], extra=[1.5])})
    txn5, _ = stage(sink, "5", {"a.parquet": rows("5", [1])})
    sink.commit(txn5)  # creates the table without "extra"
    before = [s.snapshot_id for s in sink.table_target.load_table().snapshots()]
    with pytest.raises(TableSchemaError, match="columns not in the table: extra"):
        sink.commit(txn6, expected_digest=m6.digest)
    assert sink.ledger.read("6", 1, DECISION) is None
    assert sink.describe("6")[0].state is TxnState.PRECOMMITTED
    assert [s.snapshot_id for s in sink.table_target.load_table().snapshots()] == before


def test_gc_keeps_files_any_retained_snapshot_references(make_sink):
    sink = make_sink()
    txn1, _ = stage(sink, "5", {"a.parquet": rows("5", [1])})
    sink.commit(txn1)
    txn2, _ = stage(sink, "5", {"a.parquet": rows("5", [2])})
    sink.commit(txn2)
    aborted, _ = stage(sink, "6", {"a.parquet": rows("6", [3])})
    sink.abort(aborted)
    old = sink.storage.join(sink.layout.staging("5", 1), "a.parquet")
    assert not sink.storage.list(sink.layout.staging("6", 1))  # never in the table: gone
    sink.gc()
    assert sink.storage.exists(old)  # snapshot 1 still references it
    table = sink.table_target.load_table()
    first = ours(table, "5")[0]
    table.maintenance.expire_snapshots().by_id(first.snapshot_id).commit()
    sink.gc()
    assert not sink.storage.list(sink.layout.staging("5", 1))  # no snapshot references it now
    assert ids(sink.table_target.load_table()) == [2]


@pytest.mark.parametrize("catalog_props", ["sql"], indirect=True)
def test_table_target_uri_and_unreachable_catalog(tmp_path, catalog_props):
    sink = open_table_sink(f"iceberg://local/{TABLE}", "events",
                           catalog_properties=catalog_props)
    assert isinstance(sink, IcebergSink)
    assert isinstance(open_sink(f"iceberg://local/{TABLE}", "events",
                                catalog_properties=catalog_props), IcebergSink)
    with pytest.raises(Exception, match="not a table target"):
        open_sink(str(tmp_path / "folder"), "events", catalog_properties=catalog_props)
    assert sink.target == f"file://{tmp_path}/warehouse/analytics/events"
    assert IcebergTarget.parse("iceberg://cat/a.b.t").namespace == ("a", "b")
    with pytest.raises(Exception, match="iceberg://<catalog>/<namespace>.<table>"):
        IcebergTarget.parse("iceberg://cat/t")
    gone = {"type": "sql", "uri": f"sqlite:///{tmp_path}/no/such/dir/catalog.db",
            "warehouse": f"file://{tmp_path}/warehouse"}
    with pytest.raises(StorageError, match="catalog 'local'"):
        open_table_sink(f"iceberg://local/{TABLE}", "events", catalog_properties=gone)


def test_core_imports_without_pyiceberg():
    """The extra is optional: the core and airflow_tpc.tables import without it."""
    code = ("import sys, tempfile; sys.modules['pyiceberg'] = None\n"
            "import airflow_tpc, airflow_tpc.tables, airflow_tpc.tables.iceberg\n"
            "from airflow_tpc import Sink\n"
            "from airflow_tpc.tables import open_sink\n"
            "assert type(open_sink(tempfile.mkdtemp(), 'n')) is Sink\n")
    subprocess.run([sys.executable, "-c", code], check=True)
    loaded = subprocess.run([sys.executable, "-c", "import airflow_tpc, airflow_tpc.tables, sys;"
                             "print('pyiceberg' in sys.modules)"], check=True,
                            capture_output=True, text=True).stdout.strip()
    assert loaded == "False"



def test_lost_ledger_never_reuses_an_attempt_the_table_holds(make_sink):
    """The ledger, the marker and attempt 1's staging folder are lost (its data file
    survives only as the table's): begin numbers above the table's history."""
    sink = make_sink()
    txn, _ = stage(sink, "5", {"a.parquet": rows("5", [1])})
    sink.commit(txn)
    store, root = sink.storage, sink.layout.root
    store.delete_prefix(store.join(root, "_tpc"))
    store.delete_prefix(store.join(root, "epoch=5"))
    staged = store.join(sink.layout.staging("5", 1), "a.parquet")
    location = open_storage(sink.table_location)[1]
    store.put(store.join(location, "data", "kept-by-hand.parquet"), store.read_bytes(staged))
    store.delete_prefix(sink.layout.staging("5", 1))
    again = make_sink()
    txn2, _ = stage(again, "5", {"a.parquet": rows("5", [2])})
    assert txn2.attempt == 2
    again.commit(txn2)
    table = again.table_target.load_table()
    assert [s.summary[PROP_ATTEMPT] for s in table.snapshots()] == ["1", "2"]
    assert ids(table) == [2]


def test_reused_attempt_number_with_another_manifest_is_refused(make_sink):
    """A manifest of attempt 1 other than the one the table holds (the number was
    handed out twice): the switch refuses and changes nothing."""
    sink = make_sink()
    txn, manifest = stage(sink, "5", {"a.parquet": rows("5", [1])})
    sink.commit(txn)
    staging = sink.layout.staging("5", 1)
    write_parquet(sink, txn, "b.parquet", rows("5", [2]))
    size = len(sink.storage.read_bytes(sink.storage.join(staging, "b.parquet")))
    other = Manifest.build(namespace="events", target=sink.target, epoch="5", attempt=1,
                           staging=txn.staging_uri,
                           files=[FileEntry("b.parquet", size, "sha256:" + "0" * 64, None)])
    before = [s.snapshot_id for s in sink.table_target.load_table().snapshots()]
    with pytest.raises(LedgerError, match="reused"):
        IcebergSnapshot(sink.table_target).switch(sink.layout, other, staging,
                                                  sink.layout.published_dir("5"), None)
    assert [s.snapshot_id for s in sink.table_target.load_table().snapshots()] == before
    assert manifest.digest != other.digest


def test_concurrent_foreign_commit_is_retried_and_survives(make_sink, catalog_props):
    """Another writer commits between our read of the table and our commit (armed at
    the step, no sleeps): our commit fails on the stale base, is retried on the new
    snapshot, and both survive; still one snapshot for our attempt."""
    sink = make_sink()
    txn, _ = stage(sink, "5", {"a.parquet": rows("5", [1])})
    sink.commit(txn)
    txn2, _ = stage(sink, "6", {"a.parquet": rows("6", [6])})
    calls = []

    def foreign_append(_name: str) -> None:
        if not calls:
            calls.append(1)
            load_catalog("local", **catalog_props).load_table(TABLE).append(rows("x", [99]))

    with armed("iceberg.before_table_commit", foreign_append):
        assert sink.commit(txn2).outcome == "committed"
    table = sink.table_target.load_table()
    assert ids(table) == [1, 6, 99]
    assert [s.summary[PROP_ATTEMPT] for s in ours(table)] == ["1", "1"]
    assert len(table.snapshots()) == 3


def test_conflicting_foreign_schema_change_is_refused_cleanly(make_sink, catalog_props):
    """A foreign writer drops a column the staged files hold, between our read and our
    commit: the retry refuses with the column named; the table has no snapshot of
    ours for the epoch and the decision is kept for a fixed re-run to replace."""
    sink = make_sink()
    txn, _ = stage(sink, "5", {"a.parquet": rows("5", [1])})
    sink.commit(txn)
    txn2, _ = stage(sink, "6", {"a.parquet": rows("6", [6])})

    def drop_value(_name: str) -> None:
        table = load_catalog("local", **catalog_props).load_table(TABLE)
        if "value" in table.schema().column_names:
            with table.update_schema() as update:
                update.delete_column("value")

    with armed("iceberg.before_table_commit", drop_value), \
            pytest.raises(TableSchemaError, match="columns not in the table: value") as exc:
        sink.commit(txn2)
    assert "the decision and the staged files are kept" in str(exc.value)
    table = sink.table_target.load_table()
    assert ours(table, "6") == [] and table.current_snapshot().summary[PROP_EPOCH] == "5"
    assert sink.describe("6")[0].state is TxnState.COMMITTED  # decided, not published
    with pytest.raises(Exception, match="could not finish 1 decided commit"):
        make_sink().recover()  # surfaces on every restore, changes nothing
    assert ours(sink.table_target.load_table(), "6") == []


def test_racing_committers_of_one_attempt_make_one_snapshot(make_sink):
    """A second committer of the same attempt runs to the end while the first is just
    past its decision; the first then finds everything done."""
    first = make_sink()
    txn, manifest = stage(first, "5", {"a.parquet": rows("5", [1])})
    results = []

    def second_commits(_name: str) -> None:
        if not results:
            second = make_sink()
            results.append(second.commit(second.transaction("5", txn.attempt),
                                         expected_digest=manifest.digest).outcome)

    with armed("commit.after_decision", second_commits):
        outcome = first.commit(txn, expected_digest=manifest.digest).outcome
    assert results == ["already_committed"] and outcome == "committed"
    table = first.table_target.load_table()
    assert len(table.snapshots()) == 1 and ids(table) == [1]


def test_long_epoch_names_sharing_a_prefix_stay_apart(make_sink):
    """Iceberg truncates string statistics to 16 characters; partition values are not."""
    sink = make_sink()
    first = "scheduled__2026-11-20T00.00.00.000000_a"
    second = "scheduled__2026-11-20T00.00.00.000000_b"
    for epoch, batch in ((first, [1, 2]), (second, [3]), (first, [5])):
        txn, _ = stage(sink, epoch, {"p.parquet": rows(epoch, batch)})
        sink.commit(txn)
    table = sink.table_target.load_table()
    assert ids(table, first) == [5] and ids(table, second) == [3]


def test_catalog_unreachable_before_and_after_the_decision(tmp_path):
    """The catalog's folder disappears (an unmounted volume): before the decision the
    commit is refused and nothing is decided; after it, the decision and staging
    are kept and recover finishes the commit once the catalog is back."""
    (tmp_path / "cat").mkdir()
    (tmp_path / "warehouse").mkdir()
    props = {"type": "sql", "uri": f"sqlite:///{tmp_path}/cat/catalog.db",
             "warehouse": f"file://{tmp_path}/warehouse"}

    def make() -> IcebergSink:
        return IcebergSink(f"iceberg://local/{TABLE}", "events", catalog_properties=props)

    def unplug(sink: IcebergSink) -> None:
        (tmp_path / "cat").rename(tmp_path / "away")
        sink.table_target.catalog().engine.dispose()  # no pooled connection survives

    sink = make()
    txn, _ = stage(sink, "5", {"a.parquet": rows("5", [1])})
    sink.commit(txn)
    txn2, m2 = stage(sink, "5", {"a.parquet": rows("5", [2])})
    unplug(sink)
    with pytest.raises(StorageError, match="catalog 'local' failed to load"):
        sink.commit(txn2, expected_digest=m2.digest)
    assert sink.ledger.read("5", 2, DECISION) is None
    (tmp_path / "away").rename(tmp_path / "cat")

    with armed("commit.after_decision", lambda _name: unplug(sink)), \
            pytest.raises(StorageError, match="catalog 'local' failed"):
        sink.commit(txn2, expected_digest=m2.digest)
    assert sink.ledger.read("5", 2, DECISION) is not None
    (tmp_path / "away").rename(tmp_path / "cat")
    make().recover()
    table = make().table_target.load_table()
    assert ids(table) == [2]
    assert [s.summary[PROP_ATTEMPT] for s in table.snapshots()] == ["1", "2"]


def test_a_schema_no_table_can_be_made_from_is_refused_before_the_decision(make_sink):
    """Nanosecond timestamps (Spark's default INT96) have no Iceberg v2 type: refused at
    pre-commit, not at table creation after the decision."""
    sink = make_sink()
    batch = rows("5", [1]).append_column("at", pa.array([0], pa.timestamp("ns")))
    txn, _ = stage(sink, "5", {"a.parquet": batch}, precommit=False)
    with pytest.raises(TableSchemaError, match="'at' has an unsupported type: timestamp"):
        sink.precommit(txn)
    assert sink.table_target.load_table() is None


def test_empty_staged_files_are_not_added(make_sink):
    """A file without rows carries no statistics to infer its partition from (Spark
    writes such files for empty tasks): it is sealed but adds nothing to the table."""
    def spark_like(epoch: str, batch: list[int]):  # Spark writes lit() columns NOT NULL
        table = rows(epoch, batch)
        return table.cast(pa.schema([f.with_nullable(f.name != "epoch") for f in table.schema]))

    sink = make_sink()
    txn, _ = stage(sink, "5", {"a.parquet": spark_like("5", [1]),
                               "b.parquet": spark_like("5", [])})
    sink.commit(txn)
    txn, _ = stage(sink, "5", {"a.parquet": spark_like("5", []),
                               "b.parquet": spark_like("5", [2])})
    sink.commit(txn)
    table = sink.table_target.load_table()
    assert ids(table) == [2]
    assert [t.file.file_path.rsplit("/", 1)[-1] for t in table.scan().plan_files()] \
        == ["b.parquet"]
    txn, _ = stage(sink, "5", {"a.parquet": spark_like("5", [])})  # the epoch is now empty
    sink.commit(txn)
    assert ids(sink.table_target.load_table()) == []


def test_a_plain_sink_on_the_table_location_fails_closed(make_sink, sink_options):
    """A job that opens a folder sink on the table's location (not the table URI) looks
    for staging elsewhere: refused, nothing sealed, nothing committed."""
    sink = make_sink()
    txn, _ = stage(sink, "5", {"a.parquet": rows("5", [1])}, precommit=False)
    plain = Sink(sink.target, "events", storage_options=sink_options.get("storage_options"))
    with pytest.raises(TpcError):
        plain.precommit(txn)
    assert sink.read_manifest(txn) is None
    assert sink.table_target.load_table() is None
