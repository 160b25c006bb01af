"""Real SIGKILLs through Airflow: the commit task, the abort task, the Spark job.

* **Commit.** The epoch already holds an older committed output. A child process
  runs ``dag.test`` of ``tpc_it_kills`` with ``AIRFLOW_TPC_PAUSE_AT=<step>``: the
  commit task, running in that process, stops at the step and says so, and we
  SIGKILL the process (no handler, no ``finally``; the task instance is left RUNNING
  in the metadata DB). Then the commit task is re-run through Airflow (clear + run,
  ``rerun_tasks``): the epoch holds the job's rows once, staging is gone, the ledger
  says committed + published, one Asset event for the transaction over all tries.
* **Abort.** The same with ``tpc_it_kills_abort`` (the sensor gives up, so the
  ``abort`` task runs), paused at each abort step; re-running the abort task leaves
  staging gone, the attempt ABORTED, the target byte-for-byte as it was, no event.
* **The Spark job.** Its write stalls half-way (``tests/spark/jobs/kill_mid_write.py``);
  we SIGKILL the spark-submit process tree (JVM, Python driver, Python workers), and
  on the retry the Airflow task process as well.

Cost: spark-submit takes 11-30 s here, a child process 8-18 s more. One DAG run per
step would take ~7 min, so kills are **chained** over one run: the first step is
killed in the ``dag.test`` child, each next step in a child that re-runs the task
(``rerun_tasks``; these warm up while the first child runs) and is killed there in
turn, and a last re-run in this process must converge. Each kill leaves the storage
state a first-try kill at that step leaves (promotion is a pure function of the
decision record), which is checked after every kill. ``TPC_KILLS_FRESH=1`` runs each
step in its own DAG run instead. Every step of ``ABORT_STEPS`` is killed, and the
commit at one step of each state a dead commit task can leave (``KILLED_COMMIT_STEPS``:
undecided; decided, nothing visible; visible, not published; everything done but the
published record); tests/core/test_process_kill.py SIGKILLs every step of
``COMMIT_STEPS`` (local and S3) without Airflow, and tests/core/test_crashpoints.py
crashes at each of them in-process.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from airflow_tpc import Sink, TxnState

from ..core.helpers import stage
from ..core.test_crashpoints import ABORT_STEPS, COMMIT_STEPS
from .helpers import (
    asset_events,
    day,
    find_run,
    published,
    read_rows,
    rerun_tasks,
    states,
    tree,
    tries,
)

pytestmark = pytest.mark.timeout(1800)

DAG_ID = "tpc_it_kills"
ABORT_DAG_ID = "tpc_it_kills_abort"
NS = "tpc_it_kills"
ROWS = 100  # what the job writes per epoch (the sum of column `events`)
OLD_ROWS = 7  # what the epoch held before (committed through the core)
DAG_FILE = Path(__file__).parent / "dags" / "tpc_it_kills.py"
REPO = Path(__file__).resolve().parents[2]
FRESH = os.environ.get("TPC_KILLS_FRESH") == "1"

#: Steps after which readers see the new output (the directory exchange).
VISIBLE_AFTER = {"promote.after_swap", "commit.before_published"}


def _chains(steps: list[str]) -> list[list[str]]:
    return [[s] for s in steps] if FRESH else [steps]


#: promote.before_marker and promote.before_swap leave what commit.after_decision
#: leaves as far as Airflow can see (decided, not visible, not published, no event):
#: they are killed without Airflow by tests/core/test_process_kill.py.
KILLED_COMMIT_STEPS = ["commit.before_decision", "commit.after_decision",
                       "promote.after_swap", "commit.before_published"]
assert [s for s in COMMIT_STEPS["move-local"] if s in KILLED_COMMIT_STEPS] == KILLED_COMMIT_STEPS
COMMIT_CHAINS = _chains(KILLED_COMMIT_STEPS)
# abort.after_decision then abort.after_cleanup in one chain needs the re-run of the
# abort task to finish an ABORTED attempt's cleanup (fixed in cb75554; before, it
# skipped the attempt and left its staging).
ABORT_CHAINS = _chains(ABORT_STEPS)


def _chain_id(chain: list[str]) -> str:
    return "+".join(s.split(".", 1)[1] for s in chain) if len(chain) > 1 else chain[0]


CHILD_DAG_TEST = textwrap.dedent("""
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
CHILD_RERUN = textwrap.dedent("""
    import contextlib, json, os, sys, time
    sys.path.insert(0, sys.argv[1])
    from airflow.dag_processing.dagbag import DagBag
    from tests.airflow.helpers import rerun_tasks
    dag_file, dag_id, tasks, go = sys.argv[2:6]
    bag = DagBag(dag_folder=dag_file)
    assert not bag.import_errors, bag.import_errors
    with contextlib.suppress(Exception):  # warm-up only: the in-process execution API
        import httpx  # builds its app lazily, on the first request (3-15 s): send one now
        from airflow.sdk.execution_time.supervisor import in_process_api_server
        api = in_process_api_server()
        httpx.Client(transport=api.transport, base_url="http://warm-up").get("/warm-up")
    while not os.path.exists(go):  # started early; re-run only when told (after a kill)
        time.sleep(0.05)
    dr = rerun_tasks(bag.get_dag(dag_id), open(go).read(), json.loads(tasks))
    print("CHILD RUN ENDED", dr.state, flush=True)
""")


