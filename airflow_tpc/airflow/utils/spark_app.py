"""No orphaned Spark application: each attempt's application is recorded and stopped.

A fenced or aborted attempt can never publish, but its Spark application would keep
computing (and, on a cluster, keep its executors) until it ends by itself.  So:

* the submit task runs spark-submit under :mod:`~airflow_tpc.airflow.utils.app_guard`, in its own
  session, with the attempt's random marker in the environment of every process of the
  application (spark-submit/driver JVM, PySpark driver, Python workers);
* it writes the attempt's **runtime record** (PROTOCOL.md §2, §3.4 "runtime"):
  ``T/_tpc/runtime/epoch=E/attempt=NNNNNN.json``, write-once, never read for a decision —
  host, boot id, the guard's pid and start time, the marker, the master and deploy mode;
* ``on_kill``, the submit's own failure path, the abort task and the next attempt's
  ``begin`` stop the application: every process carrying the marker, when the record was
  written on this machine (same boot id); the guard itself kills them when its task
  process dies (a SIGKILL leaves no ``on_kill``).  An application on another machine is
  logged as not reachable (its guard stops it when its own task dies).

A group attempt's application writes every member (one job, one marker): its record is
written for each member's attempt, in that member's ``_tpc/runtime`` (the same record, the
member's ``txn_id``, plus ``group``), and the group's stoppers ask every member
(:func:`stop_group`, :func:`stop_group_older`).

No secret is recorded: the master URL loses any user-info, the marker is random.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from airflow_tpc.airflow.hooks.job_credentials import SecretSafeSparkSubmitHook
from airflow_tpc.airflow.utils import app_guard
from airflow_tpc.core.layout import TPC_DIR, attempt_name

log = logging.getLogger(__name__)

#: Version of the runtime record's fields.
RUNTIME_VERSION = 1
_GUARD = os.path.abspath(app_guard.__file__)


def runtime_dir(sink: Any, epoch: str) -> str:
    """The folder of an epoch's runtime records (beside the ledger, under ``_tpc``)."""
    return sink.storage.join(sink.layout.root, TPC_DIR, "runtime", f"epoch={epoch}")


def runtime_path(sink: Any, epoch: str, attempt: int) -> str:
    return sink.storage.join(runtime_dir(sink, epoch), f"{attempt_name(attempt)}.json")


