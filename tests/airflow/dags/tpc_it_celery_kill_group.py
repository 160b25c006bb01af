"""The group variant of tpc_it_celery_kill.py: a group transaction over two folders,
wired by ``exactly_once_group_tasks`` (what ``exactly_once_spark_group(targets=...)``
builds after its submit) with the group commit's default retries.  Its commit pauses
before the group's decision (``group.before_decision``) on its first try, writing its pid
to ``$TPC_IT_KILL_FLAG.group``; the test SIGKILLs that worker.
"""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path
from typing import Any

from airflow.sdk import DAG, task

from airflow_tpc import Group, Sink
from airflow_tpc.airflow.operators.group import GroupArgs
from airflow_tpc.airflow.utils.task_group import exactly_once_group_tasks
from airflow_tpc.core.faults import PAUSE_ENV_VAR

ROOT = (os.environ.get("TPC_EXAMPLE_TARGET") or "/tmp/tpc-it/celery") + "_kill_group"
TARGETS = {"events": f"{ROOT}/events", "daily": f"{ROOT}/daily"}
GROUP_URI = f"{ROOT}/_tpc_groups/kill"
NAMESPACE = "tpc_it_celery_kill_group"

_FLAG = os.environ.get("TPC_IT_KILL_FLAG")
if _FLAG and not Path(f"{_FLAG}.group").exists():
    os.environ[PAUSE_ENV_VAR] = "group.before_decision"
    os.environ["AIRFLOW_TPC_PAUSE_FLAG"] = f"{_FLAG}.group"


def open_group() -> Group:
    return Group({n: Sink(t, NAMESPACE) for n, t in TARGETS.items()}, GROUP_URI)


with DAG("tpc_it_celery_kill_group", schedule=None, start_date=datetime(2026, 11, 1),
         catchup=False, tags=["tpc-test"]):

    @task(task_id="submit")
    def submit(**context: Any) -> None:
        ti = context["ti"]
        group = open_group()
        gtxn = group.begin(context["ds"], owner={"dag_id": ti.dag_id, "run_id": ti.run_id})
        ti.xcom_push(key="tpc_group_txn",
                     value=GroupArgs.of(TARGETS, NAMESPACE, GROUP_URI).xcom(gtxn))
        for name, txn in gtxn.members.items():
            staging = Path(txn.staging_uri.removeprefix("file://"))
            staging.mkdir(parents=True, exist_ok=True)
            (staging / "part-0.parquet").write_bytes(name.encode() * 16)
        group.precommit(gtxn)

    exactly_once_group_tasks(submit().operator, targets=TARGETS, namespace=NAMESPACE,
                             group_uri=GROUP_URI, poke_interval=1, sensor_timeout=600)