# ------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def dags(dagbag):
    return dagbag.get_dag(DAG_ID), dagbag.get_dag(ABORT_DAG_ID)


@pytest.fixture(scope="module")
def target(data_root):
    return os.path.join(data_root, "kills_target")


@pytest.fixture(scope="module")
def sink(target):
    return Sink(target, NS)


@pytest.fixture(scope="module")
def asset_uri(target):
    return f"file://{os.path.abspath(target)}"


def _seed(sink, target, epoch):
    """Commit OLD_ROWS rows for ``epoch`` through the core: the output a rerun replaces."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    buf = io.BytesIO()
    pq.write_table(pa.table({"id": pa.array(range(OLD_ROWS), pa.int64()),
                             "events": pa.array([1] * OLD_ROWS, pa.int32()),
                             "day": [epoch] * OLD_ROWS}), buf)
    txn, manifest = stage(sink, epoch, {"part-old.parquet": buf.getvalue()})
    sink.commit(txn, expected_digest=manifest.digest)
    assert read_rows(target)[epoch] == OLD_ROWS
    return txn


# -------------------------------------------------------------------------- helpers
def _info(sink, epoch):
    return {i.attempt: i for i in sink.describe(epoch)}


def _visible(target):
    """Every file of the target outside _tpc/ (data and markers), with its bytes."""
    root = Path(target)
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and not str(p.relative_to(root)).startswith("_tpc/")}


def _staging(target, epoch, attempt=None):
    # beside the target (docs/PROTOCOL.md §2)
    path = Path(target).parent / "_tpc_staging" / Path(target).name / f"epoch={epoch}"
    return tree(path if attempt is None else path / f"attempt={attempt:06d}")


def _events_for(asset_uri, txn_id):
    return [e for e in asset_events(asset_uri) if e.get("txn_id") == txn_id]


def _run_id(dag_id, epoch):
    from airflow import settings
    from airflow.models.dagrun import DagRun
    from sqlalchemy import select

    with settings.Session() as session:
        return session.scalar(select(DagRun.run_id).where(
            DagRun.dag_id == dag_id, DagRun.logical_date == day(epoch)))


def _ti(dag_id, run_id, task):
    """(state, try_number) of one task instance of a run."""
    from airflow import settings

    run = find_run(dag_id, run_id)
    with settings.Session() as session:
        for ti in run.get_task_instances(session=session):
            if ti.task_id.split(".")[-1] == task:
                return str(getattr(ti.state, "value", ti.state)), ti.try_number
    raise KeyError(task)


def _read_pid(flag: Path) -> int | None:
    try:
        text = flag.read_text()
    except FileNotFoundError:
        return None
    return int(text) if text.strip() else None  # created, not yet written


def _wait_for_flag(flag: Path, what: str, proc: subprocess.Popen | None = None,
                   log: Path | None = None, timeout: float = 300) -> int:
    def tail() -> str:
        return log.read_text()[-4000:] if log is not None else ""

    deadline = time.monotonic() + timeout
    while (pid := _read_pid(flag)) is None:
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"child exited ({proc.returncode}) before {what}:\n{tail()}")
        if time.monotonic() > deadline:
            raise AssertionError(f"never reached {what}:\n{tail()}")
        time.sleep(0.05)
    return pid


def _start_child(script: str, args: list[str], log: Path, env_extra=None) -> subprocess.Popen:
    env = {**os.environ, **(env_extra or {})}
    with open(log, "w") as out:
        return subprocess.Popen([sys.executable, "-c", script, str(REPO), str(DAG_FILE), *args],
                                env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)


def _sid(pid: int) -> int | None:
    try:
        return os.getsid(pid)
    except OSError:
        return None


def _sigkill_and_reap(proc: subprocess.Popen) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait(30) == -signal.SIGKILL
    # Nothing of the killed run lives on (its spark-submit had finished before commit/abort).
    left = [p for p in psutil.process_iter(["status"]) if _sid(p.pid) == proc.pid
            and p.info["status"] != psutil.STATUS_ZOMBIE]
    for p in left:
        p.kill()
    assert not left, f"processes of the killed run still alive: {left}"


class _Child:
    """A child process that pauses at protocol step ``step`` (the env arms it) and is killed
    there. A re-run child starts early and warms up (imports, in-process API: 8-25 s
    here), then waits: it touches the run only after ``go``."""

    def __init__(self, step: str, script: str, args: list[str], tmp_path: Path, n: int):
        self.step, self.n = step, n
        self.flag, self.log = tmp_path / f"paused-{n}", tmp_path / f"child-{n}.log"
        self.go_file = tmp_path / f"go-{n}"
        if script is CHILD_RERUN:
            args = [*args, str(self.go_file)]
        self.proc = _start_child(script, args, self.log, {
            "AIRFLOW_TPC_PAUSE_AT": step, "AIRFLOW_TPC_PAUSE_FLAG": str(self.flag)})

    def go(self, run_id: str) -> None:
        tmp = self.go_file.with_suffix(".tmp")
        tmp.write_text(run_id)
        tmp.rename(self.go_file)

    def kill_at_step(self) -> None:
        try:
            pid = _wait_for_flag(self.flag, self.step, self.proc, self.log)
            # The task runs inside the child (dag.test / rerun_tasks): we kill the verb's
            # own process.
            assert pid == self.proc.pid, (pid, self.proc.pid)
            _sigkill_and_reap(self.proc)
        finally:
            self.stop()
        assert "CHILD RUN ENDED" not in self.log.read_text()

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def _kill_chain(chain, dag_id, epoch, task, tmp_path, after_kill) -> str:
    """Kill ``chain[0]`` in a dag.test child, each later step in a child re-running ``task``
    (clear + run); ``after_kill(step)`` checks what each kill left. Returns the run id.

    The re-run children all start at once and warm up while the first child's Spark job
    runs; each touches the run only when its turn comes."""
    first = _Child(chain[0], CHILD_DAG_TEST, [dag_id, epoch, json.dumps({"rows": ROWS})],
                   tmp_path, 1)
    later = [_Child(step, CHILD_RERUN, [dag_id, json.dumps([task])], tmp_path, n)
             for n, step in enumerate(chain[1:], 2)]
    try:
        first.kill_at_step()
        run_id = _run_id(dag_id, epoch)
        assert _ti(dag_id, run_id, task) == ("running", 1)  # orphaned by the kill
        after_kill(first.step)
        for child in later:
            child.go(run_id)
            child.kill_at_step()
            assert _ti(dag_id, run_id, task) == ("running", child.n)
            after_kill(child.step)
    finally:
        for child in (first, *later):
            child.stop()
    return run_id


# --------------------------------------------------------------------------- commit
@pytest.mark.parametrize("chain", [
    pytest.param(c, id=_chain_id(c)) for c in COMMIT_CHAINS])
def test_commit_task_killed_at_each_kind_of_step_then_rerun_converges(chain, dags, sink, target,
                                                              asset_uri, tmp_path):
    dag, _ = dags
    epoch = f"2026-04-{COMMIT_STEPS['move-local'].index(chain[0]) + 1:02d}"
    old = _seed(sink, target, epoch)
    new_id = f"{NS}/{epoch}/{old.attempt + 1}"

    def after_kill(step):
        info = _info(sink, epoch)
        assert list(info) == [1, 2]
        # The decision is the commit point; readers see the old epoch or the new, whole.
        decided = step != "commit.before_decision"
        assert info[2].state is (TxnState.COMMITTED if decided else TxnState.PRECOMMITTED)
        assert not info[2].published
        assert read_rows(target)[epoch] == (ROWS if step in VISIBLE_AFTER else OLD_ROWS), step
        assert _events_for(asset_uri, new_id) == []

    run_id = _kill_chain(chain, DAG_ID, epoch, "commit", tmp_path, after_kill)

    dr = rerun_tasks(dag, run_id, ["commit"])
    st = states(dr)
    assert dr.state == "success", st
    assert st["commit"] == "success" and st["abort"] == "skipped" and st["committed"] == "success"
    assert tries(dr, "commit") == len(chain) + 1
    info = _info(sink, epoch)
    assert info[2].state is TxnState.COMMITTED and info[2].published
    assert info[1].superseded and info[1].staging_files == 0
    assert _staging(target, epoch) == []
    assert read_rows(target)[epoch] == ROWS  # the job's rows, once; the old output replaced
    files = published(target)[epoch]
    assert len(files) == info[2].files and "part-old.parquet" not in files
    events = _events_for(asset_uri, new_id)
    assert len(events) == 1, events  # over the killed tries and the rerun
    assert events[0]["epoch"] == epoch and events[0]["files"] == info[2].files


# ---------------------------------------------------------------------------- abort
@pytest.mark.parametrize(("chain", "epoch"), [
    pytest.param(c, f"2026-05-{i:02d}", id=_chain_id(c)) for i, c in enumerate(ABORT_CHAINS, 1)])
def test_abort_task_killed_at_each_step_then_rerun_converges(chain, epoch, dags, sink, target,
                                                             asset_uri, tmp_path):
    _, abort_dag = dags
    _seed(sink, target, epoch)
    before = _visible(target)
    n_events = len(asset_events(asset_uri))

    def after_kill(step):
        info = _info(sink, epoch)
        assert list(info) == [1, 2]
        if step == "abort.before_decision":
            assert info[2].state is TxnState.OPEN and info[2].staging_files > 0
        else:
            assert info[2].state is TxnState.ABORTED
            assert (info[2].staging_files == 0) == (step == "abort.after_cleanup"), step
        assert _visible(target) == before

    run_id = _kill_chain(chain, ABORT_DAG_ID, epoch, "abort", tmp_path, after_kill)
    assert _ti(ABORT_DAG_ID, run_id, "wait_precommit")[0] == "failed"

    dr = rerun_tasks(abort_dag, run_id, ["abort"])
    st = states(dr)
    assert st["abort"] == "success", st
    assert dr.state == "failed" and st["committed"] == "upstream_failed", st  # aborted run
    assert tries(dr, "abort") == len(chain) + 1
    info = _info(sink, epoch)
    assert info[2].state is TxnState.ABORTED
    assert info[1].state is TxnState.COMMITTED and info[1].published  # the old output stays
    assert info[2].staging_files == 0 and _staging(target, epoch) == []
    assert _visible(target) == before  # byte for byte
    assert read_rows(target)[epoch] == OLD_ROWS
    assert len(asset_events(asset_uri)) == n_events  # no Asset event at all


# ------------------------------------------------------------------------ Spark job
def _spark_submit_of(worker_pid: int) -> psutil.Process:
    """The spark-submit JVM (org.apache.spark.deploy.SparkSubmit) above a Python worker."""
    proc = psutil.Process(worker_pid)
    for parent in proc.parents():
        if any("org.apache.spark.deploy.SparkSubmit" in a for a in parent.cmdline()):
            return parent
    raise AssertionError(f"no SparkSubmit JVM above pid {worker_pid}: "
                         f"{[p.cmdline()[:2] for p in proc.parents()]}")


def _kill_tree(root: psutil.Process) -> list[psutil.Process]:
    """SIGKILL a process and all its descendants."""
    victims = [root, *root.children(recursive=True)]
    for p in victims:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.send_signal(signal.SIGKILL)
    return victims


def _assert_mid_write(staged):
    """The kill came while Spark's write job was in flight: output still under _temporary/."""
    assert any(p.startswith("_temporary/") and p.endswith(".parquet") for p in staged), staged
    assert "_SUCCESS" not in staged and "_tpc_manifest.json" not in staged, staged


