"""No orphaned Spark application (issue 33 §2): real Airflow task, real spark-submit.

The submit task of ``tpc_it_orphan`` runs a job that never ends by itself
(tests/spark/jobs/block_app.py: the driver and one Python worker publish their pids, the
worker waits for a file that never comes). The task runs in a child process
(``dag.test``); the test then kills that process, aborts the attempt, or begins a newer
attempt of the epoch, and asserts that within 30 s no process of the application is
alive: spark-submit's JVM and the PySpark driver (found by the job's unique ``--flag``
path on their command lines, independently of the marker the code uses), the Python
worker and its daemon (by the pids the job published).  On the standalone cluster the
application must leave the master's ``activeapps`` (its JSON at ``/json/``) as well.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path

import psutil
import pytest

from airflow_tpc import Sink, TxnState

from .helpers import day

pytestmark = pytest.mark.timeout(600)

REPO = Path(__file__).resolve().parents[2]
DAG_FILE = Path(__file__).parent / "dags" / "tpc_it_orphan.py"
GONE_WITHIN = 30.0  # seconds, the bound

CHILD = textwrap.dedent("""
    import json, sys
    sys.path.insert(0, sys.argv[1])
    from airflow.dag_processing.dagbag import DagBag
    from tests.airflow.helpers import day
    dag_file, dag_id, date, conf = sys.argv[2:6]
    bag = DagBag(dag_folder=dag_file)
    assert not bag.import_errors, bag.import_errors
    dr = bag.get_dag(dag_id).test(logical_date=day(date), run_conf=json.loads(conf))
    print("CHILD RUN ENDED", dr.state, flush=True)
""")


class _Run:
    """A ``dag.test`` of one DAG in a child process (the task process), its job blocked."""

    def __init__(self, tmp_path: Path, dag_id: str, date: str) -> None:
        self.flag = str(tmp_path / f"app-{dag_id}-{date}")
        self.log = tmp_path / f"child-{dag_id}-{date}.log"
        with open(self.log, "w") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", CHILD, str(REPO), str(DAG_FILE), dag_id, date,
                 json.dumps({"flag": self.flag})],
                env=dict(os.environ), stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True)

    def wait_running(self, timeout: float = 400) -> list[psutil.Process]:
        """Wait until the job's Python worker runs; the application's processes."""
        deadline = time.monotonic() + timeout
        while not os.path.exists(self.flag + ".worker"):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError("the job never ran:\n" + self.log.read_text()[-4000:])
            time.sleep(0.1)
        procs = self.processes()
        names = " ".join(" ".join(p.cmdline()) for p in procs)
        # the guard + spark-submit's JVM, the PySpark driver, the worker and its daemon
        assert len(procs) >= 4 and "SparkSubmit" in names and "pyspark.daemon" in names, names
        return procs

    def processes(self) -> list[psutil.Process]:
        """Live processes of the application, found without the code's marker."""
        out: dict[int, psutil.Process] = {}
        for p in psutil.process_iter(["cmdline", "status"]):
            if p.info["status"] != psutil.STATUS_ZOMBIE and \
                    any(self.flag in a for a in p.info["cmdline"] or ()):
                out[p.pid] = p
        worker = int(Path(self.flag + ".worker").read_text())
        for pid in (worker, *_parents(worker)):
            try:
                p = psutil.Process(pid)
                if p.status() != psutil.STATUS_ZOMBIE and "pyspark" in " ".join(p.cmdline()):
                    out[pid] = p
            except psutil.NoSuchProcess:
                pass
        return list(out.values())

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        for p in self.processes():  # never leave a test's processes behind
            p.kill()


def _parents(pid: int) -> list[int]:
    try:
        parent = psutil.Process(pid).parent()
    except psutil.NoSuchProcess:
        return []
    return [parent.pid] if parent is not None else []


