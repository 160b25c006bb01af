"""End-to-end: real Airflow (dag.test on a migrated SQLite DB) + real spark-submit (local[2]).

spark-submit costs ~11 s, so one run serves several assertions (module-scoped runs).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from airflow_tpc import Sink, TxnState

from .helpers import (
    asset_events,
    day,
    published,
    queued_for,
    read_rows,
    rerun_tasks,
    states,
    tree,
    tries,
)

pytestmark = pytest.mark.timeout(1800)

DAG_ID = "tpc_it_local"
NS = "tpc_it_local"


@pytest.fixture(scope="module")
def dag(dagbag):
    return dagbag.get_dag(DAG_ID)


@pytest.fixture(scope="module")
def target(data_root):
    return os.path.join(data_root, "local_target")


@pytest.fixture(scope="module")
def sink(target):
    return Sink(target, NS)


@pytest.fixture(scope="module")
def asset_uri(target):
    return f"file://{os.path.abspath(target)}"


@pytest.fixture(scope="module")
def happy(dag, asset_uri):
    """One successful run of epoch 2026-03-02 (2000 input rows)."""
    events_before = len(asset_events(asset_uri))
    dr = dag.test(logical_date=day("2026-03-02"), run_conf={"rows": 2000})
    return dr, events_before


def _info(sink, epoch):
    return {i.attempt: i for i in sink.describe(epoch)}


def test_happy_path(happy, sink, target, asset_uri):
    dr, events_before = happy
    assert dr.state == "success", states(dr)
    st = states(dr)
    assert st["submit"] == st["wait_precommit"] == st["commit"] == "success"
    assert st["abort"] == "skipped" and st["committed"] == "success"
    # Published once, visible to a plain reader, staging cleaned.
    assert read_rows(target) == {"2026-03-02": 2000}
    assert list(published(target)) == ["2026-03-02"]
    info = _info(sink, "2026-03-02")
    assert [i.state for i in info.values()] == [TxnState.COMMITTED]
    assert info[1].published and info[1].staging_files == 0
    # The sensor's XCom pointer is small and names the manifest.
    from airflow import settings
    from airflow.models.xcom import XComModel
    from sqlalchemy import select
    with settings.Session() as session:
        raw = session.scalar(select(XComModel.value).where(
            XComModel.dag_id == DAG_ID, XComModel.run_id == dr.run_id,
            XComModel.task_id == "events.wait_precommit", XComModel.key == "return_value"))
    pointer = json.loads(raw) if isinstance(raw, str) else raw
    assert len(json.dumps(pointer)) < 600
    assert pointer["digest"].startswith("sha256:") and pointer["txn_id"] == f"{NS}/2026-03-02/1"
    assert pointer["manifest_uri"].endswith("_tpc_manifest.json")
    # Exactly one Asset event, carrying the commit's facts; downstream DAG queued.
    events = asset_events(asset_uri)[events_before:]
    assert len(events) == 1
    assert events[0]["epoch"] == "2026-03-02" and events[0]["txn_id"] == f"{NS}/2026-03-02/1"
    assert events[0]["files"] >= 1 and events[0]["bytes"] > 0
    assert queued_for("tpc_it_downstream") >= 1


def test_commit_rerun_after_success_is_noop(happy, dag, target, asset_uri):
    dr, _ = happy
    before = {p: os.stat(os.path.join(target, p)).st_mtime_ns for p in tree(target)
              if p.startswith("epoch=")}
    n_events = len(asset_events(asset_uri))
    dr2 = rerun_tasks(dag, dr.run_id, ["commit"])
    assert dr2.state == "success", states(dr2)
    assert tries(dr2, "commit") == 2
    after = {p: os.stat(os.path.join(target, p)).st_mtime_ns for p in tree(target)
             if p.startswith("epoch=")}
    assert after == before  # not a byte moved
    assert len(asset_events(asset_uri)) == n_events  # no second Asset event
    assert read_rows(target) == {"2026-03-02": 2000}


def test_clear_and_rerun_with_changed_input_replaces(happy, dag, sink, target, asset_uri):
    """UI "Clear" of the whole run after its input changed; also proves a stale durable
    spark_job_id in the task state store is never taken for the new attempt."""
    from airflow import settings
    from airflow.models.dagrun import DagRun
    from airflow.models.task_state_store import TaskStateStoreModel
    from sqlalchemy import select

    dr, _ = happy
    with settings.Session() as session:
        run = session.scalar(select(DagRun).where(DagRun.run_id == dr.run_id))
        run.conf = {"rows": 3000, "seed": 7}
        session.add(TaskStateStoreModel(dag_run_id=run.id, task_id="events.submit", map_index=-1,
                                        key="spark_job_id", dag_id=DAG_ID, run_id=dr.run_id,
                                        value=json.dumps("driver-20260302000000-0000")))
        session.commit()
    n_events = len(asset_events(asset_uri))
    dr2 = rerun_tasks(dag, dr.run_id, ["submit", "wait_precommit", "commit", "abort"])
    assert dr2.state == "success", states(dr2)
    assert read_rows(target) == {"2026-03-02": 3000}  # replaced, not 2000 + 3000
    info = _info(sink, "2026-03-02")
    assert info[2].state is TxnState.COMMITTED and info[2].published
    assert info[1].superseded
    events = asset_events(asset_uri)[n_events:]
    assert [e["txn_id"] for e in events] == [f"{NS}/2026-03-02/2"]
    with settings.Session() as session:
        left = session.scalars(select(TaskStateStoreModel).where(
            TaskStateStoreModel.run_id == dr.run_id,
            TaskStateStoreModel.key == "spark_job_id")).all()
    assert left == []  # the stale job id was forgotten, a new job ran


def test_job_fails_on_first_try_then_succeeds(dag, sink, target):
    dr = dag.test(logical_date=day("2026-03-03"), run_conf={"rows": 2000, "fail_on_try": 1})
    assert dr.state == "success", states(dr)
    assert tries(dr, "submit") == 2
    info = _info(sink, "2026-03-03")
    assert info[1].state is TxnState.ABORTED and info[1].staging_files == 0
    assert info[2].state is TxnState.COMMITTED and info[2].published
    rows = read_rows(target)
    assert rows["2026-03-03"] == 2000  # exactly one copy; the partial output never published
    assert not any("partial" in p for files in published(target).values() for p in files)


def _mark_failed_when_waiting(dag_id: str, task_id: str, staging_seen, stop) -> None:
    """What a user's "Mark failed" in the UI does to a waiting sensor."""
    from airflow import settings
    from airflow.models.taskinstance import TaskInstance
    from sqlalchemy import update

    while not stop.is_set():
        if staging_seen():
            with settings.Session() as session:
                n = session.execute(update(TaskInstance).where(
                    TaskInstance.dag_id == dag_id, TaskInstance.task_id == task_id,
                    TaskInstance.state == "up_for_reschedule").values(state="failed")).rowcount
                session.commit()
            if n:
                return
        time.sleep(0.3)


