"""docs/scheduler.md's recipe, run for real: scripts/airflow-local.sh start, backfill, stop.

The real api-server, scheduler (LocalExecutor), dag-processor and triggerer on a SQLite
metadata DB, in a temporary AIRFLOW_HOME on free ports (not the session's own home from
conftest.py).  A backfill of three daily epochs with at most two runs at a time must
commit every epoch exactly once — into a folder, a Delta table and an Iceberg table — two
runs must really have run at once, every task process must exit 0 (none ends in a native
library's teardown), and ``stop`` must leave no process behind.  The DAG is
tests/airflow/dags/tpc_it_scheduler.py: the example DAG's shape without its Spark job, so
the test fits its budget on a busy 2-core machine.

Unloaded this takes about 2.5 minutes; the deadlines below only bound a hang.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import subprocess
from datetime import datetime
from pathlib import Path

import pytest

from airflow_tpc import Sink, TxnState

HERE = Path(__file__).resolve().parent
SCRIPT = HERE.parent.parent / "scripts" / "airflow-local.sh"
DAG_ID = "tpc_it_scheduler"
EPOCHS = ["2026-11-01", "2026-11-02", "2026-11-03"]
START_S = 420  # migrate + four services healthy
BACKFILL_S = 600  # the backfill's runs end
STOP_S = 150
pytestmark = pytest.mark.timeout(START_S + BACKFILL_S + 2 * STOP_S + 60)


def _env(home: Path, dags: Path, target: Path) -> dict[str, str]:
    """The caller's environment without this session's Airflow settings (conftest.py
    sets them for its own AIRFLOW_HOME), plus the recipe's three knobs."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("AIRFLOW", "TPC_", "SPARK_", "PYSPARK_"))}
    env.update({"AIRFLOW_HOME": str(home), "AIRFLOW_LOCAL_DAGS": str(dags),
                "TPC_EXAMPLE_TARGET": str(target), "AIRFLOW_LOCAL_START_TIMEOUT": str(START_S)})
    return env


