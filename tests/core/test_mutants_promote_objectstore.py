"""Promotion on an object store (``promote.CopyThenSwapMarker``): attempt-tagged copies,
the marker's compare-and-swap, and the clean-up of what a re-run displaced.

Why here and not only in the ``s3`` halves of the store-parametrized modules: mutation
testing (docs/mutation.md) leaves those halves out (``-k "not s3"``: moto costs several
times the local half under trampolines), so none of this code was reached and its 100
mutants counted as not killed.  These tests are named without "s3" on purpose so the
mutation run keeps them; they start moto's server once per session (the session fixture
of ``tests/conftest.py``) and each writes a few bytes.  Each asserts what a reader sees
and what is left in the bucket after a re-run, a crash in the middle of promotion and
its roll-forward: the ways a wrong edit would lose, duplicate or mix an epoch's data.
"""

from __future__ import annotations

import json

import pytest

from airflow_tpc import Sink, TxnState
from airflow_tpc.core.faults import InjectedCrash, armed
from airflow_tpc.core.promote import tag_of, tagged

from .helpers import assert_invariant, committed_contents, plain_listing, stage
from .test_json_schema import validator


@pytest.fixture()
def bucket_sink(s3_options, s3_bucket) -> Sink:
    """A target in a fresh bucket of moto's server (a real S3 API over HTTP)."""
    return Sink(f"s3://{s3_bucket}/t", "objects", storage_options=s3_options)


def _published_names(sink: Sink, epoch: str) -> list[str]:
    folder = sink.layout.published_dir(epoch).rstrip("/") + "/"
    return sorted(o.path[len(folder):] for o in sink.storage.list(folder))


def test_attempt_tags_are_six_digits_and_read_back():
    assert tagged("day=1/p.parquet", 7) == "day=1/a000007-p.parquet"
    assert tagged("p.parquet", 12) == "a000012-p.parquet"
    assert tag_of("day=1/a000007-p.parquet") == 7
    assert tag_of("a0000071-p.parquet") == 71
    assert tag_of("day=1/p.parquet") is None
    assert tag_of("a12-p.parquet") is None  # fewer than six digits: a user's name


def test_a_rerun_replaces_the_epoch_and_leaves_only_its_own_tagged_files(bucket_sink):
    sink = bucket_sink
    first, _ = stage(sink, "1", {"p.parquet": b"old", "day=1/q.parquet": b"old q"})
    sink.commit(first)
    assert _published_names(sink, "1") == ["_tpc_published.json", "a000001-p.parquet",
                                           "day=1/a000001-q.parquet"]
    second, manifest = stage(sink, "1", {"p.parquet": b"new"})
    sink.commit(second, expected_digest=manifest.digest)

    assert committed_contents(sink) == {"1": [b"new"]}
    assert plain_listing(sink) == {"1": [b"new"]}  # attempt 1's files are gone
    assert _published_names(sink, "1") == ["_tpc_published.json", "a000002-p.parquet"]
    assert_invariant(sink, {"1": [b"new"]}, open_staging_ok=False)
    marker = json.loads(sink.storage.read_bytes(sink.layout.marker("1")))
    assert (marker["mode"], marker["attempt"]) == ("move", 2)
    assert not list(validator("published-marker").iter_errors(marker))
    states = {i.attempt: i.state for i in sink.describe("1")}
    assert states == {1: TxnState.COMMITTED, 2: TxnState.COMMITTED}


def test_a_crash_before_the_marker_keeps_readers_on_the_old_attempt_until_recover(bucket_sink):
    sink = bucket_sink
    first, _ = stage(sink, "1", {"p.parquet": b"old"})
    sink.commit(first)
    second, _ = stage(sink, "1", {"p.parquet": b"new"})
    with armed("promote.before_marker"), pytest.raises(InjectedCrash):
        sink.commit(second)
    # The copies are there, tagged; the marker still names attempt 1.
    assert committed_contents(sink) == {"1": [b"old"]}
    assert "a000002-p.parquet" in _published_names(sink, "1")

    sink.recover()
    assert committed_contents(sink) == {"1": [b"new"]}
    assert _published_names(sink, "1") == ["_tpc_published.json", "a000002-p.parquet"]
    assert_invariant(sink, {"1": [b"new"]}, open_staging_ok=False)


