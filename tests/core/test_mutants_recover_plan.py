"""``recover(dry_run=True)`` and ``gc(dry_run=True)`` in-process: the plan is exactly
what the real recover then does, and the plan changes nothing.

tests/core/test_dry_run.py proves the same through the CLI, in a child process; mutation
testing (docs/mutation.md) selects tests by what they run in-process, so 30 mutants of
the plan (``SinkMaintenance._plan_finish_epoch``: the winner dropped, the
"undecided below the winner" test inverted, the reason text changed) survived it.  Here
the plan and the real report are compared field by field on the same messy target.
"""

from __future__ import annotations

from airflow_tpc import Sink, TxnState

from .helpers import full_tree, stage
from .test_dry_run import _crash, _messy, _states


def test_the_plan_is_what_recover_then_does_and_changes_nothing(tmp_path):
    sink = Sink(str(tmp_path / "t"), "dry")
    _messy(sink)
    # e8: an abort decided (its staging left) below a decided, unpromoted commit: the
    # plan reads the lower decision and must not name it as an undecided attempt.
    aborted, _ = stage(sink, "e8", {"h.parquet": b"H"})
    _crash("abort.after_decision", sink.abort, aborted)
    top, _ = stage(sink, "e8", {"h.parquet": b"H2"})
    _crash("commit.after_decision", sink.commit, top)
    before, states = full_tree(sink), _states(sink)

    plan = sink.recover(dry_run=True)
    assert full_tree(sink) == before and _states(sink) == states
    assert plan.dry_run
    assert plan.rolled_forward == [("e6", 2), ("e8", 2)]
    assert plan.aborted == [("e5", 1, "superseded"), ("e6", 1, "superseded")]
    assert sorted(plan.cleaned) == [("e4", 1), ("e7", 1), ("e8", 1)]
    assert plan.errors == [] and plan.abandoned == []
    # gc's dry run likewise: the same finished staging named, nothing removed (a gc that
    # dropped dry_run would delete it here).
    assert sorted(sink.gc(dry_run=True)) == sorted(plan.cleaned)
    assert full_tree(sink) == before

    report = sink.recover()
    assert not report.dry_run
    assert report.rolled_forward == plan.rolled_forward
    after = _states(sink)
    # The real report names only the aborts of recover's own loop (e5/1); e6/1 is
    # aborted while e6's commit is finished, which the plan names too: both are aborted.
    assert report.aborted == [("e5", 1, "superseded")]
    assert after[("e6", 2)] == after[("e8", 2)] == TxnState.COMMITTED.value
    assert after[("e8", 1)] == TxnState.ABORTED.value
    assert after[("e6", 1)] == after[("e5", 1)] == TxnState.ABORTED.value
    assert after[("e2", 1)] == TxnState.PRECOMMITTED.value  # young: neither touches it
    # A second plan on the recovered target has nothing left to do.
    again = sink.recover(dry_run=True)
    assert again.rolled_forward == [] and again.aborted == [] and again.cleaned == []
