"""Typed records (issue 10): O(1) decisions, targets written by 0.1.0, finished history
that costs no reads, one state derivation."""

from __future__ import annotations

import json
import os

import pytest

from airflow_tpc import Sink, SinkConfig, TpcError, TxnState
from airflow_tpc.core.faults import InjectedCrash, armed
from airflow_tpc.core.ledger import CLOSED, DECISION
from airflow_tpc.core.records import CommitDecision, derive_state, needs_finishing

from .helpers import assert_invariant, committed_contents, stage


def _sink(store, **config):
    target, options = store
    return Sink(target, "records", storage_options=options, config=SinkConfig(**config))


def test_decision_stays_small_whatever_the_file_count(tmp_path):
    sink = Sink(str(tmp_path / "t"), "records")
    files = {f"part={i % 7}/f-{i:05d}.parquet": b"x" for i in range(3000)}
    txn, manifest = stage(sink, "1", files)
    sink.commit(txn, expected_digest=manifest.digest)
    raw = sink.storage.read_bytes(sink.layout.record("1", 1, DECISION))
    assert len(raw) < 4096, len(raw)
    doc = json.loads(raw)
    assert doc["version"] == 2 and doc["manifest_digest"] == manifest.digest
    assert doc["totals"] == {"files": 3000, "bytes": 3000, "rows": None}
    assert "manifest" not in doc
    info = sink.describe("1")[0]
    assert (info.files, info.bytes, info.state) == (3000, 3000, TxnState.COMMITTED)


def _as_v1(sink, epoch, attempt, manifest):
    """Rewrite a decision as airflow-tpc 0.1.0 wrote it: the whole manifest embedded."""
    path = sink.layout.record(epoch, attempt, DECISION)
    doc = json.loads(sink.storage.read_bytes(path))
    old = {"outcome": "commit", "txn_id": doc["txn_id"], "decided_at": doc["decided_at"],
           "mode": doc["mode"], "forced": False, "manifest": manifest.to_dict()}
    sink.storage.delete_files([path])
    sink.storage.put(path, json.dumps(old).encode())


@pytest.mark.parametrize("mode", ["move", "manifest"])
def test_targets_written_by_0_1_0_are_rolled_forward(store, mode):
    sink = _sink(store, promotion=mode)
    txn, manifest = stage(sink, "1", {"a.parquet": b"A", "b.parquet": b"B"})
    with armed("commit.after_decision"), pytest.raises(InjectedCrash):
        sink.commit(txn)
    _as_v1(sink, "1", 1, manifest)
    decision = sink.ledger.read("1", 1, DECISION)
    assert isinstance(decision, CommitDecision) and decision.embedded is not None
    assert decision.manifest_digest == manifest.digest and decision.verify == "checksum"
    # The next commit (of another epoch) finishes it: a lost notification, old format.
    other, _ = stage(sink, "2", {"c.parquet": b"C"})
    result = sink.commit(other)
    assert result.rolled_forward == [("1", 1)]
    assert_invariant(sink, {"1": [b"A", b"B"], "2": [b"C"]}, open_staging_ok=False)
    assert sink.commit(txn).outcome == "already_committed"


def test_decision_whose_sealed_manifest_changed_is_refused(tmp_path):
    sink = Sink(str(tmp_path / "t"), "records")
    txn, manifest = stage(sink, "1", {"a.parquet": b"A"})
    with armed("commit.after_decision"), pytest.raises(InjectedCrash):
        sink.commit(txn)
    # Staging re-sealed with other content after the decision (a straggler).
    staged = sink.layout.staging("1", 1)
    sink.storage.put(sink.storage.join(staged, "a.parquet"), b"Z")
    from airflow_tpc.core.manifest import MANIFEST_NAME, FileEntry, Manifest

    forged = Manifest.build(namespace=txn.namespace, target=txn.target, epoch="1", attempt=1,
                            staging=txn.staging_uri,
                            files=[FileEntry("a.parquet", 1, "sha256:" + "0" * 64)])
    sink.storage.put(sink.storage.join(staged, MANIFEST_NAME), forged.to_json_bytes())
    with pytest.raises(Exception, match="the decision commits"):
        sink.recover()
    assert committed_contents(sink) == {}


