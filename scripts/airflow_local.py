#!/usr/bin/env python
"""Real Airflow services on the embedded defaults, and a backfill through them.

    scripts/airflow-local.sh start [--postgres] [--celery] | stop | status | logs [SERVICE]
    scripts/airflow-local.sh backfill DAG_ID FROM TO [--max-active-runs N] [--conf JSON]

``start`` migrates a SQLite metadata DB and starts api-server (127.0.0.1), scheduler
(LocalExecutor), dag-processor and triggerer in the background, each in its own session
(process group) with a log and a pid file, then waits until /api/v2/monitor/health says
every one is healthy.  ``--postgres``: the metadata DB is a throw-away PostgreSQL cluster
instead (scripts/local_backends.py).  ``--celery`` (implies ``--postgres``): the
CeleryExecutor with a Redis broker and two Celery workers (``worker-1``, ``worker-2``,
each its own process tree and log, two task slots each) — the orchestration side of
outgrowing one process.  ``backfill`` creates the backfill through the REST API (POST
/api/v2/backfills): the API server is the one writer, so it does not race the scheduler
for SQLite's lock as ``airflow backfill create`` from another process does.  It unpauses
the DAG first (new DAGs start paused and their runs would sit queued), waits for the runs
with a progress line and a deadline, and checks with ``airflow-tpc list`` that every epoch
has exactly one published attempt.  ``stop`` ends every process of the sessions it started
and nothing else.

Configuration (environment; ``start`` records what it used in $AIRFLOW_HOME/run/):
  AIRFLOW_HOME          default ./.airflow-local in the repository
  AIRFLOW_LOCAL_PORT    the API server's port (default: a free one)
  AIRFLOW_LOCAL_DAGS    the DAGs folder (default: the repository's dags/)
  AIRFLOW_LOCAL_DB_URL  the metadata DB (default: SQLite, $AIRFLOW_HOME/airflow.db)
  TPC_EXAMPLE_TARGET    the example DAG's target (default $AIRFLOW_HOME/data/daily_event_counts)
  AIRFLOW_LOCAL_START_TIMEOUT  seconds to wait for healthy services (default 600)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

from local_backends import BackendError, Postgres, Redis, free_port

REPO = Path(__file__).resolve().parent.parent
SERVICES = ("api-server", "scheduler", "dag-processor", "triggerer")
WORKERS = ("worker-1", "worker-2")
# The health document's key for each service (the API server answers it, so it has none).
HEALTH_KEYS = {"scheduler": "scheduler", "dag-processor": "dag_processor",
               "triggerer": "triggerer"}
DONE = {"success", "failed"}


class LocalError(Exception):
    """One clear line for the user (and the tail of a log, when a service is the cause)."""


def _home() -> Path:
    return Path(os.environ.get("AIRFLOW_HOME") or REPO / ".airflow-local").resolve()


def _run_dir(home: Path) -> Path:
    return home / "run"


def _tail(path: Path, lines: int = 30) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return f"(no log at {path})"
    return "\n".join(f"    {line}" for line in text[-lines:])


def _service_env(home: Path, port: int, worker_log_port: int, trigger_log_port: int,
                 jwt_secret: str, db_url: str | None = None,
                 broker_url: str | None = None) -> dict[str, str]:
    """The settings every service (and the CLI) runs with: embedded defaults, slow-machine
    timeouts.  The JWT secret is shared so the scheduler's task tokens verify at the API."""
    venv_bin = str(Path(sys.executable).parent)
    env = {
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": os.environ.get("AIRFLOW_LOCAL_DAGS", str(REPO / "dags")),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor" if broker_url else "LocalExecutor",
        # Writers wait up to 60 s for SQLite's lock instead of Python's default 5 s.
        # AIRFLOW_LOCAL_DB_URL: another metadata DB, e.g. postgresql+psycopg2://... .
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": db_url or os.environ.get("AIRFLOW_LOCAL_DB_URL")
        or f"sqlite:///{home}/airflow.db?timeout=60",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{port}",
        "AIRFLOW__API__WORKERS": "1",
        "AIRFLOW__API_AUTH__JWT_SECRET": jwt_secret,
        "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(worker_log_port),
        "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(trigger_log_port),
        # The Spark connection exactly as scripts/demo.py sets it up.
        "AIRFLOW_CONN_SPARK_LOCAL": json.dumps({"conn_type": "spark", "host": "local[2]"}),
        "TPC_EXAMPLE_TARGET": os.environ.get("TPC_EXAMPLE_TARGET")
        or str(home / "data" / "daily_event_counts"),
        # The example's Iceberg table on the embedded catalog, as scripts/demo.py sets it
        # up: one SQLite file and a warehouse folder under this home, nothing to start.
        "TPC_EXAMPLE_CATALOG_CONN": "tpc_example_catalog",
        "AIRFLOW_CONN_TPC_EXAMPLE_CATALOG": json.dumps({
            "conn_type": "iceberg_catalog", "host": f"sqlite:///{home}/iceberg/catalog.db",
            "schema": f"file://{home}/iceberg/warehouse", "extra": {"type": "sql"}}),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "PATH": f"{venv_bin}{os.pathsep}{os.environ.get('PATH', '')}",
        # Slow machines: the task supervisor's Execution API client (per-request timeout,
        # retries), heartbeats, queued tasks and health thresholds, as tests/airflow does.
        "AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": "300",
        "AIRFLOW__WORKERS__EXECUTION_API_RETRIES": "10",
        "AIRFLOW__WORKERS__EXECUTION_API_RETRY_WAIT_MIN": "1",
        "AIRFLOW__WORKERS__EXECUTION_API_RETRY_WAIT_MAX": "30",
        "AIRFLOW__WORKERS__MAX_FAILED_HEARTBEATS": "20",
        "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "1800",
        "AIRFLOW__SCHEDULER__TASK_QUEUED_TIMEOUT": "1800",
        "AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_THRESHOLD": "300",
        "AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD": "300",
        "AIRFLOW__EXECUTION_API__JWT_EXPIRATION_TIME": "3600",
    }
    if broker_url:
        env.update({
            "AIRFLOW__CELERY__BROKER_URL": broker_url,
            "AIRFLOW__CELERY__RESULT_BACKEND": "db+" + env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"],
            "AIRFLOW__CELERY__WORKER_CONCURRENCY": "2",
        })
    # A caller's own timeout wins (e.g. a test's short heartbeat timeout).
    env.update({k: v for k, v in os.environ.items() if k in env and k.startswith(
        ("AIRFLOW__WORKERS__", "AIRFLOW__SCHEDULER__", "AIRFLOW__TRIGGERER__"))})
    return env