def _consume_downstream_queue(dag_id: str) -> None:
    """Drop the Asset-triggered runs queued for ``dag_id`` (the scheduler creates them)."""
    from airflow import settings
    from airflow.models.asset import AssetDagRunQueue
    from sqlalchemy import delete

    with settings.Session() as session:
        session.execute(delete(AssetDagRunQueue).where(AssetDagRunQueue.target_dag_id == dag_id))
        session.commit()


def test_sensor_marked_failed_aborts(dag, sink, target, asset_uri):
    before = {p: os.stat(os.path.join(target, p)).st_mtime_ns for p in tree(target)
              if not p.startswith("_tpc")}
    _consume_downstream_queue("tpc_it_downstream")  # as the scheduler would have
    n_events = len(asset_events(asset_uri))
    staging = Path(sink.layout.staging_root, "epoch=2026-03-05")
    stop = threading.Event()
    marker = threading.Thread(target=_mark_failed_when_waiting, daemon=True, args=(
        DAG_ID, "events.wait_precommit", lambda: any(staging.rglob("*.parquet")), stop))
    marker.start()
    try:
        dr = dag.test(logical_date=day("2026-03-05"), run_conf={"rows": 500, "no_precommit": 1})
    finally:
        stop.set()
        marker.join(10)
    st = states(dr)
    assert dr.state == "failed", st
    assert st["wait_precommit"] == "failed" and st["abort"] == "success", st
    assert st["commit"] == "upstream_failed"
    info = _info(sink, "2026-03-05")
    assert info[1].state is TxnState.ABORTED
    assert tree(staging) == []  # staging gone
    after = {p: os.stat(os.path.join(target, p)).st_mtime_ns for p in tree(target)
             if not p.startswith("_tpc")}
    assert after == before  # target untouched
    assert "2026-03-05" not in read_rows(target)
    # An aborted run announces nothing: the Asset-scheduled DAG is not triggered.
    assert len(asset_events(asset_uri)) == n_events
    assert queued_for("tpc_it_downstream") == 0