def boot_id() -> str:
    """This machine's boot (a pid means something only within one boot of one host)."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as fh:
            return fh.read().strip()
    except OSError:
        return ""


def _public_master(master: str) -> str:
    """The master URL without user-info (``spark://user:pw@host`` → ``spark://host``)."""
    try:
        parts = urlsplit(master)
    except ValueError:
        return ""
    if parts.username is None and parts.password is None:
        return master
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


def _start_time(pid: int) -> float | None:
    try:
        import psutil

        return psutil.Process(pid).create_time()
    except Exception:  # gone already, or no psutil: the marker identifies it anyway
        return None


class AppStoppingSparkSubmitHook(SecretSafeSparkSubmitHook):
    """The submit hook that runs spark-submit under the guard and records the application.

    ``_tpc_marker`` is this attempt's marker; ``_tpc_on_start(record)`` is called once
    spark-submit runs (the operator writes the runtime record).
    """

    _tpc_marker: str
    _tpc_on_start: Any

    @classmethod
    def adopt_app(cls, hook: SecretSafeSparkSubmitHook, marker: str,
                  on_start: Any) -> AppStoppingSparkSubmitHook:
        hook.__class__ = cls  # see SecretSafeSparkSubmitHook.adopt
        hook._tpc_marker = marker  # type: ignore[attr-defined]
        hook._tpc_on_start = on_start  # type: ignore[attr-defined]
        return hook  # type: ignore[return-value]

    def _build_spark_common_args(self) -> list[str]:
        args = super()._build_spark_common_args()
        # every process of the application inherits it (Popen gets self._env)
        self._env = {**(self._env or {}), app_guard.MARKER_ENV: self._tpc_marker}
        return args

    def _build_spark_submit_command(self, application: str) -> list[str]:
        cmd = super()._build_spark_submit_command(application)
        return [sys.executable, "-I", _GUARD, str(os.getpid()), self._tpc_marker, "--", *cmd]

    def submit(self, application: str = "", **kwargs: Any) -> str | None:
        # its own session: Airflow's killpg of the task's group must not kill the guard
        # before it has stopped the application
        return super().submit(application, start_new_session=True, **kwargs)

    def _process_spark_submit_log(self, itr: Iterator[Any]) -> None:
        sp = self._submit_sp
        if sp is not None and self._tpc_on_start is not None:
            on_start, self._tpc_on_start = self._tpc_on_start, None
            on_start({"pid": sp.pid, "pid_start": _start_time(sp.pid),
                      "master": _public_master(str(self._connection["master"])),
                      "deploy_mode": self._connection["deploy_mode"] or "client"})
        super()._process_spark_submit_log(itr)

    @staticmethod
    def stop_marked(marker: str) -> int:
        """Kill every process of the application ``marker`` names still alive; how many."""
        return app_guard.kill_marked(marker)

    def on_kill(self) -> None:
        n = self.stop_marked(self._tpc_marker)
        self.log.info("on_kill: stopped %d process(es) of the Spark application", n)
        super().on_kill()  # cluster mode: the provider asks the master to kill the driver


def failure_reason(exc: BaseException, killed_by: str | None, stopped: int) -> str:
    """The abort reason of a failed submit: what happened to the task, then what happened
    to its application — not the exception the dying task happened to see last (a task
    whose worker was killed sees a BrokenPipeError writing its log)."""
    app = f"; spark application stopped ({stopped} process(es) killed)" if stopped else ""
    if killed_by:
        return f"task process killed ({killed_by}){app or '; spark application ended'}"
    if isinstance(exc, BrokenPipeError) or os.getppid() == 1:
        return ("task process lost its supervisor (worker killed; the task saw "
                f"{type(exc).__name__}){app}")
    return f"spark job failed: {type(exc).__name__}{app}"


def new_record(txn: Any, marker: str, started: dict[str, Any]) -> dict[str, Any]:
    """The runtime record of ``txn``'s application (no secret: see the module doc)."""
    return {"version": RUNTIME_VERSION, "kind": "runtime", "txn_id": txn.txn_id,
            "epoch": txn.epoch, "attempt": txn.attempt, "host": socket.gethostname(),
            "boot_id": boot_id(), "marker": marker, "started_at": time.time(), **started}


def write_record(sink: Any, txn: Any, record: dict[str, Any]) -> None:
    """Write the record once; a failure is logged (the guard and on_kill still work)."""
    try:
        sink.storage.put_if_absent(runtime_path(sink, txn.epoch, txn.attempt),
                                   json.dumps(record, sort_keys=True).encode())
    except Exception as exc:
        log.warning("Could not write the runtime record of %s (%s): only this task can "
                    "stop its Spark application", txn.txn_id, exc)


def new_marker() -> str:
    return uuid.uuid4().hex


def stop_recorded(sink: Any, epoch: str, attempt: int) -> str | None:
    """Stop the application an attempt's runtime record names; what happened (None: no
    record).  Never raises: stopping is cleanup, the protocol decided already."""
    try:
        raw = sink.storage.read_bytes(runtime_path(sink, epoch, attempt))
        record = json.loads(raw) if raw else None
    except Exception as exc:
        return f"runtime record unreadable ({type(exc).__name__})"
    if not isinstance(record, dict) or not record.get("marker"):
        return None
    return _stop(record)


def _stop(record: dict[str, Any]) -> str:
    if not record.get("boot_id") or record.get("boot_id") != boot_id():
        return (f"spark application on {record.get('host')!r} not reachable from this host "
                "(its guard stops it when its task dies)")
    n = app_guard.kill_marked(str(record["marker"]))
    return f"spark application stopped ({n} process(es) killed)" if n else \
        "spark application already ended"


def stop_older(sink: Any, epoch: str, attempt: int) -> list[str]:
    """Stop the applications of the epoch's attempts below ``attempt`` (they are fenced
    now); one line per application found alive or unreachable."""
    try:
        infos = sink.storage.list(runtime_dir(sink, epoch))
    except Exception as exc:
        log.warning("Could not list the runtime records of epoch %s: %s", epoch, exc)
        return []
    said = []
    for info in infos:
        name = info.path.rsplit("/", 1)[-1]
        if not (name.startswith("attempt=") and name.endswith(".json")):
            continue
        try:
            older = int(name[len("attempt="):-len(".json")])
        except ValueError:
            continue
        if older < attempt:
            what = stop_recorded(sink, epoch, older)
            if what and "already ended" not in what:
                said.append(f"attempt {older}: {what}")
    return said


def write_group_records(group: Any, gtxn: Any, marker: str, started: dict[str, Any]) -> None:
    """The runtime record of a group attempt's application, once per member (PROTOCOL.md
    §3.4.12 says why per member): each member's stoppers find it where they look."""
    for name, sink in group.sinks.items():
        txn = gtxn.member(name)
        write_record(sink, txn, {**new_record(txn, marker, started), "group": gtxn.txn_id})


def stop_group(group: Any, epoch: str, attempt: int) -> list[str]:
    """Stop the application of group attempt ``attempt`` (its members' records name one
    marker: the first member that finds it alive stops it); what happened, one line per
    member with a record.  Never raises, as :func:`stop_recorded`."""
    said = []
    for name, sink in group.sinks.items():
        what = stop_recorded(sink, epoch, attempt)
        if what:
            said.append(f"{name}: {what}")
    if group_stopped(said):  # the other members' "already ended" is the same application
        said = [line for line in said if not line.endswith("already ended")]
    return said


def group_stopped(said: list[str]) -> bool:
    """Whether :func:`stop_group` found the application alive (then abort again: it may
    have written after the abort decision)."""
    return any(line.split(": ", 1)[-1].startswith("spark application stopped") for line in said)


def stop_group_older(group: Any, epoch: str, attempt: int) -> list[str]:
    """A new group attempt's begin: stop the applications of the lower attempts of every
    member (fenced now), as :func:`stop_older` does for one target."""
    return [f"{name} {line}" for name, sink in group.sinks.items()
            for line in stop_older(sink, epoch, attempt)]
