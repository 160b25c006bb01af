"""The finisher's plan is what its real run then does (issue 34 §2): for each branch
of finishing an epoch — a decided, unpublished commit (publish), an undecided attempt
below it (abort), an attempt aborted earlier below it (discard), a lower commit it
displaced (clean), an epoch with no commit (discard) — the plan changes nothing, byte
for byte, and ``carry_out`` then does exactly its steps; recover's dry run lists the
same steps as the real recover then reports done."""

from __future__ import annotations

from airflow_tpc import Sink

from .helpers import full_tree, stage
from .test_dry_run import _crash


def _every_branch(sink: Sink) -> None:
    low, _ = stage(sink, "e1", {"a.parquet": b"A"})
    sink.commit(low)                                       # e1/1: published, displaced next
    stage(sink, "e1", {"a.parquet": b"A2"}, precommit=False)  # e1/2: undecided below
    gone, _ = stage(sink, "e1", {"a.parquet": b"A3"})
    _crash("abort.after_decision", sink.abort, gone)      # e1/3: aborted, staging left
    top, _ = stage(sink, "e1", {"a.parquet": b"A44"})
    _crash("commit.after_decision", sink.commit, top)     # e1/4: decided, not published
    lone, _ = stage(sink, "e2", {"b.parquet": b"B"})
    _crash("abort.after_decision", sink.abort, lone)      # e2: no commit, staging left


def test_each_branch_planned_is_carried_out_and_the_plan_writes_nothing(tmp_path):
    sink = Sink(str(tmp_path / "t"), "fin")
    _every_branch(sink)
    before = full_tree(sink)
    plan = sink.finisher.plan("e1")
    lone = sink.finisher.plan("e2")
    assert full_tree(sink) == before
    assert plan.steps[0].kind == "publish" and plan.steps[0].attempt == 4
    assert sorted((s.attempt, s.kind) for s in plan.steps[1:]) == [
        (1, "clean"), (2, "abort"), (3, "discard")]
    assert plan.winner == 4 and plan.rolls_forward
    assert (plan.steps[0].files, plan.steps[0].bytes) == (1, 3)
    assert "publish epoch e1 attempt 4, 1 file(s), 3 bytes" in str(plan)
    assert [(s.kind, s.attempt) for s in lone.steps] == [("discard", 1)]
    assert lone.winner is None
    done = sink.finisher.carry_out(plan)
    assert done.done == plan.steps and done.winner == 4 and not done.replanned
    assert sink.finisher.carry_out(lone).done == lone.steps
    states = {(i.epoch, i.attempt): str(i.state) for i in sink.describe()}
    assert states[("e1", 4)] == "COMMITTED" and states[("e1", 2)] == "ABORTED"
    assert sink.finisher.plan("e1").steps == [] and sink.finisher.plan("e2").steps == []


def test_recover_dry_run_lists_the_steps_the_real_recover_then_does(tmp_path):
    sink = Sink(str(tmp_path / "t"), "fin")
    _every_branch(sink)
    before = full_tree(sink)
    dry = sink.recover(dry_run=True)
    assert full_tree(sink) == before
    real = sink.recover()
    assert dry.finishing == real.finishing
    assert {(s.epoch, s.kind) for s in real.finishing} >= {("e1", "publish"), ("e2", "discard")}
    assert sink.recover(dry_run=True).finishing == []
