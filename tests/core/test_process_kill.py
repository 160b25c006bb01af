"""SIGKILL the process running commit or abort at each protocol step, then rerun.

The child pauses at a named step (``AIRFLOW_TPC_PAUSE_AT``) and tells us so; we
kill it with SIGKILL — no exception handler, no ``finally``, no flushed buffers
— and a fresh process reruns the verb, as a retried Airflow task would.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from airflow_tpc import Sink

from ..conftest import make_store
from .helpers import assert_invariant, stage
from .test_crashpoints import ABORT_STEPS, COMMIT_STEPS

CHILD = textwrap.dedent("""
    import json, sys
    from airflow_tpc import Sink
    target, options, epoch, attempt, verb = sys.argv[1:6]
    sink = Sink(target, "killed", storage_options=json.loads(options))
    txn = sink.transaction(epoch, int(attempt))
    getattr(sink, verb)(txn)
""")


def _run_and_kill(tmp_path, store, txn, verb, step):
    flag = tmp_path / f"paused-{step}"
    env = dict(os.environ, AIRFLOW_TPC_PAUSE_AT=step, AIRFLOW_TPC_PAUSE_FLAG=str(flag))
    proc = subprocess.Popen([sys.executable, "-c", CHILD, store[0], json.dumps(store[1]),
                             txn.epoch, str(txn.attempt), verb], env=env)
    kill_when_paused(proc, flag, step)


def kill_when_paused(proc: subprocess.Popen, flag, step: str) -> None:
    """SIGKILL ``proc`` once it has written ``flag`` (paused at ``step``)."""
    deadline = time.time() + 600  # a busy 2-core machine: slow, not failed
    while not flag.exists():
        assert proc.poll() is None, f"child exited ({proc.returncode}) before reaching {step}"
        assert time.time() < deadline, f"child never reached {step}"
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL


CASES = [(kind, step) for kind in ("local", "s3") for step in COMMIT_STEPS[f"move-{kind}"]]


@pytest.mark.parametrize(("kind", "step"), CASES)
def test_sigkill_during_commit_then_rerun(kind, step, request, tmp_path):
    store = make_store(kind, request, tmp_path)
    sink = Sink(store[0], "killed", storage_options=store[1])
    old, _ = stage(sink, "1", {"a.parquet": b"old"})
    sink.commit(old)
    txn, manifest = stage(sink, "1", {"a.parquet": b"new", "b.parquet": b"new-b"})
    _run_and_kill(tmp_path, store, txn, "commit", step)
    rerun = Sink(store[0], "killed", storage_options=store[1])
    result = rerun.commit(rerun.transaction("1", txn.attempt), expected_digest=manifest.digest)
    assert result.outcome in ("committed", "already_committed")
    assert_invariant(rerun, {"1": [b"new", b"new-b"]}, open_staging_ok=False)


@pytest.mark.parametrize("step", ABORT_STEPS)
def test_sigkill_during_abort_then_rerun(step, tmp_path):
    store = (str(tmp_path / "t"), None)
    sink = Sink(store[0], "killed")
    keep, _ = stage(sink, "1", {"a.parquet": b"kept"})
    sink.commit(keep)
    txn, _ = stage(sink, "2", {"b.parquet": b"thrown away"})
    _run_and_kill(tmp_path, store, txn, "abort", step)
    rerun = Sink(store[0], "killed")
    rerun.abort(rerun.transaction("2", txn.attempt))
    assert_invariant(rerun, {"1": [b"kept"]}, open_staging_ok=False)
