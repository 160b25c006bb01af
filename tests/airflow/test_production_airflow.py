"""Airflow as platform teams run it: PostgreSQL as the metadata DB, the CeleryExecutor
with a Redis broker and two Celery workers — docs/scheduler.md's
``scripts/airflow-local.sh start --celery``, run for real.

PostgreSQL and Redis come from the OS (bootstrap.sh installs them: Debian's
``postgresql`` and ``redis-server``); the script starts a throw-away cluster and a
broker on free ports and stops both with the services.  One test, one start (the
services are what is expensive), and the scenarios of issue 19 on it:

1. overlapping runs and a backfill: three daily epochs, two runs at a time (they must
   overlap, never three), into a folder, a Delta table and an Iceberg table
   (tests/airflow/dags/tpc_it_scheduler.py): every epoch published exactly once in
   each, both workers ran tasks, every task process exited 0;
2. a worker SIGKILLed in the middle of a commit — before its decision, the attempt
   pre-committed — of a single target and of a group, both wired by the public task
   group code with the commit's *default* retries (tests/airflow/dags/
   tpc_it_celery_kill.py, tpc_it_celery_kill_group.py): Airflow finds each task without
   heartbeat, retries it on a live worker (if both paused tasks were on one worker, the
   other; else one worker is started again, as a lost node comes back), and each epoch
   is published once; ``abort`` never runs, so the good attempt is never thrown away.

While the scheduler waits out that dead worker's heartbeat, three more runs go on the
surviving worker at the same time (no second deployment, no waiting one after another):

3. a retry after a failed job (tests/airflow/dags/tpc_it_celery_retry.py): try 1 stages a
   partial file and fails, Airflow retries, the retry's attempt is published once and a
   late call of the failed attempt is fenced;
4. a cleared rerun: the UI's *Clear* of a committed backfill run (REST) re-commits the
   epoch in the folder, the Delta and the Iceberg table — replaced, not appended;
5. a manual abort: the run page's *Abort* (the plugin's REST route) of a pre-committed
   attempt waiting at the approval gate (tests/airflow/dags/tpc_it_gate_nospark.py),
   then *Commit* answered at the gate anyway: the commit is refused, nothing is
   published, no Asset event, and the abort is in Airflow's audit log.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import psycopg2
import pytest

from airflow_tpc import FencedError, InvalidState, Sink, TxnState

from .test_real_scheduler import _env, _processes_of, _run

HERE = Path(__file__).resolve().parent
SCRIPTS = HERE.parent.parent / "scripts"
EPOCHS = ["2026-11-01", "2026-11-02", "2026-11-03"]
#: The backfill's epoch whose run is cleared and rerun; the retried and the aborted epoch.
CLEARED, RETRIED, ABORTED = EPOCHS[1], "2026-11-06", "2026-11-07"
START_S, BACKFILL_S, KILL_S, STOP_S = 600, 600, 900, 180
#: How long a task may go without heartbeat before the scheduler fails it (then retries):
#: the time a killed worker's task takes to be noticed.  Live tasks beat every few seconds.
HEARTBEAT_TIMEOUT_S = 90
DONE = ("success", "failed")
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


def _tasks(home: Path, dag_id: str, run_id: str) -> dict[str, tuple[str, int]]:
    """``{task id: (state, try number)}`` of one run, read from PostgreSQL."""
    return {task: (state, tries) for task, state, tries in _query(
        home, "SELECT task_id, state, try_number FROM task_instance WHERE dag_id = %s AND "
        "run_id = %s", dag_id, run_id)}


def _announced(home: Path, dag_id: str) -> dict[str, dict[str, list[int]]]:
    """The Asset events a DAG's commits emitted (what downstream DAGs are triggered by):
    ``{asset URI: {epoch: [attempt of each event]}}``."""
    found: dict[str, dict[str, list[int]]] = {}
    for uri, extra in _query(home, "SELECT a.uri, e.extra FROM asset_event e JOIN asset a "
                             "ON a.id = e.asset_id WHERE e.source_dag_id = %s ORDER BY e.id",
                             dag_id):
        extra = json.loads(extra) if isinstance(extra, str) else extra
        found.setdefault(uri, {}).setdefault(extra["epoch"], []).append(extra["attempt"])
    return found


def _overlap(spans: list[tuple[Any, Any]]) -> int:
    """The most runs running at one moment, from their (start, end) dates."""
    return max(sum(1 for s, e in spans if s <= t < e) for t, _ in spans)


def _plugin_abort(local: Any, token: str, dag_id: str, run_id: str,
                  body: dict[str, Any]) -> dict[str, Any]:
    """What the run page's *Abort* button sends, from an API client: ``POST
    /airflow-tpc/api/abort`` with the user's bearer token, a JSON body naming one
    transaction, and the anti-forgery header (any value with a bearer token)."""
    query = urllib.parse.urlencode({"dag_id": dag_id, "run_id": run_id})
    req = urllib.request.Request(
        f"{local.url()}/airflow-tpc/api/abort?{query}", data=json.dumps(body).encode(),
        method="POST", headers={"Content-Type": "application/json",
                                "Authorization": f"Bearer {token}", "X-Airflow-TPC": "1"})
    with urllib.request.urlopen(req, timeout=120) as resp:
        return json.load(resp)


def _unpause_when_parsed(local: Any, token: str, dag_ids: tuple[str, ...]) -> None:
    """Wait (bounded) until the dag-processor has parsed each DAG, then unpause it (new
    DAGs start paused and their runs would sit queued)."""
    for dag_id in dag_ids:
        deadline = time.monotonic() + 300
        while True:
            try:
                local.request("GET", f"/api/v2/dags/{dag_id}", token=token)
                break
            except Exception:
                assert time.monotonic() < deadline, f"{dag_id} was never parsed"
                time.sleep(2)
        local.request("PATCH", f"/api/v2/dags/{dag_id}?update_mask=is_paused",
                      {"is_paused": False}, token=token)


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


def _kill_group(target: Path) -> Any:
    """The group of tests/airflow/dags/tpc_it_celery_kill_group.py, as its DAG opens it."""
    from airflow_tpc import Group

    root = f"{target}_kill_group"
    return Group({n: Sink(f"{root}/{n}", "tpc_it_celery_kill_group")
                  for n in ("events", "daily")}, f"{root}/_tpc_groups/kill")


def _session_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[3])


def test_postgres_and_celery_exactly_once(tmp_path, monkeypatch):
    """Issue 19's scenarios on one PostgreSQL + Celery deployment (the module docstring
    lists them); the runs of 3-5 share the dead worker's heartbeat wait of 2."""
    for tool in ("redis-server", "initdb"):
        assert shutil.which(tool) or list(Path("/usr/lib/postgresql").glob(f"*/bin/{tool}")), (
            f"{tool} is missing: run scripts/bootstrap.sh as root (it installs Debian's "
            "postgresql and redis-server), or apt-get install them")
    home, dags, target = tmp_path / "home", tmp_path / "dags", tmp_path / "target"
    dags.mkdir()
    for dag in ("tpc_it_scheduler", "tpc_it_celery_kill", "tpc_it_celery_kill_group",
                "tpc_it_celery_retry", "tpc_it_gate_nospark"):
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
        "TPC_IT_ROOT": str(tmp_path / "it"),  # tpc_it_gate_nospark's target lies under it
        "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": str(HEARTBEAT_TIMEOUT_S)})
    retry_target = Path(f"{target}_retry")
    gate_target = tmp_path / "it" / "gate_nospark_target"
    gate_sink = Sink(str(gate_target), "tpc_it_gate_nospark")
    t0 = time.monotonic()

    def phase(name: str) -> None:
        """Where the time goes (shown with -s, or when the test fails)."""
        print(f"[{time.monotonic() - t0:5.0f} s] {name}", flush=True)

    try:
        started = _run(env, "start", "--celery", timeout=START_S + 60)
        print(started.stdout, started.stderr)
        assert started.returncode == 0, started.stdout + started.stderr
        assert "PostgreSQL at postgresql+psycopg2://airflow@127.0.0.1:" in started.stdout
        status = _run(env, "status", timeout=120).stdout
        assert status.count(" running ") == 8, status  # 4 services, 2 workers, DB, broker

        phase("started")
        # 1. A backfill through Celery on PostgreSQL: overlapping runs.
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
        # Two runs at once (max_active_runs=2), never three: their dates in PostgreSQL.
        backfilled = _query(home, "SELECT run_id, start_date, end_date, state, "
                            "logical_date::date::text FROM dag_run WHERE dag_id = %s",
                            "tpc_it_scheduler")
        assert sorted(r[3] for r in backfilled) == ["success"] * 3, backfilled
        assert _overlap([(r[1], r[2]) for r in backfilled]) == 2, backfilled
        cleared_run = next(r[0] for r in backfilled if r[4] == CLEARED)
        logs = home / "logs" / "services"
        by_worker = _finished_in(logs, ("worker-1", "worker-2"), set(ran))
        assert all(set(ran) & set(f) for f in by_worker.values()), "one worker ran nothing"
        exits = {**by_worker["worker-1"], **by_worker["worker-2"]}
        assert {k: exits.get(k) for k in ran} == dict.fromkeys(ran, (0, "success"))

        phase("backfilled")
        # 2. Workers SIGKILLed mid-commit (single target and group, before the decision);
        # the retries run on a live worker.
        local = _local(home, monkeypatch)
        token = local.token()
        _unpause_when_parsed(local, token, ("tpc_it_celery_kill", "tpc_it_celery_kill_group",
                                            "tpc_it_celery_retry", "tpc_it_gate_nospark"))
        kill_runs = {dag: local.request("POST", f"/api/v2/dags/{dag}/dagRuns",
                                        {"logical_date": "2026-11-05T00:00:00Z"},
                                        token=token)["dag_run_id"]
                     for dag in ("tpc_it_celery_kill", "tpc_it_celery_kill_group")}
        flags = {"tpc_it_celery_kill": flag, "tpc_it_celery_kill_group": Path(f"{flag}.group")}
        deadline = time.monotonic() + KILL_S / 3
        while not all(f.exists() and f.read_text().strip() for f in flags.values()):
            assert time.monotonic() < deadline, "a commit never reached its decision"
            time.sleep(1)
        workers = {local.pid(w): w for w in ("worker-1", "worker-2")}
        victims = {workers[_session_of(int(f.read_text()))] for f in flags.values()}
        for victim in sorted(victims):
            assert _kill_session(local.pid(victim))
        gone = time.monotonic() + 120  # a SIGKILL takes effect soon, not at once
        while any(local.alive(v) for v in victims):
            assert time.monotonic() < gone, f"{victims} still alive after SIGKILL"
            time.sleep(0.5)
        survivors = {"worker-1", "worker-2"} - victims
        if not survivors:  # both paused tasks had a worker each: a node comes back
            # Through the recipe's command with the environment `start` was given (the
            # DAGs read TPC_IT_ROOT and TPC_IT_KILL_FLAG from it), as an operator would.
            again = _run(env, "start-worker", "worker-1", timeout=420)
            assert again.returncode == 0, again.stdout + again.stderr
            survivors = {"worker-1"}
        phase(f"{', '.join(sorted(victims))} killed; retries on {', '.join(survivors)}")
        # Pre-committed, undecided: nothing in the ledger says COMMITTED yet.
        kill_sink = Sink(f"{target}_kill", "tpc_it_celery_kill")
        assert [(i.state, i.published) for i in kill_sink.describe()] == [
            (TxnState.PRECOMMITTED, False)]
        kill_group = _kill_group(target)
        assert kill_group.stable_epochs() == {}
        assert {n: [i.state for i in s.describe()] for n, s in kill_group.sinks.items()} == {
            n: [TxnState.PRECOMMITTED] for n in kill_group.sinks}

        # 3-5 at once on the surviving worker, while the scheduler waits out the dead
        # one's heartbeat: a job failing its first try, the UI's Clear of a committed
        # backfill run, and a run whose pre-committed attempt a user aborts.
        retry_run = local.request("POST", "/api/v2/dags/tpc_it_celery_retry/dagRuns",
                                  {"logical_date": f"{RETRIED}T00:00:00Z"},
                                  token=token)["dag_run_id"]
        gate_run = local.request("POST", "/api/v2/dags/tpc_it_gate_nospark/dagRuns",
                                 {"logical_date": f"{ABORTED}T00:00:00Z",
                                  "conf": {"epoch": ABORTED}}, token=token)["dag_run_id"]
        quoted = urllib.parse.quote(cleared_run, safe="")
        cleared = local.request("POST", f"/api/v2/dags/tpc_it_scheduler/dagRuns/{quoted}/clear",
                                {"dry_run": False}, token=token)
        assert cleared["state"] == "queued", cleared
        runs = {**kill_runs, "tpc_it_celery_retry": retry_run,
                "tpc_it_scheduler": cleared_run, "tpc_it_gate_nospark": gate_run}
        aborted: dict[str, Any] | None = None
        deadline = time.monotonic() + KILL_S
        while True:
            states = {d: local.request(
                "GET", f"/api/v2/dags/{d}/dagRuns/{urllib.parse.quote(r, safe='')}",
                token=token)["state"] for d, r in runs.items()}
            if aborted is None and _tasks(home, "tpc_it_gate_nospark", gate_run).get(
                    "approve", ("",))[0] == "awaiting_input":
                # The gate waits: the sensor validated a sealed attempt, nothing is
                # published.  A user aborts it on the run page, then someone answers
                # Commit at the gate anyway.
                assert [(i.attempt, i.state) for i in gate_sink.describe()] == [
                    (1, TxnState.PRECOMMITTED)]
                aborted = _plugin_abort(local, token, "tpc_it_gate_nospark", gate_run,
                                        {"epoch": ABORTED, "attempt": 1, "task_id": "submit"})
                local.request("PATCH", f"/api/v2/dags/tpc_it_gate_nospark/dagRuns/"
                              f"{urllib.parse.quote(gate_run, safe='')}/taskInstances/"
                              "approve/-1/hitlDetails", {"chosen_options": ["Commit"]},
                              token=token)
            if aborted is not None and all(s in DONE for s in states.values()):
                break
            assert time.monotonic() < deadline, f"runs not done: {states}"
            time.sleep(2)
        phase("all runs ended")
        for row in _query(home, "SELECT dag_id, state, end_date - start_date, end_date "
                          "FROM dag_run WHERE run_id = ANY(%s) ORDER BY end_date",
                          list(runs.values())):
            print("   ", *row)

        # 2. The killed commits: each retried once (the default retries), on a live
        # worker, never aborted.
        for dag in kill_runs:
            assert states[dag] == "success", states
            commit = _query(home, "SELECT id::text, state, try_number FROM task_instance "
                            "WHERE dag_id = %s AND task_id = 'commit'", dag)
            assert [c[1:] for c in commit] == [("success", 2)], (dag, commit)
            assert _tasks(home, dag, kill_runs[dag])["abort"][0] == "skipped", dag
            retry_id = commit[0][0].replace("-", "")
            found = _finished_in(logs, tuple(survivors), {retry_id})
            assert {w: f.get(retry_id) for w, f in found.items() if retry_id in f} in [
                {w: (0, "success")} for w in survivors], f"{dag}: retry not on {survivors}"
        # 3. The failed job retried: submit succeeded on try 2, the epoch committed.
        assert states["tpc_it_celery_retry"] == "success", states
        retry_tasks = _tasks(home, "tpc_it_celery_retry", retry_run)
        assert {t: v[0] for t, v in retry_tasks.items()} == {
            "submit": "success", "wait_precommit": "success", "commit": "success",
            "abort": "skipped", "committed": "success"}, retry_tasks
        assert retry_tasks["submit"][1] == 2, retry_tasks
        # 4. The cleared run: every task of the three targets ran again, and succeeded.
        assert states["tpc_it_scheduler"] == "success", states
        again = _tasks(home, "tpc_it_scheduler", cleared_run)
        assert {t: v for t, v in again.items() if not t.startswith("abort")} == {
            f"{verb}{suffix}": ("success", 2) for verb in ("submit", "commit")
            for suffix in ("", "_delta", "_iceberg")} | {
            t: ("success", 2) for t in ("wait_precommit", "wait_delta", "wait_iceberg")}, again
        # 5. The manual abort: the abort route aborted it; the gate's Commit was refused
        # (the commit task failed), the abort task ran, the run failed.
        assert aborted["outcome"] == "aborted", aborted
        assert aborted["txn_id"] == f"tpc_it_gate_nospark/{ABORTED}/1", aborted
        assert states["tpc_it_gate_nospark"] == "failed", states
        gate_tasks = {t: v[0] for t, v in _tasks(home, "tpc_it_gate_nospark", gate_run).items()}
        assert gate_tasks == {"submit": "success", "wait_precommit": "success",
                              "approve": "success", "commit": "failed", "abort": "success",
                              "abort_rejected": "skipped", "committed": "upstream_failed"}
        audit = _query(home, "SELECT owner, extra FROM log WHERE event = 'airflow-tpc.abort' "
                       "AND dag_id = %s AND run_id = %s", "tpc_it_gate_nospark", gate_run)
        assert [(o, json.loads(x)["outcome"], json.loads(x)["via"]) for o, x in audit] == [
            ("admin", "aborted", "api")], audit
        # Asset events — what downstream DAGs run on: one per commit that made data
        # visible, none for the aborted epoch, none for the killed try.
        announced = _announced(home, "tpc_it_scheduler")
        assert len(announced) == 3 and all(
            by_epoch == {EPOCHS[0]: [1], CLEARED: [1, 2], EPOCHS[2]: [1]}
            for by_epoch in announced.values()), announced
        assert list(_announced(home, "tpc_it_celery_retry").values()) == [{RETRIED: [2]}]
        assert list(_announced(home, "tpc_it_celery_kill").values()) == [{"2026-11-05": [1]}]
        assert _announced(home, "tpc_it_gate_nospark") == {}
    finally:
        stopped = _run(env, "stop", timeout=STOP_S)
        phase("stopped")
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert _processes_of(home) == []  # services, workers, PostgreSQL and Redis
    assert not (home / "run" / "postgres.json").exists()

    # Exactly once, read from each target itself.
    import pyarrow.dataset as ds

    from airflow_tpc.tables import open_sink

    # 1 and 4: every epoch one published attempt in each target; the cleared epoch's is
    # its rerun (attempt 2), which replaced attempt 1's rows rather than adding to them.
    for name, props in ((str(target), None), (f"delta+file://{target}_delta", None),
                        ("iceberg://sched/tpc.events", catalog)):
        sink = open_sink(name, "tpc_it_scheduler", catalog_properties=props)
        infos = sink.describe()
        assert sorted((i.epoch, i.attempt, i.state) for i in infos) == sorted(
            [(e, 1, TxnState.COMMITTED) for e in EPOCHS] + [(CLEARED, 2, TxnState.COMMITTED)])
        assert sorted((i.epoch, i.attempt) for i in infos if i.published and not i.superseded
                      ) == [(EPOCHS[0], 1), (CLEARED, 2), (EPOCHS[2], 1)], infos
        assert [i.superseded for i in infos if (i.epoch, i.attempt) == (CLEARED, 1)] == [True]
        if name == str(target):  # what a plain glob of the folder finds
            assert sorted(str(f.relative_to(target)) for f in target.rglob("*.parquet")) == [
                f"epoch={e}/part-0.parquet" for e in EPOCHS]
            continue
        rows = sink.table_target.pyarrow_dataset().to_table() if "delta" in name else \
            sink.table_target.load_table().scan().to_arrow()
        assert sorted(rows["epoch"].to_pylist()) == sorted(EPOCHS * 3), name
    # 2. The killed commits: one attempt, committed and published, in every target.
    infos = Sink(f"{target}_kill", "tpc_it_celery_kill").describe()
    assert [(i.epoch, i.attempt, i.state, i.published) for i in infos] == [
        ("2026-11-05", 1, TxnState.COMMITTED, True)]
    kill_group = _kill_group(target)
    assert kill_group.stable_epochs() == {"2026-11-05": 1}
    for sink in kill_group.sinks.values():
        assert [(i.epoch, i.attempt, i.state, i.published) for i in sink.describe()] == [
            ("2026-11-05", 1, TxnState.COMMITTED, True)]
    # 3. The retry: the failed try's attempt aborted and cleaned, the retry's published;
    # readers see the retry's rows once and nothing of the partial file.
    retry_sink = Sink(str(retry_target), "tpc_it_celery_retry")
    infos = retry_sink.describe()
    assert [(i.attempt, i.state, i.published, i.staging_files) for i in infos] == [
        (1, TxnState.ABORTED, False, 0), (2, TxnState.COMMITTED, True, 0)], infos
    assert infos[0].reason == "spark job failed: RuntimeError"
    assert sorted(str(f.relative_to(retry_target)) for f in retry_target.rglob("*.parquet")
                  ) == [f"epoch={RETRIED}/part-0.parquet"]
    seen = ds.dataset(str(retry_target), format="parquet").to_table()
    assert sorted(zip(seen["id"].to_pylist(), seen["attempt"].to_pylist(), strict=True)) == [
        (n, 2) for n in range(5)]
    # ... and the failed try's attempt is fenced: a late job of it (a zombie) can neither
    # seal nor commit, and changes nothing.
    def retry_files() -> dict[str, int]:
        """The retry target's published tree, ledger and staging, with mtimes."""
        return {str(f): f.stat().st_mtime_ns for f in (
            *retry_target.rglob("*"), *(tmp_path / "_tpc_staging").rglob("*"))}

    before = retry_files()
    zombie = retry_sink.transaction(RETRIED, 1)
    with pytest.raises(FencedError):
        retry_sink.precommit(zombie)
    with pytest.raises(InvalidState):
        retry_sink.commit(zombie)
    assert retry_files() == before
    # 5. The manual abort: aborted once by the user, its staging gone, nothing published.
    infos = gate_sink.describe()
    assert [(i.attempt, i.state, i.published, i.staging_files) for i in infos] == [
        (1, TxnState.ABORTED, False, 0)], infos
    assert infos[0].reason == "aborted from the airflow-tpc UI by admin"
    assert gate_sink.committed_files() == {}
    assert [f for f in gate_target.rglob("*") if "_tpc" not in f.relative_to(gate_target).parts
            ] == []
    assert "terminate called" not in "".join(
        p.read_text(errors="replace") for p in (home / "logs").rglob("*.log"))
    del sys.modules["airflow_local"]
