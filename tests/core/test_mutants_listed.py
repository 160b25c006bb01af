"""Issue 32 §3: the surviving mutants of the protocol core the issue lists, each killed.

Each test names the guard it pins and fails when that guard is mutated as the table in
``docs/mutation.md`` ("Listed survivors of the issue") says (checked by applying the
mutant by hand).  Real parts
only: local folders and moto's S3 server; a store wrapper here only interleaves a
second writer's real requests with the sink's, as ``faulty.py`` refuses them.
"""

from __future__ import annotations

import logging

import pytest

from airflow_tpc import PlacementError, Sink, TpcError, TxnState
from airflow_tpc.core.faults import InjectedCrash, armed
from airflow_tpc.core.records import BEGIN, CLOSED, DECISION, PUBLISHED
from airflow_tpc.errors import CommitConflict, LedgerError
from airflow_tpc.storage import open_storage

from .faulty import FaultyStorage
from .helpers import committed_contents, full_tree, stage

NS = "listed"


def _sink(tmp_path, name: str = "t", **kwargs) -> Sink:
    return Sink(str(tmp_path / name), NS, **kwargs)


def _decided_not_published(sink: Sink, epoch: str, data: bytes):
    """An attempt whose commit is decided and not carried out (the committer died)."""
    txn, manifest = stage(sink, epoch, {"b.parquet": data})
    with armed("commit.after_decision"), pytest.raises(InjectedCrash):
        sink.commit(txn, expected_digest=manifest.digest)
    return txn, manifest


def _unearned_published(sink: Sink, epoch: str, manifest) -> None:
    """A well-formed ``published.json`` of the attempt, though its files were never
    promoted (the marker names no attempt): a ledger restored from a backup newer than
    the data, or written by hand."""
    sink.ledger.create(epoch, 1, PUBLISHED, {"published_at": 0.0,
                                             "txn_id": f"{NS}/{epoch}/1",
                                             "manifest_digest": manifest.digest})


# --------------------------------------- gc / recover: "the marker disagrees" guards
def test_gc_keeps_a_decided_attempts_staging_despite_a_published_record_it_never_earned(
        tmp_path, caplog):
    """sink_maintenance._clean_finished_staging: ``published.json`` says done but the
    published marker names no attempt at or above it -> never delete on its word."""
    sink = _sink(tmp_path)
    txn, _ = stage(sink, "1", {"a.parquet": b"one"})
    sink.commit(txn)
    _, manifest = _decided_not_published(sink, "2", b"decided")
    _unearned_published(sink, "2", manifest)
    before = full_tree(sink)
    with caplog.at_level(logging.ERROR, logger="airflow_tpc"):
        assert sink.gc() == []
    assert full_tree(sink) == before, "gc deleted the staging of a decided commit"
    assert any("the published marker names no attempt" in r.getMessage()
               for r in caplog.records)
    sink.recover()  # the staging kept is what recover publishes
    assert committed_contents(sink) == {"1": [b"one"], "2": [b"decided"]}


def test_recover_publishes_a_decided_commit_whose_published_record_it_never_earned(tmp_path):
    """sink_maintenance._check_published_claims: the unearned claim is dropped and the
    commit promoted; without it recover skips the epoch forever, with no error."""
    sink = _sink(tmp_path)
    txn, _ = stage(sink, "1", {"a.parquet": b"one"})
    sink.commit(txn)
    _, manifest = _decided_not_published(sink, "2", b"decided")
    _unearned_published(sink, "2", manifest)
    report = sink.recover()
    assert report.errors == []
    assert committed_contents(sink) == {"1": [b"one"], "2": [b"decided"]}
    assert sink.recover().errors == []  # and it stays so
    assert committed_contents(sink) == {"1": [b"one"], "2": [b"decided"]}


# ----------------------------------------------- sink.commit: a second commit's digest
def test_a_second_commit_with_another_digest_is_a_conflict_and_changes_nothing(tmp_path):
    """sink.commit of an attempt already decided: ``expected_digest`` must be the one
    decided, or CommitConflict (a caller validated other files than were committed)."""
    sink = _sink(tmp_path)
    txn, manifest = stage(sink, "1", {"a.parquet": b"one"})
    _, other = stage(sink, "2", {"a.parquet": b"other files"})
    assert sink.commit(txn, expected_digest=manifest.digest).outcome == "committed"
    before = full_tree(sink)
    with pytest.raises(CommitConflict, match=f"committed with manifest {manifest.digest}, "
                                             f"not {other.digest}"):
        _sink(tmp_path).commit(txn, expected_digest=other.digest)
    assert full_tree(sink) == before
    again = _sink(tmp_path).commit(txn, expected_digest=manifest.digest)
    assert again.outcome == "already_committed"


