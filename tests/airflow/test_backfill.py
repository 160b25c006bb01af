"""A real backfill: `airflow backfill create` + scheduler (LocalExecutor) + API server.

Two daily epochs of a Spark pipeline (real spark-submit, a sensor in reschedule mode),
two runs at a time: both runs really overlapped, each with its own transaction, and
every epoch is published exactly once.  That ``max_active_runs`` holds a third run back
is tests/airflow/test_real_scheduler.py's (the same LocalExecutor on SQLite, three
epochs, two at a time, never three) and test_production_airflow.py's (Celery): a third
epoch here is a second wave of spark-submits that proves nothing more of airflow-tpc.

On a busy machine this is slow, not failing: every wait below is a deadline of
minutes polling a condition, and Airflow's own infrastructure timeouts (the task
supervisor's Execution API client, heartbeats, queued tasks) are raised for the
whole suite in ``conftest.py``.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from airflow_tpc import Sink, TxnState

from .helpers import read_rows

# Deadlines (seconds) for a busy 2-core machine: unloaded, the whole test takes
# about 2 minutes; these only bound a hang.
START_S = 600  # the API server answers
CREATE_S = 600  # `airflow backfill create` returns
RUNS_S = 2400  # both runs end
pytestmark = pytest.mark.timeout(START_S + CREATE_S + RUNS_S + 300)

DAG_ID = "tpc_it_backfill"
EPOCHS = ["2026-02-01", "2026-02-02"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_http(url: str, timeout: float, proc: subprocess.Popen) -> None:
    """Poll ``url`` until it answers (a deadline, not a delay); fail early if ``proc`` died."""
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url, timeout=10)
            return
        except Exception:
            if proc.poll() is not None:
                raise RuntimeError(f"the server exited ({proc.returncode}) before {url} "
                                   "answered") from None
            time.sleep(0.5)
    raise TimeoutError(f"{url} did not answer within {timeout} s")


def test_backfill_two_epochs_at_once(dagbag, data_root, tmp_path):
    from airflow import settings
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import sync_bag_to_db
    from airflow.models.dag import DagModel
    from airflow.models.dagrun import DagRun
    from sqlalchemy import select, update
    from sqlalchemy.exc import OperationalError

    DagBundlesManager().sync_bundles_to_db()
    sync_bag_to_db(dagbag, "dags-folder", None)
    with settings.Session() as session:
        # No scheduled runs of any test DAG: only the backfill's runs may execute.
        session.execute(update(DagModel).values(next_dagrun_create_after=None))
        session.execute(update(DagModel).where(DagModel.dag_id == DAG_ID).values(is_paused=False))
        session.commit()

    port = _free_port()
    env = {**os.environ,
           "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
           "AIRFLOW__CORE__PARALLELISM": "6",
           "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
           "AIRFLOW__API__PORT": str(port),
           "AIRFLOW__API__HOST": "127.0.0.1",
           "AIRFLOW__API_AUTH__JWT_SECRET": "tpc-test-jwt-secret-not-for-production",
           # The scheduler's log server: a free port, not 8793 (other test sessions).
           "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(_free_port()),
           "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "1",
           "AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE": "False"}
    logs = tmp_path
    airflow = [sys.executable, "-m", "airflow"]
    procs = []
    try:
        procs.append(subprocess.Popen([*airflow, "api-server", "--port", str(port), "--host",
                                       "127.0.0.1", "--workers", "1"], env=env,
                                      stdout=open(logs / "api.log", "w"),  # noqa: SIM115
                                      stderr=subprocess.STDOUT))
        _wait_http(f"http://127.0.0.1:{port}/api/v2/version", START_S, procs[0])
        t0 = time.monotonic()
        # The backfill is created before the scheduler starts: `backfill create` beside
        # a running scheduler can hit SQLite's "database is locked" on a busy machine.
        # The scheduler picks up the queued backfill runs when it starts.
        created = subprocess.run([*airflow, "backfill", "create", "--dag-id", DAG_ID,
                                  "--from-date", EPOCHS[0], "--to-date", EPOCHS[-1],
                                  "--max-active-runs", "2", "--dag-run-conf", '{"rows": 1000}'],
                                 env=env, capture_output=True, text=True, timeout=CREATE_S)
        assert created.returncode == 0, created.stdout[-3000:] + created.stderr[-3000:]
        procs.append(subprocess.Popen([*airflow, "scheduler"], env=env,
                                      stdout=open(logs / "scheduler.log", "w"),  # noqa: SIM115
                                      stderr=subprocess.STDOUT))
        deadline = time.monotonic() + RUNS_S
        runs: list = []
        while time.monotonic() < deadline:
            try:
                with settings.Session() as session:
                    runs = list(session.scalars(select(DagRun).where(DagRun.dag_id == DAG_ID)))
            except OperationalError:  # "database is locked" by a busy writer: poll again
                time.sleep(2)
                continue
            if len(runs) >= len(EPOCHS) and all(str(r.state) in ("success", "failed",
                                                      "DagRunState.SUCCESS",
                                                      "DagRunState.FAILED") for r in runs):
                break
            if any(p.poll() is not None for p in procs):
                break
            time.sleep(2)
        elapsed = time.monotonic() - t0
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
    tail = (logs / "scheduler.log").read_text()[-3000:]
    assert len(runs) >= len(EPOCHS), tail
    by_epoch = {r.data_interval_start.date().isoformat(): r for r in runs}
    assert sorted(by_epoch)[:len(EPOCHS)] == EPOCHS
    assert all(getattr(r.state, "value", r.state) == "success" for r in runs), (
        [(r.run_id, r.state) for r in runs], tail)
    assert all(getattr(r.run_type, "value", r.run_type) == "backfill" for r in runs)
    # Both runs at once: their spans overlap.
    spans = sorted((r.start_date, r.end_date) for r in runs)
    overlap = max(sum(1 for s, e in spans if s <= t < e) for t, _ in spans)
    assert overlap == 2, spans
    target = os.path.join(data_root, "backfill_target")
    assert read_rows(target) == {e: 1000 for e in EPOCHS}
    sink = Sink(target, "tpc_it_backfill")
    infos = sink.describe()
    assert {(i.epoch, i.state) for i in infos} == {(e, TxnState.COMMITTED) for e in EPOCHS}
    assert all(i.published and i.staging_files == 0 for i in infos)
    print(f"[backfill of {len(EPOCHS)} epochs, max 2 active: {elapsed:.0f} s]")
    assert Path(target).exists()
