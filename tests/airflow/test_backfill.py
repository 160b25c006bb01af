"""A real backfill: `airflow backfill create` + scheduler (LocalExecutor) + API server.

Five daily epochs, at most two runs at a time: every epoch is published exactly
once, and runs of different epochs really overlapped (each with its own transaction).
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

pytestmark = pytest.mark.timeout(900)

DAG_ID = "tpc_it_backfill"
EPOCHS = [f"2026-02-0{d}" for d in range(1, 6)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_http(url: str, timeout: float) -> None:
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url, timeout=2)
            return
        except Exception:
            time.sleep(0.5)
    raise TimeoutError(url)


def test_backfill_five_epochs_two_at_a_time(dagbag, data_root, tmp_path):
    from airflow import settings
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import sync_bag_to_db
    from airflow.models.dag import DagModel
    from airflow.models.dagrun import DagRun
    from sqlalchemy import select, update

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
        _wait_http(f"http://127.0.0.1:{port}/api/v2/version", 120)
        procs.append(subprocess.Popen([*airflow, "scheduler"], env=env,
                                      stdout=open(logs / "scheduler.log", "w"),  # noqa: SIM115
                                      stderr=subprocess.STDOUT))
        t0 = time.monotonic()
        subprocess.run([*airflow, "backfill", "create", "--dag-id", DAG_ID, "--from-date",
                        EPOCHS[0], "--to-date", EPOCHS[-1], "--max-active-runs", "2",
                        "--dag-run-conf", '{"rows": 1000}'], env=env, check=True,
                       capture_output=True, timeout=120)
        deadline = time.monotonic() + 700
        runs: list = []
        while time.monotonic() < deadline:
            with settings.Session() as session:
                runs = list(session.scalars(select(DagRun).where(DagRun.dag_id == DAG_ID)))
            if len(runs) >= 5 and all(str(r.state) in ("success", "failed",
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
    assert len(runs) >= 5, tail
    by_epoch = {r.data_interval_start.date().isoformat(): r for r in runs}
    assert sorted(by_epoch)[:5] == EPOCHS
    assert all(getattr(r.state, "value", r.state) == "success" for r in runs), (
        [(r.run_id, r.state) for r in runs], tail)
    assert all(getattr(r.run_type, "value", r.run_type) == "backfill" for r in runs)
    # At most two at a time, and really two at a time at some point.
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
