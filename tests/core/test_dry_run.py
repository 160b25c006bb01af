"""``recover``, ``gc`` and ``abort`` with ``--dry-run``: they say what they would change
and change nothing, byte for byte (ledger, staging, published files); then the real
command does what the dry run said.  Locally and on S3 through moto's server."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from airflow_tpc import Sink, TxnState
from airflow_tpc.cli import main
from airflow_tpc.core.faults import InjectedCrash, armed

from .helpers import full_tree, stage, write_staged


def _crash(point: str, fn, *args, **kwargs) -> None:
    with armed(point), pytest.raises(InjectedCrash):
        fn(*args, **kwargs)


def _messy(sink: Sink) -> None:
    """A target with one of everything recover and gc act on.  The crashes come last:
    every commit first rolls forward what an earlier crashed commit left."""
    txn, _ = stage(sink, "e1", {"a.parquet": b"A" * 10})
    sink.commit(txn)                                        # e1: committed, published
    stage(sink, "e2", {"b.parquet": b"B"})                  # e2: pre-committed, young
    stage(sink, "e5", {"e.parquet": b"E"}, precommit=False)  # e5: attempt 1 superseded
    stage(sink, "e5", {"e.parquet": b"E2"})                 #     by a pre-committed 2
    done, _ = stage(sink, "e7", {"g.parquet": b"G"})        # e7: committed, a zombie's
    sink.commit(done)                                       #     late file in its staging
    write_staged(sink, done, {"late.parquet": b"zombie"})
    stage(sink, "e6", {"f.parquet": b"F"})                  # e6: attempt 1 undecided below
    top, _ = stage(sink, "e6", {"f.parquet": b"F2"})        #     a decided, unpromoted 2
    _crash("commit.after_decision", sink.commit, top)
    aborted, _ = stage(sink, "e4", {"d.parquet": b"D"})     # e4: aborted, staging left
    _crash("abort.after_decision", sink.abort, aborted)


def _states(sink: Sink) -> dict[tuple[str, int], str]:
    return {(i.epoch, i.attempt): str(i.state) for i in sink.describe()}


def _cli(sink: Sink, options, *args: str) -> str:
    cmd = [sys.executable, "-m", "airflow_tpc", *args, sink.target]
    if options:
        cmd += ["--endpoint-url", options["endpoint_url"]]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_dry_runs_change_nothing_then_the_real_commands_do_what_they_said(store):
    target, options = store
    sink = Sink(target, "dry", storage_options=options)
    _messy(sink)
    before, states = full_tree(sink), _states(sink)

    plan = json.loads(_cli(sink, options, "recover", "--dry-run", "--json", "-q"))
    gc_plan = json.loads(_cli(sink, options, "gc", "--dry-run", "--json", "-q"))
    text = _cli(sink, options, "recover", "--dry-run", "-q")
    abort_text = _cli(sink, options, "abort", "--dry-run", "--epoch", "e2")
    assert full_tree(sink) == before and _states(sink) == states

    assert plan["dry_run"] is True
    assert sorted(map(tuple, plan["rolled_forward"])) == [("e6", 2)]
    assert sorted(map(tuple, plan["aborted"])) == [("e5", 1, "superseded"),
                                                  ("e6", 1, "superseded")]
    assert sorted(map(tuple, plan["cleaned"])) == [("e4", 1), ("e7", 1)]
    assert sorted(map(tuple, gc_plan["cleaned"])) == [("e4", 1), ("e7", 1)]
    assert gc_plan["dry_run"] is True
    assert text.startswith("dry run: nothing was changed")
    assert "roll forward (1):\n  epoch e6  attempt 2\n" in text
    assert abort_text.startswith("dry run: would abort dry/e2/1 (PRECOMMITTED)")

    report = sink.recover()
    assert not report.dry_run
    assert sorted(report.rolled_forward) == sorted(map(tuple, plan["rolled_forward"]))
    after = _states(sink)
    for epoch, attempt, _ in plan["aborted"]:
        assert after[(epoch, attempt)] == TxnState.ABORTED.value, (epoch, attempt)
    for epoch, attempt in plan["rolled_forward"]:
        assert after[(epoch, attempt)] == TxnState.COMMITTED.value
    for epoch, attempt in plan["cleaned"]:  # by the cleanup phase, or on finishing e4
        assert not list(sink.storage.list(sink.layout.staging(epoch, attempt)))
    assert after[("e2", 1)] == TxnState.PRECOMMITTED.value  # young: recover leaves it


def test_abort_dry_run_names_what_it_would_do_and_refuses_what_abort_refuses(tmp_path,
                                                                              capsys):
    sink = Sink(str(tmp_path / "t"), "dry")
    _messy(sink)
    before = full_tree(sink)
    assert main(["abort", sink.target, "--epoch", "e5", "--attempt", "1", "--dry-run"]) == 0
    assert "would abort dry/e5/1 (OPEN)" in capsys.readouterr().out
    assert main(["abort", sink.target, "--epoch", "e4", "--dry-run", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc == {"dry_run": True, "txn_id": "dry/e4/1", "state": "ABORTED",
                   "would_abort": None}
    assert main(["abort", sink.target, "--epoch", "e1", "--dry-run"]) == 2
    assert "is COMMITTED" in capsys.readouterr().err
    assert full_tree(sink) == before


def test_core_dry_run_reports_expired_attempts_without_aborting(tmp_path):
    sink = Sink(str(tmp_path / "t"), "dry")
    stage(sink, "old", {"x.parquet": b"X"})
    before = full_tree(sink)
    plan = sink.recover(now=10**12, dry_run=True)
    assert plan.aborted == [("old", 1, "expired")] and plan.dry_run
    assert full_tree(sink) == before
    assert sink.recover(now=10**12).aborted == plan.aborted
    assert _states(sink)[("old", 1)] == TxnState.EXPIRED.value
