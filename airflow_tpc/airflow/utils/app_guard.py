"""The guard of one attempt's Spark application: run spark-submit, stop all of it when its
task is gone.

Run as a script (``python app_guard.py <task pid> <marker> -- spark-submit ...``, no
package import: it must start in milliseconds and survive the task process), in its own
session.  Every process of the application — spark-submit (the driver JVM in client and
local mode), the PySpark driver, its Python workers — inherits the environment variable
:data:`MARKER_ENV` with the attempt's random marker, so "the application of this attempt"
is the set of live processes carrying it: no pid is ever trusted alone (a recycled pid
carries no marker), and a process that left the session (``setsid``) is still found.

The guard passes spark-submit's output and exit code through (the provider's hook reads
both), and kills every marked process when

* its task process died (re-parented guard: the task was SIGKILLed, or its worker was),
* it is sent SIGTERM/SIGINT/SIGHUP (the task's ``on_kill`` also kills by marker).

The functions here are also used in-process by :mod:`airflow_tpc.airflow.utils.spark_app`.
Linux ``/proc`` only; elsewhere :func:`marked_pids` finds nothing (the guard still runs).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

#: The environment variable naming the attempt's application (a random token, not a
#: secret: it only tells our processes apart).
MARKER_ENV = "AIRFLOW_TPC_APP"


def marked_pids(marker: str) -> list[int]:
    """Live processes of this user whose environment holds ``MARKER_ENV=marker``."""
    needle = f"{MARKER_ENV}={marker}".encode()
    out = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return out
    for name in names:
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as fh:
                env = fh.read()
        except OSError:  # gone, or another user's (never ours to kill)
            continue
        if needle in env.split(b"\0"):
            out.append(int(name))
    return out


def kill_marked(marker: str, rounds: int = 20) -> int:
    """SIGKILL every process carrying ``marker`` until none is left (a process may fork
    while we kill); returns how many were killed.  Processes that are zombies (dead, not
    yet reaped) still show their environment: they are counted once, not waited for."""
    killed: set[int] = set()
    for _ in range(rounds):
        alive = [p for p in marked_pids(marker) if not _is_zombie(p)]
        if not alive:
            break
        for pid in alive:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
            except ProcessLookupError:
                pass
        time.sleep(0.05)
    return len(killed)


def _is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0] == b"Z"
    except (OSError, IndexError):
        return True


def main(argv: list[str]) -> int:
    """``<task pid> <marker> -- cmd...``: run cmd, kill its marked tree if the task dies."""
    if len(argv) < 4 or argv[2] != "--":
        print("usage: app_guard.py <task pid> <marker> -- command ...", file=sys.stderr)
        return 2
    task_pid, marker, cmd = int(argv[0]), argv[1], argv[3:]

    def stop(signum: int, _frame: object) -> None:
        kill_marked(marker)
        os._exit(128 + signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, stop)
    child = subprocess.Popen(cmd)  # stdout/stderr/env: the guard's own (the hook's pipe)
    while True:
        try:
            return child.wait(timeout=0.5)
        except subprocess.TimeoutExpired:
            pass
        if os.getppid() != task_pid:  # the task process is gone: nobody will use the result
            n = kill_marked(marker)
            print(f"airflow-tpc guard: task process {task_pid} is gone; killed {n} "
                  "process(es) of its Spark application", file=sys.stderr, flush=True)
            return 137


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