class CountingReads:
    """A real store that counts ``read_bytes`` calls per record kind."""

    def __init__(self, inner):
        self.inner = inner
        self.reads: list[str] = []

    def __getattr__(self, name):
        attr = getattr(self.inner, name)
        if name != "read_bytes":
            return attr

        def counted(path, *a, **k):
            self.reads.append(path)
            return attr(path, *a, **k)

        return counted


def test_finished_history_costs_no_reads(tmp_path):
    """Aborted and superseded attempts of past epochs are skipped from the listing alone
    (before: every commit re-read every aborted attempt's decision, forever)."""
    target = str(tmp_path / "t")
    sink = Sink(target, "records")
    for epoch in ("1", "2", "3"):
        aborted, _ = stage(sink, epoch, {"a.parquet": b"old"})
        sink.abort(aborted)
        txn, _ = stage(sink, epoch, {"a.parquet": epoch.encode()})
        sink.commit(txn)
    assert CLOSED in sink.ledger.scan("1")["1"][1].kinds
    counting = CountingReads(sink.storage)
    fresh = Sink(target, "records", storage=counting)
    txn, _ = stage(fresh, "4", {"a.parquet": b"4"})
    counting.reads.clear()
    fresh.commit(txn)
    past = [p for p in counting.reads if "/ledger/epoch=4/" not in p and "epoch=4" not in p]
    assert past == [], past


def test_targets_with_unclosed_aborts_are_closed_once(tmp_path):
    sink = Sink(str(tmp_path / "t"), "records")
    aborted, _ = stage(sink, "1", {"a.parquet": b"A"})
    sink.abort(aborted)
    sink.storage.delete_files([sink.layout.record("1", 1, CLOSED)])  # as 0.1.0 left it
    assert needs_finishing(sink.ledger.scan("1")["1"][1].kinds)
    txn, _ = stage(sink, "2", {"b.parquet": b"B"})
    sink.commit(txn)  # the roll-forward pass closes epoch 1's abort
    assert not needs_finishing(sink.ledger.scan("1")["1"][1].kinds)


def test_abandoned_commit_is_its_own_state(tmp_path):
    sink = Sink(str(tmp_path / "t"), "records", config=SinkConfig(timeout_s=60))
    old, _ = stage(sink, "1", {"a.parquet": b"old"})
    sink.commit(old)
    txn, manifest = stage(sink, "1", {"a.parquet": b"new"})
    with armed("commit.after_decision"), pytest.raises(InjectedCrash):
        sink.commit(txn)
    staged = sink.layout.staging("1", 2)
    sink.storage.delete_files([sink.storage.join(staged, "a.parquet")])  # lost for good
    import time

    report = sink.recover(ignore_failures_after_timeout=True, now=time.time() + 120)
    assert [a[:2] for a in report.abandoned] == [("1", 2)]
    states = {i.attempt: (i.state, i.superseded) for i in sink.describe("1")}
    assert states == {1: (TxnState.COMMITTED, False), 2: (TxnState.ABANDONED, False)}
    assert committed_contents(sink) == {"1": [b"old"]}


def test_state_is_derived_in_one_place():
    commit = CommitDecision("n", "n/1/1", 1.0, "move", "checksum", False, "sha256:x",
                            None)  # type: ignore[arg-type]
    assert derive_state(set(), None, sealed=False) is TxnState.OPEN
    assert derive_state(set(), None, sealed=True) is TxnState.PRECOMMITTED
    assert derive_state({DECISION}, commit, sealed=False) is TxnState.COMMITTED
    assert derive_state({DECISION, "abandoned"}, commit, sealed=False) is TxnState.ABANDONED


