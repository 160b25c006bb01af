"""A crash between every pair of protocol steps of commit and abort, then recover.

The list of steps is not hand-maintained trust: ``test_every_step_is_covered``
records the crash points a real commit/abort passes and fails if one is missing
here, so a new step in the protocol cannot go untested.
"""

from __future__ import annotations

import pytest

from airflow_tpc import Sink, SinkConfig, TxnState
from airflow_tpc.core import faults
from airflow_tpc.core.faults import InjectedCrash, armed

from ..conftest import make_store
from .helpers import assert_invariant, committed_contents, stage

COMMIT_STEPS = {
    "move-local": ["commit.before_decision", "commit.after_decision", "promote.before_marker",
                   "promote.before_swap", "promote.after_swap", "commit.before_published"],
    "move-s3": ["commit.before_decision", "commit.after_decision", "promote.before_copy",
                "promote.before_marker", "promote.before_cleanup", "commit.before_published"],
    "manifest": ["commit.before_decision", "commit.after_decision", "promote.before_marker",
                 "promote.before_cleanup", "commit.before_published"],
}
ABORT_STEPS = ["abort.before_decision", "abort.after_decision", "abort.after_cleanup"]
OLD, NEW = [b"old-1", b"old-2"], [b"new-1"]


def _sink(store, mode):
    target, options = store
    return Sink(target, "crashy", storage_options=options, config=SinkConfig(promotion=mode))


def _kind(store, mode):
    if mode == "manifest":
        return "manifest"
    return "move-s3" if store[0].startswith("s3://") else "move-local"


def _setup(sink):
    """Epoch 5 published with OLD; attempt 2 pre-committed with NEW."""
    txn1, _ = stage(sink, "5", {"a.parquet": OLD[0], "b.parquet": OLD[1]})
    sink.commit(txn1)
    txn2, manifest = stage(sink, "5", {"a.parquet": NEW[0]})
    return txn2, manifest


@pytest.mark.parametrize("mode", ["move", "manifest"])
def test_every_step_is_covered(store, mode):
    sink = _sink(store, mode)
    txn, _ = _setup(sink)
    faults.reset()
    sink.commit(txn)
    passed = [p for p in faults.seen() if p.startswith(("commit.", "promote."))]
    assert passed == COMMIT_STEPS[_kind(store, mode)]
    txn3, _ = stage(sink, "6", {"z.parquet": b"z"})
    faults.reset()
    sink.abort(txn3)
    assert [p for p in faults.seen() if p.startswith("abort.")] == ABORT_STEPS


CASES = [(kind, mode, step)
         for kind in ("local", "s3") for mode in ("move", "manifest")
         for step in COMMIT_STEPS["manifest" if mode == "manifest" else f"move-{kind}"]]


@pytest.mark.parametrize(("kind", "mode", "step"), CASES)
def test_crash_during_commit_then_recover(kind, mode, step, request, tmp_path):
    store = make_store(kind, request, tmp_path)
    sink = _sink(store, mode)
    txn, manifest = _setup(sink)
    with armed(step), pytest.raises(InjectedCrash):
        sink.commit(txn, expected_digest=manifest.digest)
    # At the crash, readers see the old epoch or the new one, never a mix.
    assert committed_contents(sink)["5"] in (sorted(OLD), sorted(NEW))

    restarted = _sink(store, mode)  # a new process: only what is in storage survives
    restarted.recover()
    decided = step != "commit.before_decision"
    expected = NEW if decided else OLD
    assert committed_contents(restarted) == {"5": sorted(expected)}
    state = {i.attempt: i.state for i in restarted.describe("5")}
    assert state[2] == (TxnState.COMMITTED if decided else TxnState.PRECOMMITTED)
    # The retried commit task converges to exactly one copy of the new output.
    result = restarted.commit(restarted.transaction("5", 2), expected_digest=manifest.digest)
    assert result.outcome == ("already_committed" if decided else "committed")
    assert_invariant(restarted, {"5": NEW}, open_staging_ok=False)


@pytest.mark.parametrize("step", ABORT_STEPS)
def test_crash_during_abort_then_recover(store, step):
    sink = _sink(store, "move")
    txn, _ = _setup(sink)
    with armed(step), pytest.raises(InjectedCrash):
        sink.abort(txn)
    restarted = _sink(store, "move")
    restarted.recover()
    if step == "abort.before_decision":
        # No decision: the attempt is still pre-committed; the retried abort finishes it.
        assert restarted.describe("5")[-1].state is TxnState.PRECOMMITTED
    restarted.abort(restarted.transaction("5", 2))
    restarted.abort(restarted.transaction("5", 2))  # idempotent
    assert restarted.describe("5")[-1].state is TxnState.ABORTED
    assert_invariant(restarted, {"5": OLD}, open_staging_ok=False)
