"""Airflow as platform teams run it: PostgreSQL as the metadata DB, the CeleryExecutor
with a Redis broker and two Celery workers — docs/scheduler.md's
``scripts/airflow-local.sh start --celery``, run for real.

PostgreSQL and Redis come from the OS (bootstrap.sh installs them: Debian's
``postgresql`` and ``redis-server``); the script starts a throw-away cluster and a
broker on free ports and stops both with the services.  One test, one start (the
services are what is expensive):

1. a backfill of three daily epochs, two runs at a time, into a folder, a Delta table
   and an Iceberg table (tests/airflow/dags/tpc_it_scheduler.py): every epoch
   published exactly once in each, both workers ran tasks, every task process exited 0;
2. a worker SIGKILLed in the middle of a commit — after the decision, before anything
   is published (tests/airflow/dags/tpc_it_celery_kill.py): Airflow finds the task
   without heartbeat, retries it on the other worker, and the epoch is published once.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import sys
import time
from pathlib import Path

import psycopg2
import pytest

from airflow_tpc import Sink, TxnState

from .test_real_scheduler import _env, _processes_of, _run

HERE = Path(__file__).resolve().parent
SCRIPTS = HERE.parent.parent / "scripts"
EPOCHS = ["2026-11-01", "2026-11-02", "2026-11-03"]
START_S, BACKFILL_S, KILL_S, STOP_S = 600, 600, 900, 180
#: How long a task may go without heartbeat before the scheduler fails it (then retries):
#: the time a killed worker's task takes to be noticed.  Live tasks beat every few seconds.
HEARTBEAT_TIMEOUT_S = 90
pytestmark = pytest.mark.timeout(START_S + BACKFILL_S + KILL_S + 2 * STOP_S + 120)


def _local(home: Path, monkeypatch: pytest.MonkeyPatch):
    """The recipe's own client (scripts/airflow_local.py) for this AIRFLOW_HOME: its REST
    calls and its record of the services' pids."""
    monkeypatch.syspath_prepend(str(SCRIPTS))
    monkeypatch.setenv("AIRFLOW_HOME", str(home))
    import airflow_local

    return airflow_local.Local()


def _query(home: Path, sql: str, *args) -> list[tuple]:
    port = json.loads((home / "run" / "postgres.json").read_text())["port"]
    db = psycopg2.connect(host="127.0.0.1", port=port, user="airflow", dbname="airflow")
    try:
        with db, db.cursor() as cur:
            cur.execute(sql, args)
            return cur.fetchall()
    finally:
        db.close()  # else `stop` waits on this connection


def _finished(log: Path) -> dict[str, tuple[int, str]]:
    """``{task instance id: (exit code, final state)}`` from a worker's supervisor log."""
    found = re.findall(r"Workload finished .* exit_code=(-?\d+) final_state=(\w+) "
                       r".*workload_id=([0-9a-f-]+)", log.read_text(errors="replace"))
    return {wid.replace("-", ""): (int(code), state) for code, state, wid in found}


def _finished_in(logs: Path, workers: tuple[str, ...], ids: set[str]
                 ) -> dict[str, dict[str, tuple[int, str]]]:
    """Each worker's finished workloads, once all of ``ids`` are among them: a worker
    logs a workload's end just after its task's state reached the API (so after the run
    may already read as done); a bounded wait, not a sleep for ordering."""
    deadline = time.monotonic() + 180
    while True:
        found = {w: _finished(logs / f"{w}.log") for w in workers}
        if ids <= {k for f in found.values() for k in f} or time.monotonic() > deadline:
            return found
        time.sleep(1)


def _kill_session(leader: int) -> list[int]:
    """SIGKILL every process of the session ``leader`` leads (a worker and its tasks)."""
    killed = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        if int(fields[3]) == leader and fields[0] != "Z":
            os.kill(int(proc.name), signal.SIGKILL)
            killed.append(int(proc.name))
    return killed


def _session_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[3])


