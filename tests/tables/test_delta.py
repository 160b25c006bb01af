"""Delta targets end to end through the core Sink verbs, with real delta-rs.

Table: a local folder; writers: pyarrow into staging (as the Spark job writes),
delta-rs for foreign writers; readers: delta-rs, pyarrow over the table's dataset
(the files its log names), DuckDB and pandas over that.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys

import deltalake  # noqa: F401  (the tables extra, in dev: a missing one fails, never skips)
import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, QueryBuilder, write_deltalake

from airflow_tpc import FencedError, LedgerError, StorageError, TpcError, TxnState
from airflow_tpc.core import faults
from airflow_tpc.core import promote as _promote
from airflow_tpc.core.faults import InjectedCrash, armed
from airflow_tpc.core.manifest import FileEntry, Manifest
from airflow_tpc.core.records import DECISION
from airflow_tpc.tables import DeltaSink, TableSchemaError, open_sink, open_table_sink
from airflow_tpc.tables.base import PROP_ATTEMPT, PROP_DIGEST, PROP_EPOCH, PROP_TXN_ID
from airflow_tpc.tables.delta import DeltaCommit, DeltaTarget, app_id, delta_storage_options
from tests.duckdb_readers import duckdb_rows

from .conftest import rows, write_parquet


@pytest.fixture()
def table_uri(tmp_path) -> str:
    return f"delta+file://{tmp_path}/events"


@pytest.fixture()
def make_sink(table_uri):
    """A fresh DeltaSink each call: a new process sees only what is in storage."""
    def make(namespace: str = "events") -> DeltaSink:
        return DeltaSink(table_uri, namespace)
    return make


def stage(sink: DeltaSink, epoch: str, batches: dict[str, pa.Table], *,
          precommit: bool = True):
    txn = sink.begin(epoch)
    for name, batch in batches.items():
        write_parquet(sink, txn, name, batch)
    return txn, (sink.precommit(txn) if precommit else None)


def ids(sink: DeltaSink, epoch: str | None = None, version: int | None = None) -> list[int]:
    """The ids a pyarrow reader of the table sees (of one epoch, at one version)."""
    table = sink.table_target.pyarrow_dataset(version).to_table()
    seen = sorted(r["id"] for r in table.to_pylist() if epoch is None or r["epoch"] == epoch)
    if version is None:  # every current state is read by DuckDB's own delta_scan too
        rows = duckdb_rows("delta", sink.table_target.location(), ["id", "epoch"])
        assert sorted(i for i, e in rows if epoch is None or e == epoch) == seen
    return seen


def duck_ids(sink: DeltaSink) -> list[int]:
    ds = sink.table_target.pyarrow_dataset()  # noqa: F841  (DuckDB reads it by name)
    con = duckdb.connect()
    try:
        return [r[0] for r in con.sql("select id from ds order by id").fetchall()]
    finally:
        con.close()


def ours(sink: DeltaSink, epoch: str | None = None) -> list[dict]:
    """airflow-tpc's commits (of one epoch), oldest first, from the log's commitInfo."""
    history = sink.table_target.commit_infos()
    return [h for h in reversed(history)
            if h.get(PROP_TXN_ID) and (epoch is None or h[PROP_EPOCH] == epoch)]


def test_commit_is_one_version_read_once_by_deltalake_pyarrow_duckdb_pandas(make_sink):
    sink = make_sink()
    no_column = rows("2026-11-20", [3]).drop_columns(["epoch"])  # Delta needs no column
    txn, manifest = stage(sink, "2026-11-20", {"part-0.parquet": rows("2026-11-20", [1, 2]),
                                               "part-1.parquet": no_column})
    assert sink.commit(txn, expected_digest=manifest.digest).outcome == "committed"

    table = sink.table_target.load_table()
    assert table.version() == 0 and table.metadata().partition_columns == ["epoch"]
    [info] = ours(sink)
    assert info[PROP_TXN_ID] == txn.txn_id == "events/2026-11-20/1"
    assert info[PROP_DIGEST] == manifest.digest and info[PROP_ATTEMPT] == "1"
    assert table.transaction_version(app_id("events", "2026-11-20")) == 1
    assert sink.table_version("2026-11-20", manifest.digest) == {
        "table": sink.table_target.uri, "format": "delta", "version": "0"}
    assert sink.table_version("2026-11-21", manifest.digest) is None
    # The files were added where they were staged: no copy, relative paths in the log.
    staging = sink.layout.staging("2026-11-20", 1)
    assert sorted(table.file_uris()) == [f"{staging}/part-0.parquet", f"{staging}/part-1.parquet"]
    adds = pa.table(table.get_add_actions(flatten=True)).to_pylist()
    assert {a["path"] for a in adds} == {"_tpc_staging/epoch=2026-11-20/attempt=000001/"
                                         f"part-{i}.parquet" for i in (0, 1)}
    assert sorted(a["num_records"] for a in adds) == [1, 2]
    # Every reader sees each row once, and the epoch column from the file or the log.
    want = [{"id": i, "value": f"v{i}", "epoch": "2026-11-20"} for i in (1, 2, 3)]
    dataset = sink.table_target.pyarrow_dataset()
    assert sorted(dataset.to_table().to_pylist(), key=lambda r: r["id"]) == want
    assert duck_ids(sink) == [1, 2, 3]
    con = duckdb.connect()
    assert con.sql("select count(distinct id), min(epoch), max(epoch) from dataset").fetchall() \
        == [(3, "2026-11-20", "2026-11-20")]
    con.close()
    frame = dataset.to_table().to_pandas()
    assert sorted(frame["id"]) == [1, 2, 3] and set(frame["epoch"]) == {"2026-11-20"}
    reader = QueryBuilder().register("t", table).execute("select id from t order by id")
    assert pa.table(reader.read_all())["id"].to_pylist() == [1, 2, 3]  # delta-rs's own engine
    assert sink.committed_files()["2026-11-20"] == [f"file://{staging}/part-{i}.parquet"
                                                   for i in (0, 1)]
    assert sink.describe("2026-11-20")[0].state is TxnState.COMMITTED


def test_rerun_with_changed_input_replaces_the_epoch_in_one_version(make_sink):
    sink = make_sink()
    txn1, _ = stage(sink, "5", {"a.parquet": rows("5", [1, 2, 3])})
    sink.commit(txn1)
    txn6, _ = stage(sink, "6", {"a.parquet": rows("6", [60])})
    sink.commit(txn6)
    txn2, m2 = stage(sink, "5", {"b.parquet": rows("5", [10, 11])})
    assert sink.commit(txn2).outcome == "committed"

    table = sink.table_target.load_table()
    assert table.version() == 2
    assert ours(sink)[-1][PROP_DIGEST] == m2.digest
    assert ids(sink, "5") == [10, 11] and ids(sink, "6") == [60]
    assert table.transaction_version(app_id("events", "5")) == 2
    # Time travel keeps working: attempt 1's file was not deleted by airflow-tpc.
    assert ids(sink, "5", version=0) == [1, 2, 3]
    assert sink.storage.exists(sink.storage.join(sink.layout.staging("5", 1), "a.parquet"))
    # The version holds remove + add: the epoch is replaced, no other epoch touched.
    last = sink.table_target.storage.read_bytes(
        f"{sink.layout.root}/_delta_log/{2:020d}.json").decode().splitlines()
    kinds = sorted(next(iter(json.loads(line))) for line in last)
    assert kinds == ["add", "commitInfo", "remove", "txn"]


COMMIT_STEPS = ["commit.before_decision", "commit.after_decision",
                "delta.before_table_commit", "delta.after_table_commit",
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
              if p.startswith(("commit.", "promote.", "delta.", "tables."))]
    assert passed == COMMIT_STEPS


@pytest.mark.parametrize("step", COMMIT_STEPS)
def test_crash_during_commit_then_recover_gives_one_version(make_sink, step):
    sink = make_sink()
    txn, manifest = _setup(sink)
    with armed(step), pytest.raises(InjectedCrash):
        sink.commit(txn, expected_digest=manifest.digest)
    # Readers see the old epoch or the new one, never a mix, never nothing.
    assert ids(sink) in ([1, 2], [7]) and duck_ids(sink) == ids(sink)

    restarted = make_sink()  # a new process: only storage survives
    restarted.recover()
    decided = step != "commit.before_decision"
    assert ids(restarted) == ([7] if decided else [1, 2])
    result = restarted.commit(restarted.transaction("5", 2), expected_digest=manifest.digest)
    assert result.outcome == ("already_committed" if decided else "committed")
    restarted.recover()
    assert ids(restarted) == [7] and duck_ids(restarted) == [7]
    # Exactly one version per epoch commit, never two for one decided attempt.
    assert [h[PROP_ATTEMPT] for h in ours(restarted)] == ["1", "2"]
    assert restarted.table_target.load_table().version() == 1
    assert {i.attempt: i.state for i in restarted.describe("5")} == {
        1: TxnState.COMMITTED, 2: TxnState.COMMITTED}
    # Attempt 1's data file is still referenced by version 0: kept.
    assert ids(restarted, version=0) == [1, 2]


def test_zombie_attempt_is_fenced(make_sink):
    sink = make_sink()
    zombie, _ = stage(sink, "5", {"a.parquet": rows("5", [1])})
    live, _ = stage(sink, "5", {"a.parquet": rows("5", [2])})
    with pytest.raises(FencedError):
        sink.commit(zombie)
    sink.commit(live)
    with pytest.raises(FencedError):
        sink.precommit(zombie)
    assert ids(sink) == [2] and sink.table_target.load_table().version() == 0


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
    with armed("delta.after_table_commit"), pytest.raises(InjectedCrash):
        sink.commit(txn2)
    assert _promote.read_marker(sink.layout, "5") is None

    assert _promote.promote(sink.layout, "5", 1, decision1, lambda: manifest1) is False
    assert [h[PROP_ATTEMPT] for h in ours(sink)] == ["2"]
    make_sink().recover()
    assert [h[PROP_ATTEMPT] for h in ours(sink)] == ["2"] and ids(sink) == [2]


def test_racing_committers_of_one_attempt_make_one_version(make_sink):
    """A second committer of the same attempt runs to the end while the first is just
    before its table commit; the first then finds the txn at its attempt."""
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
    assert first.table_target.load_table().version() == 0 and ids(first) == [1]


def test_same_attempt_committed_twice_to_the_table_makes_one_version(make_sink):
    """A switch of an attempt the table already holds (a crash after the table commit,
    then the strategy run again directly, outside the ledger's bookkeeping): the txn
    makes it a no-op that only writes the marker — still one version."""
    sink = make_sink()
    txn1, _ = stage(sink, "5", {"a.parquet": rows("5", [1])})
    sink.commit(txn1)
    txn, manifest = stage(sink, "5", {"a.parquet": rows("5", [2])})
    with armed("delta.after_table_commit"), pytest.raises(InjectedCrash):
        sink.commit(txn)
    staging = sink.layout.staging("5", 2)
    strategy = DeltaCommit(sink.table_target)
    assert strategy.switch(sink.layout, sink.read_manifest(txn), staging,
                           sink.layout.published_dir("5"), None) is True
    assert sink.table_target.load_table().version() == 1 and ids(sink) == [2]


def test_foreign_append_to_another_epoch_survives(make_sink, table_uri):
    sink = make_sink()
    txn, _ = stage(sink, "5", {"a.parquet": rows("5", [1])})
    sink.commit(txn)
    write_deltalake(table_uri[len("delta+file://"):], rows("manual", [99]), mode="append")
    txn, _ = stage(sink, "6", {"a.parquet": rows("6", [6])})
    sink.commit(txn)
    txn, _ = stage(sink, "5", {"a.parquet": rows("5", [5])})
    sink.commit(txn)
    assert ids(sink, "manual") == [99] and ids(sink) == [5, 6, 99]


def test_concurrent_foreign_commit_is_retried_and_survives(make_sink, table_uri):
    """Another writer commits between our read of the table and our commit (armed at
    the step, no sleeps): ours fails on the stale base (delta-rs's retry is off), is
    retried on the new version, and both survive; still one version for ours."""
    sink = make_sink()
    txn, _ = stage(sink, "5", {"a.parquet": rows("5", [1])})
    sink.commit(txn)
    txn2, _ = stage(sink, "6", {"a.parquet": rows("6", [6])})
    calls = []

    def foreign_append(_name: str) -> None:
        if not calls:
            calls.append(1)
            write_deltalake(table_uri[len("delta+file://"):], rows("x", [99]), mode="append")

    with armed("delta.before_table_commit", foreign_append):
        assert sink.commit(txn2).outcome == "committed"
    assert ids(sink) == [1, 6, 99]
    assert [h[PROP_ATTEMPT] for h in ours(sink)] == ["1", "1"]
    assert sink.table_target.load_table().version() == 2


def test_a_foreign_writer_creating_the_table_first_is_retried(make_sink, table_uri):
    """Our first commit would create the table; another writer creates it (partitioned
    by epoch) just before: ours is retried as an ordinary commit on its table."""
    sink = make_sink()
    txn, _ = stage(sink, "5", {"a.parquet": rows("5", [1])})

    def foreign_create(_name: str) -> None:
        if sink.table_target.load_table() is None:
            write_deltalake(table_uri[len("delta+file://"):], rows("x", [99]),
                            partition_by=["epoch"])

    with armed("delta.before_table_commit", foreign_create):
        assert sink.commit(txn).outcome == "committed"
    assert ids(sink) == [1, 99] and sink.table_target.load_table().version() == 1


def test_readers_see_old_or_new_epoch_at_every_step(make_sink):
    """pyarrow and DuckDB read at every step of a commit: the whole old epoch or the
    whole new one, never a mix, never nothing."""
    sink = make_sink()
    txn, _ = _setup(sink)
    seen = []

    def read(name: str) -> None:
        seen.append((name, ids(sink), duck_ids(sink)))

    with contextlib.ExitStack() as stack:
        for step in COMMIT_STEPS:
            stack.enter_context(armed(step, read))
        sink.commit(txn)
    assert [s[0] for s in seen] == COMMIT_STEPS
    assert all(a == b and a in ([1, 2], [7]) for _, a, b in seen)
    assert seen[0][1] == [1, 2] and seen[-1][1] == [7]


def test_conflicting_foreign_schema_change_is_refused_cleanly(make_sink, table_uri):
    """A foreign writer replaces the table with a schema without a column the staged
    files hold, between our read and our commit: the retry refuses with the column
    named; no version of ours for the epoch, the decision kept."""
    sink = make_sink()
    txn, _ = stage(sink, "5", {"a.parquet": rows("5", [1])})
    sink.commit(txn)
    txn2, _ = stage(sink, "6", {"a.parquet": rows("6", [6])})
    path = table_uri[len("delta+file://"):]

    def replace_schema(_name: str) -> None:
        if "value" in DeltaTable(path).schema().to_arrow().names:
            write_deltalake(path, rows("x", [9]).drop_columns(["value"]), mode="overwrite",
                            schema_mode="overwrite", partition_by=["epoch"])

    with armed("delta.before_table_commit", replace_schema), \
            pytest.raises(TableSchemaError, match="columns not in the table: value") as exc:
        sink.commit(txn2)
    assert "the decision and the staged files are kept" in str(exc.value)
    assert ours(sink, "6") == [] and ids(sink) == [9]
    assert sink.describe("6")[0].state is TxnState.COMMITTED  # decided, not published
    with pytest.raises(Exception, match="could not finish 1 decided commit"):
        make_sink().recover()
    assert ours(sink, "6") == []


def test_schema_mismatch_is_refused_at_precommit_naming_columns(make_sink):
    sink = make_sink()
    txn, _ = stage(sink, "5", {"a.parquet": rows("5", [1])})
    sink.commit(txn)
    bad = rows("6", [1]).drop_columns(["id"]).append_column(
        "id", rows("6", [1])["value"]).append_column("bogus", rows("6", [1])["value"])
    txn6, _ = stage(sink, "6", {"a.parquet": bad}, precommit=False)
    with pytest.raises(TableSchemaError) as exc:
        sink.precommit(txn6)
    message = str(exc.value)
    assert "columns not in the table: bogus" in message
    assert "id (string in the file, long in the table)" in message
    assert "Nothing was decided or changed" in message
    assert sink.read_manifest(txn6) is None  # not sealed
    assert sink.table_target.load_table().version() == 0
    assert sink.describe("6")[0].state is TxnState.OPEN


@pytest.mark.parametrize(("batch", "words"), [
    (rows("other", [1]), "not only this epoch '7'"),
    (rows("7", [1]).set_column(2, "epoch", pa.array([7], pa.int64())), "not a string"),
    (rows("7", [1]).append_column("at", pa.array([0], pa.time64("us"))),
     "no Delta table can be created from the staged schema: .*Time64"),
])
def test_staged_files_must_carry_only_their_epoch_and_a_delta_schema(make_sink, batch, words):
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
    with pytest.raises(TableSchemaError, match="columns not in the table: extra"):
        sink.commit(txn6, expected_digest=m6.digest)
    assert sink.ledger.read("6", 1, DECISION) is None
    assert sink.describe("6")[0].state is TxnState.PRECOMMITTED
    assert sink.table_target.load_table().version() == 0


def test_a_table_not_partitioned_by_epoch_or_with_a_required_column_is_refused(tmp_path):
    path = str(tmp_path / "plain")
    required = pa.schema([pa.field("id", pa.int64(), nullable=False),
                          pa.field("need", pa.string(), nullable=False),
                          pa.field("epoch", pa.string())])
    write_deltalake(path, pa.table({"id": [1], "need": ["x"], "epoch": ["0"]}, required))
    sink = DeltaSink(f"delta+file://{path}", "events")
    txn, _ = stage(sink, "5", {"a.parquet": rows("5", [1]).drop_columns(["value"])},
                   precommit=False)
    with pytest.raises(TableSchemaError, match="partitioned by nothing") as exc:
        sink.precommit(txn)
    assert "required columns missing: need" in str(exc.value)
    assert DeltaTable(path).version() == 0


def test_gc_keeps_files_any_retained_version_references(make_sink):
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
    assert sink.storage.exists(old) and ids(sink, version=0) == [1]  # version 0 needs it
    # Delta's vacuum skips _-prefixed folders: it never touches staging; a full vacuum
    # deletes the marker under epoch=5/ (not named by the log): the table's log still
    # says what is committed, and recover writes the marker again.
    table = sink.table_target.load_table()
    assert table.vacuum(retention_hours=0, enforce_retention_duration=False,
                        dry_run=False, full=True) == ["epoch=5/_tpc_published.json"]
    assert sink.committed_files() == {"5": [sink.storage.uri(
        sink.storage.join(sink.layout.staging("5", 2), "a.parquet"))]}
    make_sink().recover()
    assert _promote.read_marker(sink.layout, "5")["attempt"] == 2
    # ... and once Delta's log cleanup drops the versions naming it, gc removes it.
    table.alter.set_table_properties({"delta.logRetentionDuration": "interval 0 seconds"})
    table = sink.table_target.load_table()
    table.create_checkpoint()
    table.cleanup_metadata()
    assert sink.storage.exists(old)
    sink.gc()
    assert not sink.storage.exists(old)
    assert ids(sink) == [2]


def test_lost_ledger_never_reuses_an_attempt_the_table_holds(make_sink):
    sink = make_sink()
    txn, _ = stage(sink, "5", {"a.parquet": rows("5", [1])})
    sink.commit(txn)
    root = sink.layout.root
    shutil.rmtree(f"{root}/_tpc")
    shutil.rmtree(f"{root}/epoch=5")
    again = make_sink()
    txn2, _ = stage(again, "5", {"b.parquet": rows("5", [2])})
    assert txn2.attempt == 2
    again.commit(txn2)
    assert [h[PROP_ATTEMPT] for h in ours(again)] == ["1", "2"] and ids(again) == [2]


def test_reused_attempt_number_with_another_manifest_is_refused(make_sink):
    sink = make_sink()
    txn, manifest = stage(sink, "5", {"a.parquet": rows("5", [1])})
    sink.commit(txn)
    staging = sink.layout.staging("5", 1)
    pq.write_table(rows("5", [2]), f"{staging}/b.parquet")
    other = Manifest.build(namespace="events", target=sink.target, epoch="5", attempt=1,
                           staging=txn.staging_uri,
                           files=[FileEntry("b.parquet", os.path.getsize(f"{staging}/b.parquet"),
                                            "sha256:" + "0" * 64, None)])
    with pytest.raises(LedgerError, match="reused"):
        DeltaCommit(sink.table_target).switch(sink.layout, other, staging,
                                              sink.layout.published_dir("5"), None)
    assert sink.table_target.load_table().version() == 0 and manifest.digest != other.digest


def test_empty_staged_files_are_not_added(make_sink):
    sink = make_sink()
    txn, _ = stage(sink, "5", {"a.parquet": rows("5", [1]), "b.parquet": rows("5", [])})
    sink.commit(txn)
    txn, _ = stage(sink, "5", {"a.parquet": rows("5", []), "b.parquet": rows("5", [2])})
    sink.commit(txn)
    table = sink.table_target.load_table()
    assert ids(sink) == [2] and [u.rsplit("/", 1)[-1] for u in table.file_uris()] == ["b.parquet"]
    txn, _ = stage(sink, "5", {"a.parquet": rows("5", [])})  # the epoch is now empty
    sink.commit(txn)
    assert ids(sink) == []


def test_target_uri_parsing_and_options(tmp_path):
    sink = open_table_sink(f"delta+file://{tmp_path}/t", "events")
    assert isinstance(sink, DeltaSink) and sink.target == f"file://{tmp_path}/t"
    assert isinstance(open_sink(f"delta+file://{tmp_path}/t", "events"), DeltaSink)
    assert sink.layout.staging("5", 1) == f"{tmp_path}/t/_tpc_staging/epoch=5/attempt=000001"
    for bad in ("delta+file://host/x", "delta+file:///", "delta+s3:///x", "delta+gs://b/x",
                "delta+file:///x?y=1"):
        with pytest.raises(TpcError, match="not a Delta target|not a table target"):
            open_table_sink(bad, "events")
    secret = "do-not-show-this"
    target = DeltaTarget.parse("delta+s3://bucket/t", {"key": "AK", "secret": secret,
                                                       "endpoint_url": "http://127.0.0.1:9"})
    assert secret not in repr(target) and secret not in repr(DeltaSink(target, "n"))
    assert delta_storage_options({"key": "AK", "secret": "S", "token": "T",
                                  "client_kwargs": {"region_name": "eu-west-1"},
                                  "endpoint_url": "http://127.0.0.1:9"}) == {
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9", "AWS_ALLOW_HTTP": "true",
        "AWS_REGION": "eu-west-1", "AWS_ACCESS_KEY_ID": "AK", "AWS_SECRET_ACCESS_KEY": "S",
        "AWS_SESSION_TOKEN": "T"}


def test_unreadable_table_is_one_storage_error(tmp_path, make_sink):
    sink = make_sink()
    txn, _ = stage(sink, "5", {"a.parquet": rows("5", [1])})
    sink.commit(txn)
    log_file = f"{sink.layout.root}/_delta_log/{0:020d}.json"
    with open(log_file, "w") as fh:
        fh.write("not json\n")
    with pytest.raises(StorageError, match="Delta table delta\\+file://"):
        sink.table_target.load_table()


def test_core_imports_without_deltalake():
    code = ("import sys, tempfile; sys.modules['deltalake'] = None\n"
            "import airflow_tpc, airflow_tpc.tables, airflow_tpc.tables.delta\n"
            "from airflow_tpc import Sink\n"
            "from airflow_tpc.tables import open_sink\n"
            "assert type(open_sink(tempfile.mkdtemp(), 'n')) is Sink\n")
    subprocess.run([sys.executable, "-c", code], check=True)
