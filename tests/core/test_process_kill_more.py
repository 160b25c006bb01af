"""SIGKILL at protocol steps test_process_kill.py does not reach.

- abort on S3 at each abort step (test_process_kill.py kills abort on a local
  target only);
- commit in ``promotion="manifest"`` mode at each of its steps, on both stores
  (test_process_kill.py kills the default "move" mode only);
- recover at its own crash points (before an abort, before the staging clean-up).

As there, the child pauses at the named step and is killed with SIGKILL (no
handler, no ``finally``); a fresh process reruns the verb as a retried task
would, and the target must satisfy the invariant.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from airflow_tpc import Sink, SinkConfig, TxnState

from ..conftest import make_store
from .helpers import assert_invariant, committed_contents, stage, write_staged
from .test_crashpoints import ABORT_STEPS, COMMIT_STEPS
from .test_process_kill import kill_when_paused

CHILD = textwrap.dedent("""
    import json, sys
    from airflow_tpc import Sink, SinkConfig
    spec = json.loads(sys.argv[1])
    sink = Sink(spec["target"], spec["namespace"], storage_options=spec["options"],
                config=SinkConfig(**spec["config"]))
    if spec["verb"] == "recover":
        sink.recover()
    else:
        getattr(sink, spec["verb"])(sink.transaction(spec["epoch"], spec["attempt"]))
""")
NAMESPACE = "killed"


def _sink(store, **config) -> Sink:
    return Sink(store[0], NAMESPACE, storage_options=store[1], config=SinkConfig(**config))


def _run_and_kill(tmp_path, store, verb, step, *, txn=None, config=None):
    """Run ``verb`` in a child process, SIGKILL it once it pauses at ``step``."""
    flag = tmp_path / f"paused-{verb}-{step}"
    spec = {"target": store[0], "options": store[1], "namespace": NAMESPACE, "verb": verb,
            "config": config or {}, "epoch": txn.epoch if txn else None,
            "attempt": txn.attempt if txn else None}
    env = dict(os.environ, AIRFLOW_TPC_PAUSE_AT=step, AIRFLOW_TPC_PAUSE_FLAG=str(flag))
    proc = subprocess.Popen([sys.executable, "-c", CHILD, json.dumps(spec)], env=env)
    try:
        kill_when_paused(proc, flag, step)
    finally:
        if proc.poll() is None:  # a failed assertion above: do not leave it sleeping
            proc.kill()
            proc.wait()


# ------------------------------------------------------------- abort on S3
@pytest.mark.parametrize("step", ABORT_STEPS)
def test_sigkill_during_abort_on_s3_then_rerun(step, request, tmp_path):
    store = make_store("s3", request, tmp_path)
    sink = _sink(store)
    keep, _ = stage(sink, "1", {"a.parquet": b"kept"})
    sink.commit(keep)
    txn, _ = stage(sink, "2", {"b.parquet": b"thrown away", "c/d.parquet": b"also"})
    _run_and_kill(tmp_path, store, "abort", step, txn=txn)

    rerun = _sink(store)
    state = rerun.describe("2")[-1].state
    assert state is (TxnState.PRECOMMITTED if step == "abort.before_decision"
                     else TxnState.ABORTED)
    rerun.abort(rerun.transaction("2", txn.attempt))
    assert rerun.describe("2")[-1].state is TxnState.ABORTED
    assert_invariant(rerun, {"1": [b"kept"]}, open_staging_ok=False)
    rerun.recover()
    assert_invariant(rerun, {"1": [b"kept"]}, open_staging_ok=False)


# ------------------------------------------------- commit in "manifest" mode
CASES = [(kind, step) for kind in ("local", "s3") for step in COMMIT_STEPS["manifest"]]


@pytest.mark.parametrize(("kind", "step"), CASES)
def test_sigkill_during_manifest_mode_commit_then_rerun(kind, step, request, tmp_path):
    store = make_store(kind, request, tmp_path)
    config = {"promotion": "manifest"}
    sink = _sink(store, **config)
    old, _ = stage(sink, "1", {"a.parquet": b"old"})
    sink.commit(old)
    txn, manifest = stage(sink, "1", {"a.parquet": b"new", "b.parquet": b"new-b"})
    _run_and_kill(tmp_path, store, "commit", step, txn=txn, config=config)

    rerun = _sink(store, **config)
    # killed mid-way, readers see one attempt's output, never a mix
    assert committed_contents(rerun)["1"] in ([b"old"], [b"new", b"new-b"])
    result = rerun.commit(rerun.transaction("1", txn.attempt), expected_digest=manifest.digest)
    assert result.outcome == ("committed" if step == "commit.before_decision"
                              else "already_committed")
    assert_invariant(rerun, {"1": [b"new", b"new-b"]}, open_staging_ok=False)
    rerun.recover()  # nothing left to do, nothing undone
    assert_invariant(rerun, {"1": [b"new", b"new-b"]}, open_staging_ok=False)
    info = {i.attempt: i for i in rerun.describe("1")}
    assert info[txn.attempt].published and info[old.attempt].superseded


# ------------------------------------------------- recover at its own steps
@pytest.mark.parametrize("step", ["recover.before_abort", "recover.before_cleanup"])
@pytest.mark.parametrize("kind", ["local", "s3"])
def test_sigkill_during_recover_then_rerun(kind, step, request, tmp_path):
    """Epoch 1: a superseded pre-commit (aborted by recover); epoch 2: an aborted
    attempt whose zombie wrote again (cleaned by recover)."""
    store = make_store(kind, request, tmp_path)
    sink = _sink(store)
    stage(sink, "1", {"a.parquet": b"superseded"})
    live, _ = stage(sink, "1", {"a.parquet": b"live"})
    zombie, _ = stage(sink, "2", {"z.parquet": b"aborted"})
    sink.abort(zombie)
    write_staged(sink, zombie, {"z.parquet": b"late write"})
    _run_and_kill(tmp_path, store, "recover", step)

    rerun = _sink(store)
    rerun.recover()
    assert_invariant(rerun, {})
    state = {(i.epoch, i.attempt): i.state for i in rerun.describe()}
    assert state == {("1", 1): TxnState.ABORTED, ("1", live.attempt): TxnState.PRECOMMITTED,
                     ("2", 1): TxnState.ABORTED}
    assert [(i.epoch, i.attempt) for i in rerun.describe() if i.staging_files] == \
        [("1", live.attempt)]
    rerun.commit(rerun.transaction("1", live.attempt))
    assert_invariant(rerun, {"1": [b"live"]}, open_staging_ok=False)
