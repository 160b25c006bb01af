"""The four scenarios of Flink's TwoPhaseCommitSinkFunction tests, in epoch terms.

Each runs on both stores (a local directory and S3 through moto's server).
"""

from __future__ import annotations

import logging

import pytest

from airflow_tpc import Sink, SinkConfig, StorageError, TpcError, TxnState
from airflow_tpc.core.faults import InjectedCrash, armed
from airflow_tpc.storage import open_storage

from .faulty import FaultyStorage
from .helpers import assert_invariant, committed_contents, stage, staging_files, write_staged


def make_sink(store, **config):
    target, options = store
    return Sink(target, "events", storage_options=options, config=SinkConfig(**config))


def faulty_sink(store, **config):
    target, options = store
    inner, _ = open_storage(target, options)
    faulty = FaultyStorage(inner)
    return Sink(target, "events", storage=faulty, config=SinkConfig(**config)), faulty


def test_complete_protocol(store):
    """Epochs 0,1,2 staged and pre-committed; commit confirmed up to 1 -> target has 0 and 1."""
    sink = make_sink(store)
    txns = [stage(sink, str(e), {f"part-{e}.parquet": f"rows of {e}".encode()}) for e in range(3)]
    for txn, manifest in txns[:2]:
        assert sink.commit(txn, expected_digest=manifest.digest).outcome == "committed"
    assert committed_contents(sink) == {"0": [b"rows of 0"], "1": [b"rows of 1"]}
    pending = [i for i in sink.describe() if i.epoch == "2"]
    assert [i.state for i in pending] == [TxnState.PRECOMMITTED]
    # data + manifest (+ the sealed fingerprints where the store has no ETags): invisible
    assert pending[0].staging_files == (2 if sink.storage.native_checksum else 3)
    assert_invariant(sink, {"0": [b"rows of 0"], "1": [b"rows of 1"]})


def test_failure_before_commit(store):
    """0 and 1 pre-committed and decided; epoch 2's writer fails mid-write; restore."""
    sink, faulty = faulty_sink(store)
    decided = []
    for e in (0, 1):
        txn, _ = stage(sink, str(e), {f"p{e}.parquet": f"e{e}".encode()})
        with armed("commit.after_decision"), pytest.raises(InjectedCrash):
            sink.commit(txn)  # the commit notification is lost after the decision
        decided.append(txn)
    txn2 = sink.begin("2")
    write_staged(sink, txn2, {"a.parquet": b"half"})
    faulty.refuse = lambda op, args: op == "put"
    with pytest.raises(StorageError):
        write_staged(sink, txn2, {"b.parquet": b"never"})
    faulty.refuse = lambda op, args: False
    assert committed_contents(sink) == {}  # nothing visible before recovery

    restored = make_sink(store)  # a fresh process restoring from the ledger
    report = restored.recover(abort_undecided=True)
    assert sorted(report.rolled_forward) == [("0", 1), ("1", 1)]
    assert report.aborted == [("2", 1, "restore")]
    assert_invariant(restored, {"0": [b"e0"], "1": [b"e1"]}, open_staging_ok=False)
    # Recovering again changes nothing: commit is idempotent.
    again = restored.recover(abort_undecided=True)
    assert again.rolled_forward == [] and again.aborted == []
    assert_invariant(restored, {"0": [b"e0"], "1": [b"e1"]}, open_staging_ok=False)


def test_commit_keeps_failing_on_recovery(store, caplog):
    """A failing commit is retried and surfaced on every restore; dropped only after the
    timeout when the user opted in, loudly."""
    sink, faulty = faulty_sink(store, timeout_s=100.0)
    txn, _ = stage(sink, "0", {"p.parquet": b"epoch zero"})
    with armed("commit.after_decision"), pytest.raises(InjectedCrash):
        sink.commit(txn)
    faulty.refuse = lambda op, args: op in ("replace_dir", "copy_many")
    import time

    for _ in range(3):  # every restore surfaces the error, nothing is dropped
        with pytest.raises(TpcError, match="could not finish 1 decided commit") as info:
            sink.recover()
        assert info.value.report.errors[0][:2] == ("0", 1)
    # past the timeout, but not opted in: still an error
    with pytest.raises(TpcError):
        sink.recover(now=time.time() + 1000)
    # opted in, but not yet past the timeout: still an error
    with pytest.raises(TpcError):
        sink.recover(ignore_failures_after_timeout=True)
    assert faulty.refused >= 5
    with caplog.at_level(logging.ERROR, logger="airflow_tpc"):
        report = sink.recover(ignore_failures_after_timeout=True, now=time.time() + 1000)
    assert [a[:2] for a in report.abandoned] == [("0", 1)]
    assert "POSSIBLE DATA LOSS" in caplog.text and "/0/1" in caplog.text
    assert committed_contents(sink) == {}
    # Once abandoned, later restores do not fail on it again.
    faulty.refuse = lambda op, args: False
    assert sink.recover().errors == []


def test_lost_notification_finished_by_later_commit(store):
    """Commit of epoch N also finishes earlier epochs whose commit was decided, not done."""
    sink = make_sink(store)
    for e in (0, 1):
        txn, _ = stage(sink, str(e), {"x.parquet": f"e{e}".encode()})
        with armed("commit.after_decision"), pytest.raises(InjectedCrash):
            sink.commit(txn)
    assert committed_contents(sink) == {}
    txn2, m2 = stage(sink, "2", {"x.parquet": b"e2"})
    result = sink.commit(txn2, expected_digest=m2.digest)
    assert result.outcome == "committed"
    assert sorted(result.rolled_forward) == [("0", 1), ("1", 1)]
    assert_invariant(sink, {"0": [b"e0"], "1": [b"e1"], "2": [b"e2"]}, open_staging_ok=False)


def test_rerun_replaces_epoch_never_merges(store):
    sink = make_sink(store)
    txn, _ = stage(sink, "7", {"a.parquet": b"old-a", "b.parquet": b"old-b"})
    sink.commit(txn)
    txn2, _ = stage(sink, "7", {"a.parquet": b"new-a"})
    assert txn2.attempt == txn.attempt + 1
    assert sink.commit(txn2).outcome == "committed"
    assert_invariant(sink, {"7": [b"new-a"]}, open_staging_ok=False)
    infos = {i.attempt: i for i in sink.describe("7")}
    assert infos[1].superseded and not infos[2].superseded
    # committing the old attempt again is a no-op that reports it was superseded
    assert sink.commit(txn).outcome == "superseded"
    assert_invariant(sink, {"7": [b"new-a"]}, open_staging_ok=False)


def test_commit_rerun_is_noop(store):
    sink = make_sink(store)
    txn, manifest = stage(sink, "1", {"a.parquet": b"A"})
    assert sink.commit(txn).outcome == "committed"
    before = staging_files(sink)
    assert sink.commit(txn, expected_digest=manifest.digest).outcome == "already_committed"
    assert staging_files(sink) == before
    assert_invariant(sink, {"1": [b"A"]}, open_staging_ok=False)
