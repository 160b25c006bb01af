"""The application guard and the runtime record, with real processes and no Spark
(airflow_tpc/airflow/utils/app_guard.py, spark_app.py): what is stopped, what never is."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from airflow_tpc import Sink
from airflow_tpc.airflow.utils import app_guard
from airflow_tpc.airflow.utils.spark_app import (
    failure_reason,
    new_record,
    runtime_path,
    stop_older,
    stop_recorded,
    write_record,
)

GUARD = Path(app_guard.__file__)


def _sleeper(marker: str | None, new_session: bool = True) -> subprocess.Popen:
    env = dict(os.environ)
    env.pop(app_guard.MARKER_ENV, None)
    if marker:
        env[app_guard.MARKER_ENV] = marker
    return subprocess.Popen(["sleep", "300"], env=env, start_new_session=new_session)


def _dead(proc: subprocess.Popen, timeout: float = 10) -> bool:
    try:
        proc.wait(timeout)
        return True
    except subprocess.TimeoutExpired:
        return False


@pytest.fixture
def procs():
    started: list[subprocess.Popen] = []
    yield started
    for p in started:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_begin_stops_only_lower_attempts_and_only_marked_processes(tmp_path, procs):
    sink = Sink(str(tmp_path / "t"), "ns")
    t1, t2 = sink.begin("2026-01-01"), None
    old_app = _sleeper("m1")  # the old attempt's application
    stray = _sleeper(None)  # a process that took the recorded pid's place: never killed
    procs += [old_app, stray]
    write_record(sink, t1, new_record(t1, "m1", {"pid": stray.pid, "pid_start": 0.0}))
    t2 = sink.begin("2026-01-01")
    newer_app = _sleeper("m2")
    procs.append(newer_app)
    write_record(sink, t2, new_record(t2, "m2", {"pid": newer_app.pid}))

    said = stop_older(sink, "2026-01-01", t2.attempt)
    assert said == [f"attempt {t1.attempt}: spark application stopped (1 process(es) killed)"]
    assert _dead(old_app)
    assert stray.poll() is None and newer_app.poll() is None  # not theirs to stop
    # write-once: a second write leaves the first record
    first = Path(runtime_path(sink, t1.epoch, t1.attempt)).read_bytes()
    write_record(sink, t1, new_record(t1, "other", {}))
    assert Path(runtime_path(sink, t1.epoch, t1.attempt)).read_bytes() == first
    assert "secret" not in first.decode().lower()


def test_record_of_another_machine_is_not_acted_on(tmp_path, procs):
    sink = Sink(str(tmp_path / "t"), "ns")
    txn = sink.begin("2026-01-01")
    app = _sleeper("m-elsewhere")
    procs.append(app)
    record = {**new_record(txn, "m-elsewhere", {}), "boot_id": "another-boot", "host": "h2"}
    Path(runtime_path(sink, txn.epoch, txn.attempt)).parent.mkdir(parents=True)
    Path(runtime_path(sink, txn.epoch, txn.attempt)).write_text(json.dumps(record))
    assert "not reachable" in stop_recorded(sink, txn.epoch, txn.attempt)
    assert app.poll() is None
    assert stop_recorded(sink, txn.epoch, txn.attempt + 1) is None  # no record


def test_guard_passes_output_and_exit_code_through(tmp_path):
    out = subprocess.run([sys.executable, "-I", str(GUARD), str(os.getpid()), "m", "--",
                          "sh", "-c", "echo from-spark-submit; exit 3"],
                         capture_output=True, text=True, timeout=60)
    assert (out.returncode, out.stdout) == (3, "from-spark-submit\n")


def test_guard_stops_the_tree_when_its_task_process_dies(tmp_path, procs):
    """The task process (here a shell) is SIGKILLed: the guard kills its command and a
    grandchild that left the session, found by the marker."""
    pids = tmp_path / "pids"
    script = tmp_path / "job.sh"
    script.write_text(f"setsid sleep 300 & echo $! > {pids}; sleep 300\n")
    env = {**os.environ, app_guard.MARKER_ENV: "m-task"}
    task = subprocess.Popen(["sh", "-c", f"{sys.executable} -I {GUARD} $$ m-task -- "
                             f"sh {script} & wait"], env=env, start_new_session=True)
    procs.append(task)
    deadline = time.monotonic() + 60
    while not (pids.exists() and pids.read_text().strip()):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    grandchild = psutil.Process(int(pids.read_text()))
    marked = app_guard.marked_pids("m-task")
    assert grandchild.pid in marked and len(marked) >= 4  # guard, sh, two sleeps
    task.kill()
    task.wait()
    gone, alive = psutil.wait_procs([psutil.Process(p) for p in marked if p != task.pid
                                     and psutil.pid_exists(p)], timeout=30)
    assert not [p for p in alive if p.status() != psutil.STATUS_ZOMBIE], alive
    assert not app_guard.marked_pids("m-task")


def test_failure_reason_names_what_happened():
    assert failure_reason(RuntimeError("x"), None, 0) == "spark job failed: RuntimeError"
    assert failure_reason(RuntimeError("x"), None, 3) == (
        "spark job failed: RuntimeError; spark application stopped (3 process(es) killed)")
    assert failure_reason(KeyboardInterrupt(), "SIGTERM", 2) == (
        "task process killed (SIGTERM); spark application stopped (2 process(es) killed)")
    reason = failure_reason(BrokenPipeError(32, "Broken pipe"), None, 4)
    assert reason.startswith("task process lost its supervisor (worker killed")
    assert reason.endswith("spark application stopped (4 process(es) killed)")


def test_admin_abort_stops_the_application_first(tmp_path, procs):
    """The run page's and the admin DAG's abort (admin.abort) stop the attempt's
    application before aborting it."""
    from airflow_tpc.airflow.utils import admin

    sink = Sink(str(tmp_path / "t"), "ns")
    txn = sink.begin("2026-01-01")
    app = _sleeper("m-admin")
    procs.append(app)
    write_record(sink, txn, new_record(txn, "m-admin", {"pid": app.pid}))
    result = admin.abort(sink, "2026-01-01", txn.attempt, "aborted from the run page")
    assert result["aborted"] == [txn.txn_id]
    assert _dead(app)