def _assert_gone(procs: list[psutil.Process], since: float, what: str) -> float:
    """Every process in ``procs`` ends within GONE_WITHIN of ``since``; seconds it took."""
    while True:
        alive = [p for p in procs if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        if not alive:
            return time.monotonic() - since
        if time.monotonic() - since > GONE_WITHIN:
            raise AssertionError(f"{what}: still alive after {GONE_WITHIN:.0f} s: "
                                 f"{[' '.join(p.cmdline())[:160] for p in alive]}")
        time.sleep(0.2)


def _latest(target: str, ns: str, epoch: str):
    sink = Sink(target, ns)
    infos = sink.describe(epoch)
    return sink, infos


@pytest.fixture
def run(tmp_path, dagbag):
    started: list[_Run] = []

    def start(dag_id: str, date: str) -> _Run:
        r = _Run(tmp_path, dag_id, date)
        started.append(r)
        return r

    yield start
    for r in started:
        r.stop()


def test_task_process_sigkilled_application_stopped(run, data_root):
    """A SIGKILLed task process runs no on_kill and no finally: its guard stops the app."""
    r = run("tpc_it_orphan", "2026-06-01")
    procs = r.wait_running()
    os.kill(r.proc.pid, signal.SIGKILL)
    r.proc.wait(30)
    took = _assert_gone(procs, time.monotonic(), "task process SIGKILLed")
    print(f"[application gone {took:.1f} s after the task process was killed]")
    # The runtime record names the application (and no secret); the attempt is undecided.
    _sink, infos = _latest(os.path.join(data_root, "tpc_it_orphan_target"), "tpc_it_orphan",
                           "2026-06-01")
    record = json.loads(Path(data_root, "tpc_it_orphan_target", "_tpc", "runtime",
                             "epoch=2026-06-01", f"attempt={infos[-1].attempt:06d}.json")
                        .read_text())
    assert record["txn_id"] == infos[-1].txn_id and record["marker"]
    assert record["pid"] in {p.pid for p in procs}


def test_newer_attempt_stops_the_older_application(run, dagbag, data_root):
    """The next attempt's begin (a rerun of the epoch) stops the fenced attempt's app."""
    r = run("tpc_it_orphan", "2026-06-02")
    procs = r.wait_running()
    target = os.path.join(data_root, "tpc_it_orphan_target")
    _sink, before = _latest(target, "tpc_it_orphan", "2026-06-02")
    # a second run of the same epoch (another hour of the same day), whose job ends
    dr = dagbag.get_dag("tpc_it_orphan").test(
        logical_date=day("2026-06-02T06:00:00"),
        run_conf={"flag": str(Path(r.flag).with_name("second")), "block": 0})
    assert dr.state == "success"
    _sink, after = _latest(target, "tpc_it_orphan", "2026-06-02")
    newer = after[-1]
    assert newer.attempt > before[-1].attempt
    # measured from the newer attempt's begin (its begin record's time)
    since = time.monotonic() - (time.time() - newer.started_at)
    _assert_gone(procs, since, "fenced by a newer attempt")


def test_abort_stops_the_application(run, data_root):
    """The abort task's path (TpcHook.abort_run) stops the attempt's app before aborting."""
    from airflow_tpc.airflow.hooks.tpc import TpcHook

    r = run("tpc_it_orphan", "2026-06-03")
    procs = r.wait_running()
    target = os.path.join(data_root, "tpc_it_orphan_target")
    sink, infos = _latest(target, "tpc_it_orphan", "2026-06-03")
    info = infos[-1]
    t0 = time.monotonic()
    result = TpcHook(target, "tpc_it_orphan").abort_run(
        sink.transaction(info.epoch, info.attempt).to_dict(), info.owner["dag_id"],
        info.owner["run_id"], "rejected by the test")
    assert result["aborted"] == [info.txn_id]
    _assert_gone(procs, t0, "aborted")
    assert r.proc.wait(120) == 0  # dag.test ends (the task failed, its run with it)
    _sink, infos = _latest(target, "tpc_it_orphan", "2026-06-03")
    assert infos[-1].state is TxnState.ABORTED and infos[-1].reason == "rejected by the test"


def test_standalone_cluster_abort_removes_the_application(run, spark_cluster, data_root):
    """Client mode on the standalone cluster: the abort stops the driver, and the master
    drops the application (and its executors)."""
    from airflow_tpc.airflow.hooks.tpc import TpcHook

    _master, _logs, ui = spark_cluster
    r = run("tpc_it_orphan_cluster", "2026-06-04")
    procs = r.wait_running()

    def active() -> list[str]:
        with urllib.request.urlopen(f"{ui}/json/", timeout=10) as resp:
            doc = json.load(resp)
        return [a["id"] for a in doc.get("activeapps", []) if a.get("name") == "tpc-block-app"]

    assert len(active()) == 1
    target = os.path.join(data_root, "tpc_it_orphan_cluster_target")
    sink, infos = _latest(target, "tpc_it_orphan_cluster", "2026-06-04")
    info = infos[-1]
    t0 = time.monotonic()
    TpcHook(target, "tpc_it_orphan_cluster").abort_run(
        sink.transaction(info.epoch, info.attempt).to_dict(), info.owner["dag_id"],
        info.owner["run_id"], "rejected by the test")
    _assert_gone(procs, t0, "aborted on the cluster")
    while active():
        assert time.monotonic() - t0 < GONE_WITHIN, "the master still runs the application"
        time.sleep(0.5)


def test_task_process_sigterm_on_kill_stops_the_application(run, data_root):
    """Airflow stops a task with SIGTERM: its on_kill stops the whole application (not just
    spark-submit), and the attempt's abort reason says so."""
    r = run("tpc_it_orphan", "2026-06-05")
    procs = r.wait_running()
    t0 = time.monotonic()
    os.kill(r.proc.pid, signal.SIGTERM)
    _assert_gone(procs, t0, "task process SIGTERMed")
    assert r.proc.wait(120) == 0  # the task failed, dag.test ended
    _sink, infos = _latest(os.path.join(data_root, "tpc_it_orphan_target"), "tpc_it_orphan",
                           "2026-06-05")
    assert infos[-1].state is TxnState.ABORTED
    assert infos[-1].reason.startswith(
        "task process killed (SIGTERM); spark application stopped ("), infos[-1].reason
