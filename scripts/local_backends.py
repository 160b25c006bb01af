"""The production backends of scripts/airflow_local.py: a throw-away PostgreSQL cluster
(the metadata DB) and a Redis server (the Celery broker), each on 127.0.0.1 and a free
port, started and stopped with the services.

Both come from the OS (Debian: ``apt-get install postgresql redis-server``; bootstrap.sh
installs them when it may).  PostgreSQL's ``initdb`` refuses to run as root, so as root
the cluster belongs to the ``postgres`` user and lives in its own folder under /tmp (a
pytest or home folder is often not traversable by that user); its path is recorded in
``$AIRFLOW_HOME/run/postgres.json`` so ``stop`` finds it.  Authentication is ``trust``
on 127.0.0.1 only: a local recipe, not a server to expose.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path


class BackendError(Exception):
    """One clear line: what is missing or failed, and what to do."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _pg_bin(name: str) -> str:
    found = shutil.which(name) or next(iter(sorted(glob.glob(
        f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)), None)
    if not found:
        raise BackendError(f"PostgreSQL's {name} is not installed (Debian: apt-get install "
                           "postgresql; or set AIRFLOW_LOCAL_DB_URL to a database you run)")
    return found


def _as_owner(cmd: list[str]) -> list[str]:
    """As root, run PostgreSQL's tools as the ``postgres`` user (initdb refuses root)."""
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else cmd


class Postgres:
    """A cluster recorded in ``run/postgres.json`` (its data folder and port)."""

    def __init__(self, run: Path) -> None:
        self.record = run / "postgres.json"

    def url(self) -> str:
        doc = json.loads(self.record.read_text())
        return f"postgresql+psycopg2://airflow@127.0.0.1:{doc['port']}/airflow"

    def start(self, log: Path) -> str:
        """initdb a new cluster, start it, create the ``airflow`` database; its URL."""
        initdb, pg_ctl = _pg_bin("initdb"), _pg_bin("pg_ctl")
        data = Path(tempfile.mkdtemp(prefix="tpc-airflow-pg-"))
        if os.geteuid() == 0:
            shutil.chown(data, "postgres", "postgres")
        port = free_port()
        self.record.write_text(json.dumps({"data": str(data), "port": port}))
        with open(log, "a") as out:
            for cmd in ([initdb, "-D", str(data), "-A", "trust", "-U", "airflow",
                         "--encoding", "UTF8", "--no-sync"],
                        [pg_ctl, "-D", str(data), "-l", str(data / "server.log"), "-w", "-t",
                         "120", "-o", f"-p {port} -k {data} -c listen_addresses=127.0.0.1 "
                         "-c fsync=off -c max_connections=200", "start"]):
                rc = subprocess.run(_as_owner(cmd), stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, timeout=300).returncode
                if rc != 0:
                    raise BackendError(f"{Path(cmd[0]).name} failed ({rc}); see {log}")
        deadline = time.monotonic() + 60
        while True:  # the server accepts connections a moment after pg_ctl returns
            rc = subprocess.run(_as_owner([_pg_bin("createdb"), "-h", "127.0.0.1", "-p",
                                           str(port), "-U", "airflow", "airflow"]),
                                capture_output=True, text=True, timeout=60)
            if rc.returncode == 0:
                return self.url()
            if time.monotonic() > deadline:
                raise BackendError(f"createdb failed: {rc.stderr.strip()}")
            time.sleep(1)

    def stop(self) -> None:
        """Stop the cluster (fast shutdown) and delete its folder."""
        if not self.record.exists():
            return
        doc = json.loads(self.record.read_text())
        data = Path(doc["data"])
        if (data / "postmaster.pid").exists():
            subprocess.run(_as_owner([_pg_bin("pg_ctl"), "-D", str(data), "-m", "fast",
                                      "-w", "-t", "120", "stop"]),
                           capture_output=True, timeout=180)
        shutil.rmtree(data, ignore_errors=True)
        self.record.unlink()

    def running(self) -> bool:
        if not self.record.exists():
            return False
        return (Path(json.loads(self.record.read_text())["data"]) / "postmaster.pid").exists()


class Redis:
    """A ``redis-server`` recorded in ``run/redis.json`` (port, pid); no persistence."""

    def __init__(self, run: Path) -> None:
        self.record = run / "redis.json"

    def url(self) -> str:
        return f"redis://127.0.0.1:{json.loads(self.record.read_text())['port']}/0"

    def start(self, log: Path, home: Path) -> str:
        server = shutil.which("redis-server")
        if not server:
            raise BackendError("redis-server is not installed (Debian: apt-get install "
                               "redis-server)")
        port = free_port()
        pidfile = self.record.parent / "redis.pid"
        rc = subprocess.run([server, "--port", str(port), "--bind", "127.0.0.1",
                             "--daemonize", "yes", "--save", "", "--appendonly", "no",
                             "--pidfile", str(pidfile), "--logfile", str(log),
                             "--dir", str(home)],
                            capture_output=True, text=True, timeout=60)
        if rc.returncode != 0:
            raise BackendError(f"redis-server failed: {rc.stderr.strip() or rc.stdout.strip()}")
        # The daemon creates its pid file, then writes the pid: on a busy machine the file
        # can be seen empty in between.  Wait for the number, not only for the file.
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(FileNotFoundError, ValueError):
                pid = int(pidfile.read_text())
                break
            if time.monotonic() > deadline:
                raise BackendError(f"redis-server wrote no pid to {pidfile}; see {log}")
            time.sleep(0.2)
        self.record.write_text(json.dumps({"port": port, "pid": pid}))
        return self.url()

    def stop(self) -> None:
        if not self.record.exists():
            return
        pid = json.loads(self.record.read_text())["pid"]
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 30
        while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        self.record.unlink()

    def running(self) -> bool:
        if not self.record.exists():
            return False
        pid = json.loads(self.record.read_text())["pid"]
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except FileNotFoundError:
            return False
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