def _worker_command(worker: str) -> list[str]:
    """A Celery worker's ``airflow`` arguments: two task slots, named after ``worker``."""
    return ["celery", "worker", "--concurrency", "2", "--celery-hostname", f"{worker}@%h"]


class Local:
    """One AIRFLOW_HOME's services: their pid files, logs, recorded ports and settings."""

    def __init__(self) -> None:
        self.home = _home()
        self.run = _run_dir(self.home)
        self.logs = self.home / "logs" / "services"
        self.postgres = Postgres(self.run)
        self.redis = Redis(self.run)

    def mode(self) -> dict[str, bool]:
        """What ``start`` chose: ``{"postgres": ..., "celery": ...}``."""
        try:
            return json.loads((self.run / "mode.json").read_text())
        except (FileNotFoundError, ValueError):
            return {"postgres": False, "celery": False}

    def services(self) -> tuple[str, ...]:
        return SERVICES + WORKERS if self.mode().get("celery") else SERVICES

    # -- recorded state -------------------------------------------------------------
    def pid(self, service: str) -> int | None:
        try:
            return int((self.run / f"{service}.pid").read_text())
        except (FileNotFoundError, ValueError):
            return None

    def alive(self, service: str) -> bool:
        pid = self.pid(service)
        if pid is None:
            return False
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except FileNotFoundError:
            return False
        return stat.rsplit(")", 1)[1].split()[0] != "Z"

    def log(self, service: str) -> Path:
        return self.logs / f"{service}.log"

    def env(self) -> dict[str, str]:
        path = self.run / "env.json"
        if not path.exists():
            raise LocalError(f"not started: no {path} (run: scripts/airflow-local.sh start)")
        env = json.loads(path.read_text())
        env["AIRFLOW__API_AUTH__JWT_SECRET"] = (self.run / "jwt_secret").read_text().strip()
        return {**os.environ, **env}

    def url(self) -> str:
        return f"http://127.0.0.1:{self.env()['AIRFLOW__API__PORT']}"

    def dead_services(self) -> list[str]:
        return [s for s in self.services() if self.pid(s) is not None and not self.alive(s)]

    def check_alive(self) -> None:
        for service in self.dead_services():
            raise LocalError(f"the {service} died; the end of {self.log(service)}:\n"
                             f"{_tail(self.log(service))}")

    # -- start / stop ---------------------------------------------------------------
    def start(self, timeout: float, *, postgres: bool = False, celery: bool = False) -> None:
        running = [s for s in SERVICES + WORKERS if self.alive(s)]
        if running or self.postgres.running() or self.redis.running():
            raise LocalError(f"already running in {self.home}: "
                             f"{', '.join(running) or 'its database or broker'} "
                             "(scripts/airflow-local.sh status; stop first to restart)")
        self.run.mkdir(parents=True, exist_ok=True)
        self.logs.mkdir(parents=True, exist_ok=True)
        postgres = postgres or celery  # Celery needs a database SQLite cannot be
        (self.run / "mode.json").write_text(json.dumps({"postgres": postgres,
                                                        "celery": celery}))
        (self.home / "iceberg" / "warehouse").mkdir(parents=True, exist_ok=True)  # example table
        secret_file = self.run / "jwt_secret"
        if not secret_file.exists():
            fd = os.open(secret_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            os.write(fd, secrets.token_urlsafe(32).encode())
            os.close(fd)
        port = int(os.environ.get("AIRFLOW_LOCAL_PORT") or free_port())
        t0 = time.monotonic()
        try:
            db_url = self.postgres.start(self.log("postgres")) if postgres else None
            broker = self.redis.start(self.log("redis"), self.home) if celery else None
        except BackendError as e:
            self.stop()
            raise LocalError(str(e)) from None
        if postgres:
            print(f"PostgreSQL at {db_url}" + (f", Redis at {broker}" if broker else ""),
                  flush=True)
        env = _service_env(self.home, port, free_port(), free_port(),
                           secret_file.read_text().strip(), db_url, broker)
        public = {k: v for k, v in env.items() if k != "AIRFLOW__API_AUTH__JWT_SECRET"}
        (self.run / "env.json").write_text(json.dumps(public, indent=1))
        full = {**os.environ, **env}
        airflow = [sys.executable, "-m", "airflow"]
        print(f"AIRFLOW_HOME={self.home}\nmigrating the metadata DB ...", flush=True)
        with open(self.logs / "migrate.log", "w") as out:
            rc = subprocess.run([*airflow, "db", "migrate"], env=full, stdout=out,
                                stderr=subprocess.STDOUT, timeout=timeout).returncode
        if rc != 0:
            self.stop()
            raise LocalError(f"airflow db migrate failed ({rc}); the end of "
                             f"{self.logs / 'migrate.log'}:\n{_tail(self.logs / 'migrate.log')}")
        commands = {"api-server": ["api-server", "--host", "127.0.0.1", "--port", str(port),
                                   "--workers", "1"],
                    "scheduler": ["scheduler"], "dag-processor": ["dag-processor"],
                    "triggerer": ["triggerer"]}
        # Each worker serves its own task logs, so each needs its own port.
        extra_env = {w: {"AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port())}
                     for w in WORKERS}
        for worker in WORKERS:
            commands[worker] = _worker_command(worker)
        for service in self.services():
            self._spawn(service, commands[service], {**full, **extra_env.get(service, {})})
        try:
            self.wait_healthy(timeout, t0)
        except BaseException:
            self.stop()
            raise
        print(f"all services healthy in {time.monotonic() - t0:.0f} s: UI and API at "
              f"{self.url()} (user admin, password in "
              f"{self.home / 'simple_auth_manager_passwords.json.generated'})")

    def _spawn(self, service: str, command: list[str], env: dict[str, str]) -> int:
        """Start ``airflow <command>`` as ``service``: its own session (so ``stop`` and a
        test's kill reach its whole tree), its log appended to, its pid recorded."""
        with open(self.log(service), "a") as out:
            proc = subprocess.Popen([sys.executable, "-m", "airflow", *command], env=env,
                                    stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True,
                                    cwd=self.home)
        (self.run / f"{service}.pid").write_text(str(proc.pid))
        return proc.pid

    def start_worker(self, worker: str, timeout: float = 300) -> int:
        """Start a Celery worker again after it died or was killed (a lost node coming
        back): the settings ``start`` gave it, a new log-server port; returns once it is
        ready.  A task it ran when it died is not resumed: Airflow fails it after its
        heartbeat timeout and retries it on a live worker (docs/scheduler.md)."""
        if worker not in WORKERS or not self.mode().get("celery"):
            raise LocalError(f"no Celery worker {worker!r} here (workers: "
                             f"{', '.join(WORKERS)}; start with --celery)")
        if self.alive(worker):
            raise LocalError(f"{worker} is running (pid {self.pid(worker)})")
        log = self.log(worker)
        seen = log.stat().st_size if log.exists() else 0
        env = {**self.env(), "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port())}
        pid = self._spawn(worker, _worker_command(worker), env)
        deadline = time.monotonic() + timeout
        while " ready." not in log.read_text(errors="replace")[seen:]:
            if not self.alive(worker):
                raise LocalError(f"{worker} died while starting; the end of {log}:\n"
                                 f"{_tail(log)}")
            if time.monotonic() > deadline:
                raise LocalError(f"{worker} not ready within {timeout:.0f} s; the end of "
                                 f"{log}:\n{_tail(log)}")
            time.sleep(1)
        return pid

    def health(self) -> dict[str, Any] | None:
        try:
            with urllib.request.urlopen(f"{self.url()}/api/v2/monitor/health",
                                        timeout=30) as resp:
                return json.load(resp)
        except (OSError, ValueError):
            return None

    def wait_healthy(self, timeout: float, t0: float) -> None:
        deadline = time.monotonic() + timeout
        last = ""
        while True:
            self.check_alive()
            doc = self.health()
            state = {"api-server": "healthy" if doc else "starting"}
            for service, key in HEALTH_KEYS.items():
                state[service] = ((doc or {}).get(key) or {}).get("status") or "starting"
            for worker in WORKERS if self.mode().get("celery") else ():
                try:
                    ready = " ready." in self.log(worker).read_text(errors="replace")
                except FileNotFoundError:
                    ready = False
                state[worker] = "healthy" if ready else "starting"
            line = ", ".join(f"{s} {v}" for s, v in state.items())
            if line != last:
                print(f"  [{time.monotonic() - t0:4.0f} s] {line}", flush=True)
                last = line
            if all(v == "healthy" for v in state.values()):
                return
            if time.monotonic() > deadline:
                slow = [s for s, v in state.items() if v != "healthy"]
                raise LocalError(
                    f"not healthy within {timeout:.0f} s: {', '.join(slow)}; the end of "
                    f"{self.log(slow[0])}:\n{_tail(self.log(slow[0]))}")
            time.sleep(2)

    def _sessions(self) -> dict[int, list[int]]:
        """Every live process of the sessions the services lead (setsid at start)."""
        leaders = {p for p in (self.pid(s) for s in SERVICES + WORKERS) if p is not None}
        found: dict[int, list[int]] = {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except (FileNotFoundError, ProcessLookupError, PermissionError):
                continue
            state, sid = fields[0], int(fields[3])
            if sid in leaders and state != "Z":
                found.setdefault(sid, []).append(int(entry.name))
        return found

    def stop(self, timeout: float = 60) -> list[int]:
        """SIGTERM every process of the started sessions, SIGKILL what is left after
        ``timeout``; returns the pids that had to be killed."""
        def signal_all(sig: int) -> list[int]:
            pids = [p for procs in self._sessions().values() for p in procs]
            for p in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p, sig)
            return pids

        if not signal_all(signal.SIGTERM):
            for service in SERVICES + WORKERS:
                (self.run / f"{service}.pid").unlink(missing_ok=True)
            self.stop_backends()
            return []
        deadline = time.monotonic() + timeout
        while self._sessions() and time.monotonic() < deadline:
            time.sleep(0.5)
        killed = signal_all(signal.SIGKILL)
        deadline = time.monotonic() + 30
        while self._sessions() and time.monotonic() < deadline:
            time.sleep(0.2)
        left = self._sessions()
        if left:
            raise LocalError(f"processes survived SIGKILL: {left}")
        for service in SERVICES + WORKERS:
            (self.run / f"{service}.pid").unlink(missing_ok=True)
        self.stop_backends()
        return killed

    def stop_backends(self) -> None:
        """After the services (which hold connections to them): the broker, the DB."""
        self.redis.stop()
        self.postgres.stop()

    # -- REST ------------------------------------------------------------------------
    def token(self) -> str:
        path = self.home / "simple_auth_manager_passwords.json.generated"
        try:
            password = json.loads(path.read_text())["admin"]
        except (FileNotFoundError, KeyError, ValueError):
            raise LocalError(f"no admin password in {path} (is the api-server up?)") from None
        doc = self.request("POST", "/auth/token", {"username": "admin", "password": password},
                           token=None)
        return doc["access_token"]

    def request(self, method: str, path: str, body: Any = None, *, token: str | None,
                ok: tuple[int, ...] = (200, 201)) -> Any:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url() + path, data=data, method=method,
                                     headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=120) as resp:
                return json.load(resp)
        except urllib.error.HTTPError as e:
            detail = e.read().decode(errors="replace")[:500]
            if e.code in ok:
                return json.loads(detail or "{}")
            raise LocalError(f"{method} {path} answered {e.code}: {detail}") from None
        except OSError as e:
            self.check_alive()
            raise LocalError(f"{method} {path}: the API server did not answer ({e})") from None


def _states(runs: list[dict[str, Any]]) -> Counter[str]:
    return Counter(str(r.get("state")) for r in runs)


def _create_backfill(local: Local, body: dict[str, Any], token: str, *, deadline: float) -> int:
    """POST /api/v2/backfills, retried while SQLite refuses it.

    Creating a backfill reads, then writes in one transaction.  On SQLite (WAL) a
    transaction that read before another process (the scheduler, every loop) committed
    cannot then write: SQLite answers "database is locked" at once, whatever the busy
    timeout, and the API answers 503.  The attempt is rolled back (its Backfill row is
    removed, best effort), so trying again is safe; a row the clean-up missed holds the
    DAG's one active backfill with no runs, and is cancelled before the next try.
    """
    started = time.monotonic()
    delay = 1.0
    tries = 0
    while True:
        tries += 1
        try:
            created = local.request("POST", "/api/v2/backfills", body, token=token)
            if tries > 1:
                print(f"  (created on try {tries}: SQLite refused the earlier ones)")
            return int(created["id"])
        except LocalError as e:
            busy = "answered 503" in str(e)
            if not busy and "Another backfill is running" not in str(e):
                raise
            if not busy and not _cancel_orphans(local, body, token):
                raise LocalError(f"{e}\n  hint: wait for it, or cancel it: PUT "
                                 "/api/v2/backfills/ID/cancel (or in the UI)") from None
            if time.monotonic() + delay > deadline:
                raise LocalError(f"SQLite kept refusing the backfill for "
                                 f"{time.monotonic() - started:.0f} s ({tries} tries): {e}"
                                 ) from None
            print(f"  SQLite refused the backfill (database is locked); retrying in "
                  f"{delay:.0f} s", flush=True)
            time.sleep(delay)
            delay = min(delay * 2, 15)


def _cancel_orphans(local: Local, body: dict[str, Any], token: str) -> bool:
    """Cancel active backfills of this DAG with no queued or running run: what a refused
    creation left behind (or one whose runs all ended).  Returns whether there was one; a
    backfill with runs still to do is never touched."""
    dag_id = body["dag_id"]
    quoted = urllib.parse.quote(dag_id, safe="")
    active = [b for b in local.request(
        "GET", f"/api/v2/backfills?dag_id={quoted}&limit=100", token=token)["backfills"]
        if b.get("completed_at") is None]
    cancelled = False
    for b in active:
        query = urllib.parse.urlencode({"run_type": "backfill", "limit": 1000,
                                        "logical_date_gte": b["from_date"],
                                        "logical_date_lte": b["to_date"]})
        runs = local.request("GET", f"/api/v2/dags/{quoted}/dagRuns?{query}",
                             token=token)["dag_runs"]
        if not any(r["state"] in ("queued", "running") for r in runs):
            local.request("PUT", f"/api/v2/backfills/{b['id']}/cancel", token=token)
            print(f"  cancelled backfill {b['id']}: left with no runs by a refused try")
            cancelled = True
    return cancelled


def backfill(local: Local, dag_id: str, start: str, end: str, *, max_active_runs: int,
             conf: dict[str, Any] | None, timeout: float, target: str | None) -> int:
    """Unpause, create the backfill through the REST API, wait, verify exactly once."""
    local.check_alive()
    if local.health() is None:
        raise LocalError(f"the API server at {local.url()} does not answer "
                         "(scripts/airflow-local.sh status)")
    t0 = time.monotonic()
    token = local.token()
    quoted = urllib.parse.quote(dag_id, safe="")
    # The dag-processor must have parsed the DAG before it can be backfilled.
    deadline = time.monotonic() + min(timeout, 300)
    while True:
        try:
            local.request("GET", f"/api/v2/dags/{quoted}", token=token)
            break
        except LocalError as e:
            if "answered 404" not in str(e):
                raise
        if time.monotonic() > deadline:
            errors = local.request("GET", "/api/v2/importErrors", token=token)
            raise LocalError(f"DAG {dag_id!r} not found after {time.monotonic() - t0:.0f} s; "
                             f"import errors: {json.dumps(errors.get('import_errors'))[:2000]}")
        local.check_alive()
        time.sleep(2)
    # New DAGs start paused ([core] dags_are_paused_at_creation): their runs would be
    # created and then sit queued with no error anywhere.
    local.request("PATCH", f"/api/v2/dags/{quoted}?update_mask=is_paused",
                  {"is_paused": False}, token=token)
    body: dict[str, Any] = {"dag_id": dag_id, "from_date": f"{start}T00:00:00Z",
                            "to_date": f"{end}T00:00:00Z", "max_active_runs": max_active_runs,
                            "reprocess_behavior": "none"}
    if conf is not None:
        body["dag_run_conf"] = conf
    bf_id = _create_backfill(local, body, token, deadline=time.monotonic() + min(timeout, 600))
    print(f"backfill {bf_id} of {dag_id} from {start} to {end}, at most {max_active_runs} "
          f"runs at a time (POST /api/v2/backfills)", flush=True)
    deadline = time.monotonic() + timeout
    query = urllib.parse.urlencode({"run_type": "backfill", "limit": 1000,
                                    "logical_date_gte": body["from_date"],
                                    "logical_date_lte": body["to_date"]})
    queued_since: float | None = None
    last = ""
    while True:
        runs = [r for r in local.request("GET", f"/api/v2/dags/{quoted}/dagRuns?{query}",
                                         token=token)["dag_runs"]]
        states = _states(runs)
        line = ", ".join(f"{n} {s}" for s, n in sorted(states.items())) or "no runs yet"
        elapsed = time.monotonic() - t0
        if line != last:
            print(f"  [{elapsed:4.0f} s] {len(runs)} run(s): {line}", flush=True)
            last = line
        if runs and all(str(r["state"]) in DONE for r in runs):
            break
        local.check_alive()
        if states.get("queued") and not states.get("running"):
            queued_since = queued_since or time.monotonic()
            if time.monotonic() - queued_since > 120:
                dag = local.request("GET", f"/api/v2/dags/{quoted}", token=token)
                hint = ("the DAG is paused: unpause it in the UI or PATCH is_paused=false"
                        if dag.get("is_paused") else
                        "is the scheduler working? see scripts/airflow-local.sh logs scheduler "
                        "('database is locked' there means another process holds SQLite's lock)")
                print(f"  hint: {states['queued']} run(s) queued for "
                      f"{time.monotonic() - queued_since:.0f} s, none running: {hint}",
                      flush=True)
                queued_since = time.monotonic()
        else:
            queued_since = None
        if time.monotonic() > deadline:
            raise LocalError(f"backfill {bf_id} not done within {timeout:.0f} s ({line}); "
                             f"the end of the scheduler log:\n"
                             f"{_tail(local.log('scheduler'))}")
        time.sleep(3)
    failed = [r["dag_run_id"] for r in runs if r["state"] != "success"]
    print(f"backfill {bf_id}: {len(runs)} run(s) ended in {time.monotonic() - t0:.0f} s"
          + (f"; FAILED: {', '.join(failed)}" if failed else ""))
    epochs = sorted(r["data_interval_start"][:10] for r in runs)
    ok = not failed and _verify(local, target, epochs)
    return 0 if ok else 1


def _verify(local: Local, target: str | None, epochs: list[str]) -> bool:
    """Exactly once, read back with the project's CLI: per epoch one published attempt."""
    target = target or local.env()["TPC_EXAMPLE_TARGET"]
    cli = [str(Path(sys.executable).parent / "airflow-tpc")]
    shown = subprocess.run([*cli, "list", target], capture_output=True, text=True)
    print(f"\nairflow-tpc list {target}\n{shown.stdout}{shown.stderr}", end="")
    out = subprocess.run([*cli, "list", target, "--json"], capture_output=True, text=True)
    if out.returncode != 0:
        print(f"UNEXPECTED: airflow-tpc list failed: {out.stderr.strip()}")
        return False
    infos = json.loads(out.stdout)
    published = Counter(i["epoch"] for i in infos if i["state"] == "COMMITTED"
                        and i["published"] and not i["superseded"])
    pending = [i["attempt"] for i in infos if i["state"] in ("OPEN", "PRECOMMITTED")]
    wrong = {e: published.get(e, 0) for e in epochs if published.get(e, 0) != 1}
    if wrong or pending:
        print(f"UNEXPECTED: published attempts per epoch {wrong}; pending attempts {pending}")
        return False
    print(f"OK: each of the {len(epochs)} epoch(s) has exactly one published attempt")
    return True


def status(local: Local) -> int:
    code = 0
    mode = local.mode()
    for name, backend in (("postgres", local.postgres), ("redis", local.redis)):
        if mode.get("postgres" if name == "postgres" else "celery"):
            print(f"{name:14} {'running' if backend.running() else 'stopped':8} "
                  f"{backend.url() if backend.running() else ''}")
    for service in local.services():
        pid = local.pid(service)
        state = ("running" if local.alive(service) else "DEAD") if pid else "stopped"
        code |= state == "DEAD"
        print(f"{service:14} {state:8} pid {pid or '-'}  log {local.log(service)}")
    if any(local.alive(s) for s in local.services()):
        doc = local.health()
        print(f"API {local.url()}: health "
              + (json.dumps({k: (v or {}).get("status") for k, v in doc.items()})
                 if doc else "not answering"))
    return 1 if code else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="airflow-local.sh", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    st = sub.add_parser("start", help="migrate the DB, start the services, wait until healthy")
    st.add_argument("--postgres", action="store_true",
                    help="a throw-away PostgreSQL cluster as the metadata DB")
    st.add_argument("--celery", action="store_true",
                    help="CeleryExecutor, a Redis broker and two workers (implies --postgres)")
    sub.add_parser("stop", help="stop every process the services started")
    sw = sub.add_parser("start-worker", help="start a Celery worker again after it died "
                        "or was killed (its lost tasks are retried by Airflow)")
    sw.add_argument("worker", choices=WORKERS)
    sub.add_parser("status", help="which services run, and their health")
    lg = sub.add_parser("logs", help="the end of each service's log")
    lg.add_argument("service", nargs="?", choices=SERVICES + WORKERS + ("postgres", "redis"))
    lg.add_argument("-n", "--lines", type=int, default=40)
    bf = sub.add_parser("backfill", help="backfill DAG_ID from FROM to TO (dates, inclusive)")
    bf.add_argument("dag_id")
    bf.add_argument("from_date", metavar="FROM")
    bf.add_argument("to_date", metavar="TO")
    bf.add_argument("--max-active-runs", type=int, default=2)
    bf.add_argument("--conf", help="dag_run conf (JSON object) for every run")
    bf.add_argument("--timeout", type=float, default=1800, help="seconds (default 1800)")
    bf.add_argument("--target", help="the target to verify (default $TPC_EXAMPLE_TARGET)")
    args = p.parse_args(argv)
    local = Local()
    start_timeout = float(os.environ.get("AIRFLOW_LOCAL_START_TIMEOUT", "600"))
    try:
        if args.cmd == "start":
            local.start(start_timeout, postgres=args.postgres, celery=args.celery)
        elif args.cmd == "stop":
            killed = local.stop()
            print("stopped" + (f" (killed after the grace period: {killed})" if killed else ""))
        elif args.cmd == "start-worker":
            print(f"{args.worker} ready, pid {local.start_worker(args.worker)}")
        elif args.cmd == "status":
            return status(local)
        elif args.cmd == "logs":
            for service in [args.service] if args.service else local.services():
                print(f"== {local.log(service)}\n{_tail(local.log(service), args.lines)}")
        elif args.cmd == "backfill":
            for d in (args.from_date, args.to_date):
                if len(d) != 10 or not d.replace("-", "").isdigit():
                    raise LocalError(f"not a date (YYYY-MM-DD): {d!r}")
            conf = None
            if args.conf:
                try:
                    conf = json.loads(args.conf)
                except ValueError:
                    raise LocalError(f"--conf is not JSON: {args.conf!r}") from None
                if not isinstance(conf, dict):
                    raise LocalError("--conf must be a JSON object")
            if args.max_active_runs < 1:
                raise LocalError("--max-active-runs must be at least 1")
            return backfill(local, args.dag_id, args.from_date, args.to_date,
                            max_active_runs=args.max_active_runs, conf=conf,
                            timeout=args.timeout, target=args.target)
    except LocalError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
