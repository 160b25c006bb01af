"""A commit task whose Celery worker is SIGKILLed mid-commit, before its decision, for
tests/airflow/test_production_airflow.py — the public wiring (``exactly_once_tasks``,
what ``exactly_once_spark_group`` builds after its submit) with its default retries.

The job is plain Python (begin, stage one file, pre-commit).  On the commit's first try
the task stops right before its decision (``commit.before_decision``: the attempt is
pre-committed and validated, nothing is decided), writes its pid to $TPC_IT_KILL_FLAG and
waits there: the test then SIGKILLs that task's whole worker.  Airflow fails the task
after its heartbeat timeout and retries it (the commit's default retries) on a live
worker; the retry decides and publishes the epoch once, and ``abort`` never runs.

The pause is set when Airflow parses this file in a task's process, and only until the
flag file exists: the retry, parsed after the pause wrote it, runs through.
"""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path
from typing import Any

from airflow.sdk import DAG, task

from airflow_tpc import Sink
from airflow_tpc.airflow.utils.task_group import exactly_once_tasks
from airflow_tpc.core.faults import PAUSE_ENV_VAR

TARGET = (os.environ.get("TPC_EXAMPLE_TARGET") or "/tmp/tpc-it/celery") + "_kill"
NAMESPACE = "tpc_it_celery_kill"

_FLAG = os.environ.get("TPC_IT_KILL_FLAG")
if _FLAG and not Path(_FLAG).exists():
    os.environ[PAUSE_ENV_VAR] = "commit.before_decision"
    os.environ["AIRFLOW_TPC_PAUSE_FLAG"] = _FLAG


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

    exactly_once_tasks(submit().operator, target=TARGET, namespace=NAMESPACE,
                       poke_interval=1, sensor_timeout=600)