def _run(env: dict[str, str], *args: str, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([str(SCRIPT), *args], env=env, capture_output=True, text=True,
                          timeout=timeout)


def _processes_of(home: Path) -> list[str]:
    """Live processes whose environment has this AIRFLOW_HOME (any the services started)."""
    needle = f"AIRFLOW_HOME={home}\0".encode()
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            if needle in (proc / "environ").read_bytes():
                state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
                if state != "Z":
                    found.append(f"{proc.name}: {(proc / 'cmdline').read_bytes()[:200]!r}")
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    return found


def test_bad_input_is_one_clear_error(tmp_path):
    env = _env(tmp_path / "home", tmp_path / "dags", tmp_path / "target")
    bad = _run(env, "backfill", DAG_ID, "2026-11", "2026-11-03", timeout=120)
    assert bad.returncode == 2 and bad.stderr == "error: not a date (YYYY-MM-DD): '2026-11'\n"
    not_started = _run(env, "backfill", DAG_ID, *EPOCHS[::2], timeout=120)
    assert not_started.returncode == 2
    assert not_started.stderr.startswith("error: not started: no "), not_started.stderr
    assert "Traceback" not in not_started.stderr
    assert not (tmp_path / "home" / "airflow.db").exists()


def test_backfill_through_real_services(tmp_path):
    home, dags, target = tmp_path / "home", tmp_path / "dags", tmp_path / "target"
    dags.mkdir()
    shutil.copy(HERE / "dags" / f"{DAG_ID}.py", dags)
    env = _env(home, dags, target)
    (tmp_path / "iceberg" / "warehouse").mkdir(parents=True)
    catalog = {"type": "sql", "uri": f"sqlite:///{tmp_path}/iceberg/catalog.db",
               "warehouse": f"file://{tmp_path}/iceberg/warehouse"}
    env["AIRFLOW_CONN_TPC_IT_SCHEDULER_CATALOG"] = json.dumps({
        "conn_type": "iceberg_catalog", "host": catalog["uri"],
        "schema": catalog["warehouse"], "extra": {"type": "sql"}})
    try:
        started = _run(env, "start", timeout=START_S + 60)
        assert started.returncode == 0, started.stdout + started.stderr
        assert "all services healthy" in started.stdout
        status = _run(env, "status", timeout=120)
        assert status.returncode == 0 and status.stdout.count(" running ") == 4, status.stdout
        done = _run(env, "backfill", DAG_ID, EPOCHS[0], EPOCHS[-1], "--max-active-runs", "2",
                    "--timeout", str(BACKFILL_S), timeout=BACKFILL_S + 120)
        print(started.stdout, done.stdout, done.stderr)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "OK: each of the 3 epoch(s) has exactly one published attempt" in done.stdout
    finally:
        stopped = _run(env, "stop", timeout=STOP_S)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert _processes_of(home) == []
    assert _run(env, "status", timeout=120).stdout.count(" stopped ") == 4

    # Exactly once, read from the target's own ledger: one committed, published attempt
    # per epoch, nothing pending, no staging left, no other epoch.
    infos = Sink(str(target), DAG_ID).describe()
    assert sorted((i.epoch, i.state) for i in infos) == [(e, TxnState.COMMITTED) for e in EPOCHS]
    assert all(i.published and not i.superseded and i.staging_files == 0 for i in infos)

    # max_active_runs=2 honoured: at most two runs at once, and two at once at some point.
    with sqlite3.connect(home / "airflow.db") as db:
        rows = db.execute("SELECT start_date, end_date, state, run_type FROM dag_run "
                          "WHERE dag_id = ?", (DAG_ID,)).fetchall()
    assert sorted((r[2], r[3]) for r in rows) == [("success", "backfill")] * 3, rows
    spans = [(datetime.fromisoformat(s), datetime.fromisoformat(e)) for s, e, _, _ in rows]
    overlap = max(sum(1 for s, e in spans if s <= t < e) for t, _ in spans)
    assert overlap == 2, spans

    # The tables beside the folder: each epoch one committed, published attempt, its
    # rows once, read back through delta-rs and pyiceberg.
    from airflow_tpc.tables import open_sink

    for table, props in ((f"delta+file://{target}_delta", None),
                         ("iceberg://sched/tpc.events", catalog)):
        sink = open_sink(table, DAG_ID, catalog_properties=props)
        infos = sink.describe()
        assert sorted((i.epoch, i.state) for i in infos) == [
            (e, TxnState.COMMITTED) for e in EPOCHS], table
        assert all(i.published and not i.superseded for i in infos), infos
        rows = sink.table_target.pyarrow_dataset().to_table() if "delta" in table else \
            sink.table_target.load_table().scan().to_arrow()
        assert sorted(rows["epoch"].to_pylist()) == sorted(EPOCHS * 3), table

    # Every task process exited 0 — the LocalExecutor's supervisor logs each one's exit
    # code — and none ended in a native library's teardown ("terminate called ..."):
    # 3 runs x 3 targets x (submit, sensor, commit).  A task process is a fork that
    # leaves through os._exit (Airflow's supervisor), so no C++ static destructor and no
    # interpreter teardown runs there; this holds it to that.
    with sqlite3.connect(home / "airflow.db") as db:
        ran = {r[0].replace("-", ""): r[1] for r in db.execute(
            "SELECT id, task_id FROM task_instance WHERE dag_id = ? AND state = 'success'",
            (DAG_ID,))}
    assert sorted(set(ran.values())) == sorted(
        [f"{verb}{suffix}" for verb in ("submit", "commit")
         for suffix in ("", "_delta", "_iceberg")]
        + ["wait_delta", "wait_iceberg", "wait_precommit"])
    finished = re.findall(r"Workload finished .* exit_code=(-?\d+) .*workload_id=([0-9a-f-]+)",
                          (home / "logs" / "services" / "scheduler.log").read_text())
    exits = {wid.replace("-", ""): int(code) for code, wid in finished}
    assert len(ran) == 27 and {k: exits.get(k) for k in ran} == dict.fromkeys(ran, 0)
    for log in (home / "logs").rglob("*.log"):
        assert "terminate called" not in log.read_text(errors="replace"), log