def test_postgres_and_celery_backfill_and_a_worker_killed_mid_commit(tmp_path, monkeypatch):
    for tool in ("redis-server", "initdb"):
        assert shutil.which(tool) or list(Path("/usr/lib/postgresql").glob(f"*/bin/{tool}")), (
            f"{tool} is missing: run scripts/bootstrap.sh as root (it installs Debian's "
            "postgresql and redis-server), or apt-get install them")
    home, dags, target = tmp_path / "home", tmp_path / "dags", tmp_path / "target"
    dags.mkdir()
    for dag in ("tpc_it_scheduler", "tpc_it_celery_kill"):
        shutil.copy(HERE / "dags" / f"{dag}.py", dags)
    flag = tmp_path / "paused.pid"
    env = _env(home, dags, target)
    (tmp_path / "iceberg" / "warehouse").mkdir(parents=True)
    catalog = {"type": "sql", "uri": f"sqlite:///{tmp_path}/iceberg/catalog.db",
               "warehouse": f"file://{tmp_path}/iceberg/warehouse"}
    env.update({
        "AIRFLOW_CONN_TPC_IT_SCHEDULER_CATALOG": json.dumps({
            "conn_type": "iceberg_catalog", "host": catalog["uri"],
            "schema": catalog["warehouse"], "extra": {"type": "sql"}}),
        "TPC_IT_KILL_FLAG": str(flag),
        "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": str(HEARTBEAT_TIMEOUT_S)})
    try:
        started = _run(env, "start", "--celery", timeout=START_S + 60)
        print(started.stdout, started.stderr)
        assert started.returncode == 0, started.stdout + started.stderr
        assert "PostgreSQL at postgresql+psycopg2://airflow@127.0.0.1:" in started.stdout
        status = _run(env, "status", timeout=120).stdout
        assert status.count(" running ") == 8, status  # 4 services, 2 workers, DB, broker

        # 1. A backfill through Celery on PostgreSQL.
        done = _run(env, "backfill", "tpc_it_scheduler", EPOCHS[0], EPOCHS[-1],
                    "--max-active-runs", "2", "--timeout", str(BACKFILL_S),
                    timeout=BACKFILL_S + 120)
        print(done.stdout, done.stderr)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "OK: each of the 3 epoch(s) has exactly one published attempt" in done.stdout
        ran = {r[0].replace("-", ""): r[1] for r in _query(
            home, "SELECT id::text, task_id FROM task_instance WHERE dag_id = %s AND "
            "state = 'success'", "tpc_it_scheduler")}
        assert len(ran) == 27, sorted(ran.values())  # 3 runs x 3 targets x 3 tasks
        logs = home / "logs" / "services"
        by_worker = _finished_in(logs, ("worker-1", "worker-2"), set(ran))
        assert all(set(ran) & set(f) for f in by_worker.values()), "one worker ran nothing"
        exits = {**by_worker["worker-1"], **by_worker["worker-2"]}
        assert {k: exits.get(k) for k in ran} == dict.fromkeys(ran, (0, "success"))

        # 2. A worker SIGKILLed mid-commit; the retry runs on the other one.
        local = _local(home, monkeypatch)
        token = local.token()
        deadline = time.monotonic() + 300
        while True:  # the dag-processor must have parsed it
            try:
                local.request("GET", "/api/v2/dags/tpc_it_celery_kill", token=token)
                break
            except Exception:
                assert time.monotonic() < deadline, "tpc_it_celery_kill was never parsed"
                time.sleep(2)
        local.request("PATCH", "/api/v2/dags/tpc_it_celery_kill?update_mask=is_paused",
                      {"is_paused": False}, token=token)
        run = local.request("POST", "/api/v2/dags/tpc_it_celery_kill/dagRuns",
                            {"logical_date": "2026-11-05T00:00:00Z"}, token=token)
        deadline = time.monotonic() + KILL_S / 3
        while not (flag.exists() and flag.read_text().strip()):
            assert time.monotonic() < deadline, "the commit never reached its decision"
            time.sleep(1)
        paused = int(flag.read_text())
        workers = {local.pid(w): w for w in ("worker-1", "worker-2")}
        victim = workers[_session_of(paused)]
        assert _kill_session(local.pid(victim))
        survivor = ({"worker-1", "worker-2"} - {victim}).pop()
        # Decided, not yet published: the ledger says COMMITTED, no marker yet.
        kill_sink = Sink(f"{target}_kill", "tpc_it_celery_kill")
        assert [(i.state, i.published) for i in kill_sink.describe()] == [
            (TxnState.COMMITTED, False)]
        deadline = time.monotonic() + KILL_S
        path = f"/api/v2/dags/tpc_it_celery_kill/dagRuns/{run['dag_run_id']}"
        while (state := local.request("GET", path, token=token)["state"]) not in (
                "success", "failed"):
            assert time.monotonic() < deadline, f"the run is still {state}"
            time.sleep(3)
        commit = _query(home, "SELECT id::text, state, try_number FROM task_instance WHERE "
                        "dag_id = %s AND task_id = 'commit'", "tpc_it_celery_kill")
        assert state == "success" and [c[1:] for c in commit] == [("success", 2)], commit
        retry_id = commit[0][0].replace("-", "")
        retried = _finished_in(logs, (survivor,), {retry_id})[survivor].get(retry_id)
        assert retried == (0, "success"), f"the retry did not finish on {survivor}"
    finally:
        stopped = _run(env, "stop", timeout=STOP_S)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert _processes_of(home) == []  # services, workers, PostgreSQL and Redis
    assert not (home / "run" / "postgres.json").exists()

    # Exactly once, read from each target itself.
    from airflow_tpc.tables import open_sink

    for name, props in ((str(target), None), (f"delta+file://{target}_delta", None),
                        ("iceberg://sched/tpc.events", catalog)):
        infos = open_sink(name, "tpc_it_scheduler", catalog_properties=props).describe()
        assert sorted((i.epoch, i.state) for i in infos) == [
            (e, TxnState.COMMITTED) for e in EPOCHS], name
        assert all(i.published and not i.superseded for i in infos), infos
    infos = Sink(f"{target}_kill", "tpc_it_celery_kill").describe()
    assert [(i.epoch, i.attempt, i.state, i.published) for i in infos] == [
        ("2026-11-05", 1, TxnState.COMMITTED, True)]
    assert "terminate called" not in "".join(
        p.read_text(errors="replace") for p in (home / "logs").rglob("*.log"))
    del sys.modules["airflow_local"]
