"""The public wiring (``exactly_once_tasks`` / ``exactly_once_group_tasks``) around a job
that is plain Python, for tests/airflow/test_commit_retry.py: the commit keeps its
default retries (only their delay is shortened through ``task_kwargs``, so a run takes
seconds), and a test makes the commit's first tries fail before the decision, as a lost
worker's would.  Single target and group alike.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from airflow.sdk import DAG, task

from airflow_tpc import Group, Sink
from airflow_tpc.airflow.operators.group import GroupArgs
from airflow_tpc.airflow.utils.task_group import exactly_once_group_tasks, exactly_once_tasks

ROOT = os.environ.get("TPC_IT_ROOT", "/tmp/tpc-it")
TARGET = os.path.join(ROOT, "commit_retry_target")
NAMESPACE = "tpc_it_commit_retry"
TARGETS = {"events": os.path.join(ROOT, "commit_retry_events"),
           "daily": os.path.join(ROOT, "commit_retry_daily")}
GROUP_URI = os.path.join(ROOT, "_tpc_groups", "tpc_it_commit_retry")
#: Only the delay: the number of retries is the commit's default.
FAST = {"commit": {"retry_delay": timedelta(0), "retry_exponential_backoff": 0}}


def _stage(staging_uri: str, data: bytes) -> None:
    staging = Path(staging_uri.removeprefix("file://"))
    staging.mkdir(parents=True, exist_ok=True)
    (staging / "part-0.parquet").write_bytes(data)


def open_group() -> Group:
    return Group({n: Sink(t, NAMESPACE) for n, t in TARGETS.items()}, GROUP_URI)


with DAG("tpc_it_commit_retry", schedule=None, start_date=datetime(2026, 1, 1),
         catchup=False, tags=["tpc-test"]):

    @task(task_id="submit")
    def submit(**context: Any) -> None:
        ti = context["ti"]
        sink = Sink(TARGET, NAMESPACE)
        txn = sink.begin(context["dag_run"].conf["epoch"],
                         owner={"dag_id": ti.dag_id, "run_id": ti.run_id})
        ti.xcom_push(key="tpc_txn", value={**txn.to_dict(), "storage_conn_id": None,
                                           "storage_options": {}})
        _stage(txn.staging_uri, b"x" * 64)
        sink.precommit(txn)

    exactly_once_tasks(submit().operator, target=TARGET, namespace=NAMESPACE,
                       poke_interval=1, sensor_timeout=300,
                       epoch="{{ dag_run.conf['epoch'] }}", task_kwargs=FAST)


with DAG("tpc_it_group_commit_retry", schedule=None, start_date=datetime(2026, 1, 1),
         catchup=False, tags=["tpc-test"]):

    @task(task_id="submit")
    def group_submit(**context: Any) -> None:
        ti = context["ti"]
        group = open_group()
        gtxn = group.begin(context["dag_run"].conf["epoch"],
                           owner={"dag_id": ti.dag_id, "run_id": ti.run_id})
        ti.xcom_push(key="tpc_group_txn",
                     value=GroupArgs.of(TARGETS, NAMESPACE, GROUP_URI).xcom(gtxn))
        for name, txn in gtxn.members.items():
            _stage(txn.staging_uri, name.encode() * 16)
        group.precommit(gtxn)

    exactly_once_group_tasks(group_submit().operator, targets=TARGETS, namespace=NAMESPACE,
                             group_uri=GROUP_URI, poke_interval=1, sensor_timeout=300,
                             epoch="{{ dag_run.conf['epoch'] }}", task_kwargs=FAST)
