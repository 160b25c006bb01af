"""Zombie fencing, racing committers, racing begins, namespaces and timeouts."""

from __future__ import annotations

import json
import logging
import threading
import time

import pytest

from airflow_tpc import (
    CommitConflict,
    FencedError,
    InvalidState,
    NamespaceConflict,
    Sink,
    SinkConfig,
    TransactionExpired,
    TxnState,
    UnsupportedStorage,
)
from airflow_tpc.core.ledger import DECISION

from ..conftest import make_store
from .helpers import assert_invariant, committed_contents, stage, write_staged


@pytest.fixture(params=["local", "s3", "seaweed"])
def store(request, tmp_path):
    """Local disk, moto's S3 and SeaweedFS: the races are settled by the store's
    conditional writes, so they run on a second real S3 as well."""
    return make_store(request.param, request, tmp_path)


def _wait_until(condition, timeout: float = 300.0) -> None:
    """Poll ``condition`` until it holds (a deadline for a busy machine, not a delay)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{condition} did not hold within {timeout} s"
        time.sleep(0.01)


def _sink(store, namespace="events", **config):
    target, options = store
    return Sink(target, namespace, storage_options=options, config=SinkConfig(**config))


def test_zombie_attempt_is_fenced_and_never_promoted(store):
    sink = _sink(store)
    zombie, zmanifest = stage(sink, "3", {"z.parquet": b"zombie output"})
    live = sink.begin("3")  # a retry of the task begins a higher attempt
    assert live.attempt > zombie.attempt and live.fencing_number == live.attempt
    with pytest.raises(FencedError, match="zombie"):
        sink.commit(zombie, expected_digest=zmanifest.digest)
    write_staged(sink, zombie, {"late.parquet": b"written after fencing"})
    with pytest.raises(FencedError):
        sink.precommit(zombie)
    write_staged(sink, live, {"l.parquet": b"live output"})
    sink.precommit(live)
    assert sink.commit(live).outcome == "committed"
    # The zombie keeps writing after the commit; recover removes it, never promotes it.
    write_staged(sink, zombie, {"later.parquet": b"even later"})
    with pytest.raises(InvalidState, match="ABORTED .superseded by committed attempt 2"):
        sink.commit(zombie)
    sink.recover()
    assert_invariant(sink, {"3": [b"live output"]}, open_staging_ok=False)
    assert {i.attempt: i.state for i in sink.describe("3")} == {
        1: TxnState.ABORTED, 2: TxnState.COMMITTED}


def test_two_racing_committers_one_decision(store):
    sink = _sink(store)
    txn, manifest = stage(sink, "8", {f"f{i}.parquet": bytes([i]) * 100 for i in range(20)})
    barrier = threading.Barrier(6)
    outcomes, errors = [], []

    def commit():
        racer = _sink(store)  # each committer its own process-like client
        barrier.wait()
        try:
            outcomes.append(racer.commit(txn, expected_digest=manifest.digest).outcome)
        except Exception as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=commit) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # Identical manifests: exactly one decides, the others are no-ops.
    assert errors == []
    assert sorted(outcomes) == ["already_committed"] * 5 + ["committed"]
    sink.recover()
    assert_invariant(sink, {"8": sorted(bytes([i]) * 100 for i in range(20))},
                     open_staging_ok=False)
    decisions = [o for o in sink.storage.list(sink.layout.ledger_root)
                 if o.path.endswith(f"/{DECISION}.json")]
    assert len(decisions) == 1


def _race_commit_against_abort(store):
    sink = _sink(store)
    txn, _ = stage(sink, "9", {"a.parquet": b"A"})
    barrier = threading.Barrier(2)
    results = {}

    def run(name, fn):
        barrier.wait()
        try:
            fn()
            results[name] = "ok"
        except (InvalidState, CommitConflict) as exc:
            results[name] = type(exc).__name__

    t1 = threading.Thread(target=run, args=("commit", lambda: sink.commit(txn)))
    t2 = threading.Thread(target=run, args=("abort", lambda: _sink(store).abort(txn)))
    t1.start(), t2.start(), t1.join(), t2.join()
    state = sink.describe("9")[-1].state
    assert list(results.values()).count("ok") == 1, results
    if results["commit"] == "ok":
        assert state is TxnState.COMMITTED and committed_contents(sink)["9"] == [b"A"]
    else:
        assert state is TxnState.ABORTED and "9" not in committed_contents(sink)
    sink.recover()
    assert_invariant(sink, {"9": [b"A"]} if results["commit"] == "ok" else {},
                     open_staging_ok=False)
    sink.storage.delete_prefix(sink.layout.root)


def test_racing_commit_and_abort_have_one_outcome(store):
    for _ in range(3):
        _race_commit_against_abort(store)


def test_racing_begins_get_distinct_increasing_attempts(store):
    sink = _sink(store)
    got, barrier = [], threading.Barrier(8)

    def begin():
        barrier.wait()
        got.append(_sink(store).begin("11").attempt)

    threads = [threading.Thread(target=begin) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(got) == list(range(1, 9))
    assert sink.begin("11").attempt == 9


def test_abort_of_committed_is_refused_and_abort_is_idempotent(store):
    sink = _sink(store)
    txn, _ = stage(sink, "1", {"a.parquet": b"A"})
    sink.commit(txn)
    with pytest.raises(InvalidState, match="COMMITTED"):
        sink.abort(txn)
    other, _ = stage(sink, "2", {"b.parquet": b"B"})
    sink.abort(other)
    sink.abort(other)
    with pytest.raises(InvalidState, match="ABORTED"):
        sink.commit(other)
    assert_invariant(sink, {"1": [b"A"]}, open_staging_ok=False)


def test_second_namespace_is_refused_unless_allowed(store, caplog):
    first = _sink(store, "pipeline-a")
    txn, _ = stage(first, "1", {"a.parquet": b"A"})
    second = _sink(store, "pipeline-b")
    with pytest.raises(NamespaceConflict, match="pipeline-a"):
        second.begin("2")
    with pytest.raises(NamespaceConflict):
        second.commit(txn)
    allowed = _sink(store, "pipeline-b", allow_foreign_namespace=True)
    with caplog.at_level(logging.WARNING, logger="airflow_tpc"):
        allowed.begin("2")
    assert "allow_foreign_namespace" in caplog.text


def test_expired_transaction_refused_unless_forced(store, caplog):
    sink = _sink(store, timeout_s=0.5, warn_fraction=0.1)
    txn, manifest = stage(sink, "4", {"a.parquet": b"A"})
    _wait_until(txn.expired)  # (a slow machine may have got there already)
    with pytest.raises(TransactionExpired, match="force=True"):
        sink.commit(txn)
    with caplog.at_level(logging.ERROR, logger="airflow_tpc"):
        assert sink.commit(txn, force=True).outcome == "committed"
    assert "FORCED commit of expired" in caplog.text and "lost" in caplog.text
    decision = json.loads(sink.storage.read_bytes(sink.layout.record("4", 1, DECISION)))
    assert decision["forced"] is True
    assert_invariant(sink, {"4": [b"A"]}, open_staging_ok=False)


def test_recover_expires_old_attempts_loudly(store, caplog):
    sink = _sink(store, timeout_s=60)
    sealed, manifest = stage(sink, "1", {"a.parquet": b"A" * 10})
    open_txn = sink.begin("2")
    write_staged(sink, open_txn, {"b.parquet": b"B"})
    fresh, _ = stage(sink, "3", {"c.parquet": b"C"})
    with caplog.at_level(logging.WARNING, logger="airflow_tpc"):
        report = sink.recover(now=time.time() + 61)
    assert sorted(report.aborted) == [("1", 1, "expired"), ("2", 1, "expired"),
                                      ("3", 1, "expired")]
    assert "PRE-COMMITTED (1 files, 10 bytes" in caplog.text and manifest.digest in caplog.text
    states = {i.epoch: i.state for i in sink.describe()}
    assert states == {"1": TxnState.EXPIRED, "2": TxnState.EXPIRED, "3": TxnState.EXPIRED}
    assert_invariant(sink, {}, open_staging_ok=False)


def test_warning_past_fraction_of_timeout(store, caplog):
    # The warning band is (warn_fraction * timeout, timeout]: 0.3 s to 10 min here, so
    # the transaction enters it once it is 0.3 s old and stays in it however slowly a
    # busy machine runs the steps in between (with a 1 s timeout a loaded machine
    # could run past the timeout, and the warning would never come).
    sink = _sink(store, timeout_s=600.0, warn_fraction=0.0005)
    txn = sink.begin("5")
    write_staged(sink, txn, {"a.parquet": b"A"})
    _wait_until(lambda: txn.age() > 0.3)
    with caplog.at_level(logging.WARNING, logger="airflow_tpc"):
        sink.precommit(txn)
    assert "of its 600 s transaction timeout" in caplog.text
    # Below the fraction (8 minutes of 10 here: no machine is that slow): no warning.
    caplog.clear()
    fresh = _sink(store, timeout_s=600.0, warn_fraction=0.8)
    young = fresh.begin("6")
    write_staged(fresh, young, {"b.parquet": b"B"})
    with caplog.at_level(logging.WARNING, logger="airflow_tpc"):
        fresh.precommit(young)
    assert "transaction timeout" not in caplog.text


def test_manifest_mode_publishes_without_copying(store):
    sink = _sink(store, promotion="manifest")
    txn, _ = stage(sink, "1", {"a.parquet": b"A", "p=1/b.parquet": b"B"})
    sink.commit(txn)
    uris = sink.committed_files()["1"]
    staged = sink.storage.uri(sink.layout.staging("1", 1))
    assert "/_tpc_staging/" in staged and all(u.startswith(staged + "/") for u in uris)
    txn2, _ = stage(sink, "1", {"c.parquet": b"C"})
    sink.commit(txn2)
    assert_invariant(sink, {"1": [b"C"]}, open_staging_ok=False)
    assert not any("attempt=000001" in p for p in (o.path for o in sink.storage.list(
        sink.layout.staging_root)))


def test_unsupported_store_is_refused_clearly():
    with pytest.raises(UnsupportedStorage, match="hdfs:// has no tested exactly-once backend"):
        Sink("hdfs://namenode/data/t", "ns")
    with pytest.raises(UnsupportedStorage, match="absolute"):
        Sink("relative/path", "ns")


def test_bad_epoch_and_namespace_names(tmp_path):
    from airflow_tpc import TpcError

    with pytest.raises(TpcError, match="namespace"):
        Sink(str(tmp_path), "a/b")
    sink = Sink(str(tmp_path), "ns")
    for bad in ("", "../x", "a/b", "epoch=1", " x", "x" * 200):
        with pytest.raises(TpcError, match="invalid epoch"):
            sink.begin(bad)