def test_a_crash_before_cleanup_is_finished_from_the_marker_by_recover(bucket_sink):
    sink = bucket_sink
    first, _ = stage(sink, "1", {"p.parquet": b"old", "day=2/r.parquet": b"old r"})
    sink.commit(first)
    second, _ = stage(sink, "1", {"p.parquet": b"new", "day=2/r.parquet": b"new r"})
    with armed("promote.before_cleanup"), pytest.raises(InjectedCrash):
        sink.commit(second)
    # Switched: readers see attempt 2 only, while attempt 1's files still lie there.
    assert committed_contents(sink) == {"1": [b"new", b"new r"]}
    assert len(_published_names(sink, "1")) == 5

    # recover re-runs promotion with no manifest to hand: what to keep comes from the
    # marker, and only the lower attempt's files go.
    sink.recover()
    assert committed_contents(sink) == {"1": [b"new", b"new r"]}
    assert plain_listing(sink) == {"1": [b"new", b"new r"]}
    assert _published_names(sink, "1") == ["_tpc_published.json", "a000002-p.parquet",
                                           "day=2/a000002-r.parquet"]
    assert_invariant(sink, {"1": [b"new", b"new r"]}, open_staging_ok=False)


def test_a_lower_attempt_rolled_forward_late_never_touches_the_higher_ones_files(bucket_sink):
    sink = bucket_sink
    first, _ = stage(sink, "1", {"p.parquet": b"first"})
    with armed("commit.after_decision"), pytest.raises(InjectedCrash):
        sink.commit(first)  # decided, never promoted
    second, _ = stage(sink, "1", {"p.parquet": b"second"})
    sink.commit(second)
    before = {o.path: sink.storage.read_bytes(o.path)
              for o in sink.storage.list(sink.layout.published_dir("1"))}

    sink.recover()  # rolls attempt 1 forward: a higher attempt is already published
    assert committed_contents(sink) == {"1": [b"second"]}
    after = {o.path: sink.storage.read_bytes(o.path)
             for o in sink.storage.list(sink.layout.published_dir("1"))}
    assert after == before
    assert_invariant(sink, {"1": [b"second"]}, open_staging_ok=False)


def test_a_file_a_user_put_in_the_epoch_folder_is_replaced_with_the_epoch(bucket_sink):
    """Untagged files in an epoch folder (a user's, or a local "move"'s) are displaced
    with the epoch: the epoch is replaced whole, never mixed."""
    sink = bucket_sink
    first, _ = stage(sink, "1", {"p.parquet": b"one"})
    sink.commit(first)
    by_hand = sink.storage.join(sink.layout.published_dir("1"), "extra.parquet")
    sink.storage.put(by_hand, b"by hand")
    second, _ = stage(sink, "1", {"p.parquet": b"two"})
    sink.commit(second)
    assert plain_listing(sink) == {"1": [b"two"]}
    assert _published_names(sink, "1") == ["_tpc_published.json", "a000002-p.parquet"]


def test_a_promoter_whose_copies_lose_their_source_to_the_winners_cleanup_answers_committed(
        s3_options, s3_bucket):
    """Two committers of one decision on a store without a promotion lock (S3, Azure):
    the winner publishes and starts removing staging while the loser's copies still read
    it.  The loser's failed copy is no error: the marker names this very decision, so it
    finishes the cleanup and answers committed.  (CI met this race on Azure with six
    committers: BlobNotFound from the loser while part of staging was still there.)"""
    sink = Sink(f"s3://{s3_bucket}/t", "objects", storage_options=s3_options)
    txn, manifest = stage(sink, "1", {"p.parquet": b"one", "q.parquet": b"two"})
    staging = sink.layout.staging("1", txn.attempt)
    survivor = sink.storage.join(staging, "q.parquet")
    fired = []

    def the_winner_finishes_first(name: str) -> None:
        if fired:
            return
        fired.append(name)
        winner = Sink(f"s3://{s3_bucket}/t", "objects", storage_options=s3_options)
        with armed("promote.before_copy", lambda _name: None):
            winner.commit(winner.transaction("1", txn.attempt), expected_digest=manifest.digest)
        # The winner's delete of staging is under way: one staged file is still there.
        sink.storage.put(survivor, b"two")

    with armed("promote.before_copy", the_winner_finishes_first):
        result = sink.commit(txn, expected_digest=manifest.digest)

    assert fired, "the loser never reached its copies"
    assert result.outcome in ("committed", "already_committed")
    assert committed_contents(sink) == {"1": [b"one", b"two"]}
    assert not sink.storage.list(staging)  # the loser finished the winner's cleanup
    assert_invariant(sink, {"1": [b"one", b"two"]}, open_staging_ok=False)