# A kill between the directory swap and the published record (promote.after_swap),
# then clearing ``commit``, is test_kills.py's: a real SIGKILL there, on an epoch that
# held older output, and every protocol step is killed by tests/core/test_process_kill.py.
@pytest.mark.parametrize(("crash_at", "epoch"), [("commit_task.after_commit", "2026-03-07")])
def test_commit_killed_then_rerun_converges_and_announces_once(dag, sink, target, airflow_db,
                                                               asset_uri, crash_at, epoch):
    """A real process kill (os._exit) inside the commit task, then the commit task rerun.

    ``commit_task.after_commit``: the commit finished (published) but the try died
    before Airflow recorded its success, so no Asset event was recorded; the rerun is a
    no-op for the data and must still announce it, once, and the announcement triggers
    the downstream DAG.  A further rerun after that success announces nothing.
    """
    script = (
        "import sys; from airflow.dag_processing.dagbag import DagBag\n"
        f"sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})\n"
        "from tests.airflow.helpers import day\n"
        f"bag = DagBag(dag_folder={str(Path(__file__).parent / 'dags')!r})\n"
        f"bag.get_dag({DAG_ID!r}).test(logical_date=day({epoch!r}), run_conf={{'rows': 1000}})\n"
    )
    n_events = len(asset_events(asset_uri))
    env = {**os.environ, "AIRFLOW_TPC_CRASH_AT": crash_at}
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 137, proc.stderr[-3000:]
    info = _info(sink, epoch)
    assert info[1].state is TxnState.COMMITTED
    assert info[1].published is (crash_at == "commit_task.after_commit")
    assert len(asset_events(asset_uri)) == n_events  # the killed try announced nothing
    from airflow import settings
    from airflow.models.dagrun import DagRun
    from sqlalchemy import select
    with settings.Session() as session:
        run_id = session.scalar(select(DagRun.run_id).where(
            DagRun.dag_id == DAG_ID, DagRun.logical_date == day(epoch)))
    dr = rerun_tasks(dag, run_id, ["commit"])
    assert states(dr)["commit"] == "success", states(dr)
    info = _info(sink, epoch)
    assert info[1].published and info[1].staging_files == 0
    assert read_rows(target)[epoch] == 1000
    events = asset_events(asset_uri)[n_events:]
    assert [e["txn_id"] for e in events] == [f"{NS}/{epoch}/1"]  # announced now: once
    assert queued_for("tpc_it_downstream") >= 1  # and the announcement triggers downstream
    dr = rerun_tasks(dag, run_id, ["commit"])  # a rerun after that success: silent
    assert states(dr)["commit"] == "success", states(dr)
    assert len(asset_events(asset_uri)) == n_events + 1
    assert read_rows(target)[epoch] == 1000