def _assert_dead(victims):
    _, alive = psutil.wait_procs(victims, timeout=30)
    with contextlib.suppress(psutil.NoSuchProcess):
        assert not [p for p in alive if p.status() != psutil.STATUS_ZOMBIE], alive


def test_spark_job_killed_mid_write_then_worker_killed_then_rerun_converges(
        dags, sink, target, asset_uri, tmp_path):
    """Both ways a Spark write dies, in one run (3 spark-submits instead of 4):

    1. SIGKILL of the spark-submit tree while it writes: submit's try 1 fails, aborts
       its attempt at once (staging removed), and Airflow retries.
    2. The retry's job stalls mid-write too, and the whole worker dies: SIGKILL of the
       Airflow task process, then of the spark-submit tree. Nobody aborts attempt 2
       (OPEN, half-written staging).
    3. A rerun of submit and downstream through Airflow begins attempt 3, whose commit
       fences attempt 2, aborts it and removes its files; recover finds nothing to do.
    """
    dag, _ = dags
    epoch = "2026-06-01"
    flag, log = tmp_path / "stalled", tmp_path / "child.log"
    proc = _start_child(CHILD_DAG_TEST, [DAG_ID, epoch, json.dumps(
        {"rows": ROWS, "pause_on_try": "1,2", "flag": str(flag)})], log)
    staged = {}
    try:
        # 1. try 1: only the Spark job dies.
        worker = _wait_for_flag(Path(f"{flag}.try1"), "the stalled write of try 1", proc, log)
        jvm = _spark_submit_of(worker)
        assert proc.pid in [p.pid for p in jvm.parents()]  # the task process runs the submit
        staged[1] = _staging(target, epoch, 1)
        killed = _kill_tree(jvm)
        assert len(killed) >= 3  # the JVM, the Python driver, Python worker(s)
        _assert_dead(killed)
        # 2. try 2 (Airflow's retry, same child): the worker and the job die.
        worker = _wait_for_flag(Path(f"{flag}.try2"), "the stalled write of try 2", proc, log)
        jvm = _spark_submit_of(worker)
        staged[2] = _staging(target, epoch, 2)
        info = _info(sink, epoch)
        assert info[1].state is TxnState.ABORTED and info[1].staging_files == 0
        assert "spark job failed" in (info[1].reason or "")
        os.kill(proc.pid, signal.SIGKILL)  # the task process first: it cannot react
        killed = _kill_tree(jvm)
        assert proc.wait(30) == -signal.SIGKILL
        _assert_dead(killed)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert "CHILD RUN ENDED" not in log.read_text()
    _assert_mid_write(staged[1])
    _assert_mid_write(staged[2])
    info = _info(sink, epoch)
    assert list(info) == [1, 2] and info[2].state is TxnState.OPEN and info[2].staging_files > 0
    assert epoch not in read_rows(target)
    run_id = _run_id(DAG_ID, epoch)
    assert _ti(DAG_ID, run_id, "submit") == ("running", 2)

    # 3. Clear submit and downstream, as a user would after the worker died.
    dr = rerun_tasks(dag, run_id, ["submit", "wait_precommit", "commit", "abort", "committed"])
    st = states(dr)
    assert dr.state == "success", st
    assert tries(dr, "submit") == 3
    info = _info(sink, epoch)
    assert info[1].state is TxnState.ABORTED and info[2].state is TxnState.ABORTED
    assert "superseded" in (info[2].reason or "")  # fenced and aborted by attempt 3's commit
    assert info[1].staging_files == info[2].staging_files == 0
    assert info[3].state is TxnState.COMMITTED and info[3].published
    assert read_rows(target)[epoch] == ROWS  # one copy, nothing of the killed writes
    killed_names = {p.rsplit("/", 1)[-1] for p in staged[1] + staged[2]}
    assert not killed_names & {p.rsplit("/", 1)[-1] for p in published(target)[epoch]}
    assert _staging(target, epoch) == []
    events = [e.get("txn_id") for e in asset_events(asset_uri) if e.get("epoch") == epoch]
    assert events == [f"{NS}/{epoch}/3"]
    report = Sink(target, NS).recover()
    assert not [x for x in report.aborted + report.cleaned + report.rolled_forward
                if x[0] == epoch], report
