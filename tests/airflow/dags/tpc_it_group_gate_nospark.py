"""The approval gate of a group transaction around a job that is plain Python.

The group's tasks after ``submit`` are built by ``exactly_once_group_tasks`` (the task
group's own wiring, gate included); ``submit`` begins a group attempt owned by this run,
stages one file into each member and pre-commits them, as the group submit and its job
would.  A run takes seconds.
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

ROOT = os.environ.get("TPC_IT_ROOT", "/tmp/tpc-it")
TARGETS = {"events": os.path.join(ROOT, "group_gate_events"),
           "daily": os.path.join(ROOT, "group_gate_daily")}
GROUP_URI = os.path.join(ROOT, "_tpc_groups", "tpc_it_group_gate")
NAMESPACE = "tpc_it_group_gate"


def open_group() -> Group:
    return Group({n: Sink(t, NAMESPACE) for n, t in TARGETS.items()}, GROUP_URI)


with DAG("tpc_it_group_gate_nospark", schedule=None, start_date=datetime(2026, 1, 1),
         catchup=False, tags=["tpc-test"]):

    @task(task_id="submit")
    def submit(**context: Any) -> None:
        """Begin a group attempt of ``conf["epoch"]``, stage each member, pre-commit."""
        ti = context["ti"]
        group = open_group()
        gtxn = group.begin(context["dag_run"].conf["epoch"],
                           owner={"dag_id": ti.dag_id, "run_id": ti.run_id})
        args = GroupArgs.of(TARGETS, NAMESPACE, GROUP_URI)
        ti.xcom_push(key="tpc_group_txn", value=args.xcom(gtxn))
        for name, txn in gtxn.members.items():
            staging = Path(txn.staging_uri.removeprefix("file://"))
            staging.mkdir(parents=True, exist_ok=True)
            (staging / "part-0.parquet").write_bytes(name.encode() * 16)
        group.precommit(gtxn)

    exactly_once_group_tasks(submit().operator, targets=TARGETS, namespace=NAMESPACE,
                             group_uri=GROUP_URI, approval=True, poke_interval=1,
                             sensor_timeout=300, epoch="{{ dag_run.conf['epoch'] }}")
