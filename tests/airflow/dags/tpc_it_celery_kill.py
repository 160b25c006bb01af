"""A commit task whose Celery worker is SIGKILLed mid-commit, for
tests/airflow/test_production_airflow.py.

The job is plain Python (begin, stage one file, pre-commit).  On its first try the
commit task stops right after the decision (``commit.after_decision``: the epoch is
decided, nothing is published yet), writes its pid to $TPC_IT_KILL_FLAG and waits
there: the test then SIGKILLs that task's whole worker (the Celery main process, its
pool and the task).  Airflow finds the task without heartbeat, retries it, and the
retry — necessarily on the other worker — rolls the decided epoch forward.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from airflow.sdk import DAG, task

from airflow_tpc import Sink
from airflow_tpc.airflow import AbortOperator, CommitOperator, PrecommitSensor
from airflow_tpc.faults import PAUSE_ENV_VAR

TARGET = (os.environ.get("TPC_EXAMPLE_TARGET") or "/tmp/tpc-it/celery") + "_kill"
NAMESPACE = "tpc_it_celery_kill"


class CommitPausedOnFirstTry(CommitOperator):
    """The commit operator, held after its decision on try 1 (until killed)."""

    def execute(self, context: Any) -> Any:
        flag = os.environ.get("TPC_IT_KILL_FLAG")
        if flag and context["ti"].try_number == 1:
            os.environ[PAUSE_ENV_VAR] = "commit.after_decision"
            os.environ["AIRFLOW_TPC_PAUSE_FLAG"] = flag
        return super().execute(context)


with DAG("tpc_it_celery_kill", schedule=None, start_date=datetime(2026, 11, 1),
         catchup=False, tags=["tpc-test"]):

    @task(task_id="submit")
    def submit(**context: Any) -> None:
        ti = context["ti"]
        sink = Sink(TARGET, NAMESPACE)
        txn = sink.begin(context["ds"], owner={"dag_id": ti.dag_id, "run_id": ti.run_id})
        ti.xcom_push(key="tpc_txn", value={**txn.to_dict(), "storage_conn_id": None,
                                           "storage_options": {}})
        staging = Path(txn.staging_uri.removeprefix("file://"))
        staging.mkdir(parents=True, exist_ok=True)
        (staging / "part-0.parquet").write_bytes(b"x" * 64)
        sink.precommit(txn)

    begun = submit()
    wait = PrecommitSensor(task_id="wait_precommit", target=TARGET, namespace=NAMESPACE,
                           submit_task_id="submit", mode="poke", poke_interval=1, timeout=600)
    commit = CommitPausedOnFirstTry(task_id="commit", target=TARGET, namespace=NAMESPACE,
                                    sensor_task_id="wait_precommit", retries=1,
                                    retry_delay=timedelta(seconds=0))
    abort = AbortOperator(task_id="abort", target=TARGET, namespace=NAMESPACE,
                          submit_task_id="submit")
    begun >> wait >> commit
    [begun, wait, commit] >> abort