# ------------------------------------------------ ledger: a record that vanished
class _RacedDecision:
    """A real store on which another writer's decision record lands just before the
    sink's own put-if-absent and is deleted before the sink reads it back: every
    request goes to the real folder, in that order."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.raced = 0

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def put_if_absent(self, path: str, data: bytes) -> bool:
        if not path.endswith(f"/{DECISION}.json") or self.raced:
            return self.inner.put_if_absent(path, data)
        self.raced += 1
        assert self.inner.put_if_absent(path, b'{"from": "another writer"}')
        took = self.inner.put_if_absent(path, data)
        self.inner.delete_files([path])  # ... and that writer's record vanished
        return took


def test_a_decision_that_vanished_after_a_conflicting_write_is_never_taken_as_ours(tmp_path):
    """ledger.create_or_get: put-if-absent refused and nothing there to read -> a
    LedgerError; counted as created, the commit published with no decision record."""
    target = str(tmp_path / "t")
    raced = _RacedDecision(open_storage(target)[0])
    sink = Sink(target, NS, storage=raced)
    txn, manifest = stage(sink, "1", {"a.parquet": b"one"})
    with pytest.raises(LedgerError, match="vanished after a conflicting write"):
        sink.commit(txn, expected_digest=manifest.digest)
    assert raced.raced == 1
    assert sink.storage.read_bytes(sink.layout.record("1", 1, DECISION)) is None
    assert committed_contents(sink) == {}
    assert sink.describe("1")[0].state is TxnState.PRECOMMITTED


# ------------------------------------------ the pending index keeps unfinished entries
def test_recover_keeps_a_decided_unfinished_commit_in_the_pending_index(tmp_path):
    """ledger.sync_pending (recover): an entry is dropped only for a finished attempt.
    A decided commit recover could not carry out stays listed, so the next commit of
    any epoch rolls it forward once it can be."""
    sink = _sink(tmp_path)
    txn, _ = stage(sink, "0", {"a.parquet": b"zero"})
    sink.commit(txn)  # the index is complete from here on
    _decided_not_published(sink, "1", b"decided")
    staged = sink.storage.join(sink.layout.staging("1", 1), "b.parquet")
    sink.storage.delete_files([staged])  # promotion of epoch 1 fails until it is back
    with pytest.raises(TpcError, match="could not finish 1 decided commit"):
        sink.recover()
    assert sink.ledger.pending() == {"1": {1}}
    sink.storage.put(staged, b"decided")  # restored
    txn, _ = stage(sink, "2", {"c.parquet": b"two"})
    result = sink.commit(txn)
    assert result.rolled_forward == [("1", 1)]
    assert committed_contents(sink) == {"0": [b"zero"], "1": [b"decided"], "2": [b"two"]}
    assert sink.ledger.pending() == {}


def test_a_commit_keeps_an_abort_whose_staging_removal_failed_in_the_pending_index(tmp_path):
    """sink_finish._roll_forward_pending: entries of attempts decided but not finished
    (an abort whose staging could not be removed yet) stay in the index, so a later
    commit finishes them: their staging removed, ``closed.json`` written."""
    target = str(tmp_path / "t")
    faulty = FaultyStorage(open_storage(target)[0])
    sink = Sink(target, NS, storage=faulty)
    txn, _ = stage(sink, "0", {"a.parquet": b"zero"})
    sink.commit(txn)
    stage(sink, "1", {"a.parquet": b"zombie"})          # attempt 1: displaced below
    zombie_staging = sink.layout.staging("1", 1)

    def refuse(op: str, args: tuple) -> bool:
        """The store refuses to delete anything of attempt 1's staging (a fenced job
        still holds it open, say)."""
        paths = [args[0]] if op == "delete_prefix" else list(args[0]) \
            if op == "delete_files" else []
        return any(str(p).startswith(zombie_staging) for p in paths)

    faulty.refuse = refuse
    txn2, _ = stage(sink, "1", {"a.parquet": b"one"})
    sink.commit(txn2)  # aborts attempt 1; its staging cannot be removed yet
    assert faulty.refused >= 1
    # aborted, not closed (its pre-commit's validated.json beside: PROTOCOL 3.4.11)
    assert sink.ledger.scan("1")["1"][1].kinds - {"validated"} == {BEGIN, DECISION}
    assert 1 in (sink.ledger.pending() or {}).get("1", set())
    faulty.refuse = lambda op, args: False
    txn3, _ = stage(sink, "2", {"a.parquet": b"two"})
    sink.commit(txn3)  # finishes the abort it finds in the index
    assert CLOSED in sink.ledger.scan("1")["1"][1].kinds
    assert sink.storage.list(zombie_staging) == []
    assert "1" not in (sink.ledger.pending() or {})


# ------------------------------------------------ placement: every folder above
def test_a_target_under_a_target_at_the_bucket_root_is_refused(s3_options, s3_bucket, caplog):
    """placement.claims_around: the claim of every folder above is read, the topmost
    one (the bucket) included."""
    outer = Sink(f"s3://{s3_bucket}", NS, storage_options=s3_options)
    with caplog.at_level(logging.WARNING, logger="airflow_tpc"):
        stage(outer, "1", {"a.parquet": b"outer"})  # it stages inside itself: warned
    everything = {i.path: outer.storage.read_bytes(i.path)
                  for i in outer.storage.list(s3_bucket)}
    inner = Sink(f"s3://{s3_bucket}/lake/inner", "other", storage_options=s3_options)
    with pytest.raises(PlacementError, match=f"lies inside target s3://{s3_bucket} "):
        inner.begin("1")
    assert {i.path: outer.storage.read_bytes(i.path)
            for i in outer.storage.list(s3_bucket)} == everything