def test_is_published_is_one_listing(tmp_path):
    target = str(tmp_path / "t")
    sink = Sink(target, "records")
    txn, _ = stage(sink, "1", {"a.parquet": b"1"})
    assert not sink.is_published(txn)
    with armed("commit.before_published"), pytest.raises(InjectedCrash):
        sink.commit(txn)  # decided and promoted, published.json not yet written
    assert not sink.is_published(txn)
    sink.commit(txn)
    counting = CountingReads(sink.storage)
    assert Sink(target, "records", storage=counting).is_published(txn)
    assert counting.reads == []  # the listing says it: nothing is read


def test_poll_answers_what_a_sensor_needs_cheaply(tmp_path):
    target = str(tmp_path / "t")
    sink = Sink(target, "records")
    txn = sink.begin("1")
    assert (sink.poll(txn).state, sink.poll(txn).manifest) == (TxnState.OPEN, None)
    (tmp_path / "t" / "_tpc" / "staging" / "epoch=1" / "attempt=000001").mkdir(parents=True)
    (tmp_path / "t" / "_tpc" / "staging" / "epoch=1" / "attempt=000001" / "a.parquet") \
        .write_bytes(b"a")
    manifest = sink.precommit(txn)
    status = sink.poll(txn)
    assert (status.state, status.manifest.digest, status.highest_attempt) == \
        (TxnState.PRECOMMITTED, manifest.digest, 1)
    counting = CountingReads(sink.storage)
    Sink(target, "records", storage=counting).poll(txn)
    assert len(counting.reads) <= 2, counting.reads  # no describe(): no staging reads
    sink.begin("1")
    assert sink.poll(txn).highest_attempt == 2  # fenced
    sink.abort(txn, reason="given up")
    assert (sink.poll(txn).state, sink.poll(txn).reason) == (TxnState.ABORTED, "given up")


def _counting_hashes(sink):
    calls = []
    real = sink.storage.checksum

    def counted(path, algo):
        calls.append(path)
        return real(path, algo)

    sink.storage.checksum = counted  # an instance attribute: the real method still runs
    return calls


@pytest.mark.parametrize("when", ["commit", "roll-forward"])
def test_default_verification_catches_a_same_size_rewrite_without_reading(tmp_path, when):
    sink = Sink(str(tmp_path / "t"), "records")
    txn, manifest = stage(sink, "1", {"a.parquet": b"good", "b.parquet": b"fine"})
    assert manifest.fingerprints  # sealed beside the manifest
    staged = sink.storage.join(sink.layout.staging("1", 1), "a.parquet")
    if when == "roll-forward":
        with armed("commit.after_decision"), pytest.raises(InjectedCrash):
            sink.commit(txn)
    before = os.stat(staged)
    with open(staged, "r+b") as fh:  # same size, then the old mtime put back
        fh.write(b"EVIL")
    os.utime(staged, ns=(before.st_atime_ns, before.st_mtime_ns))
    hashes = _counting_hashes(sink)
    with pytest.raises(TpcError, match="altered after pre-commit"):
        sink.commit(txn) if when == "commit" else sink.recover()
    assert hashes == [staged] and committed_contents(sink) == {}  # only the moved file read


def test_untouched_staging_commits_without_reading_a_byte(tmp_path):
    sink = Sink(str(tmp_path / "t"), "records")
    txn, manifest = stage(sink, "1", {f"f{i}.parquet": b"x" * i for i in range(1, 20)})
    hashes = _counting_hashes(sink)
    assert sink.commit(txn, expected_digest=manifest.digest).outcome == "committed"
    assert hashes == []
    assert len(committed_contents(sink)["1"]) == 19


def test_explicit_checksum_mode_rehashes(tmp_path):
    sink = Sink(str(tmp_path / "t"), "records", config=SinkConfig(verify="checksum"))
    txn, _ = stage(sink, "1", {"a.parquet": b"a", "b.parquet": b"b"})
    hashes = _counting_hashes(sink)
    sink.commit(txn)
    assert len(hashes) == 2
