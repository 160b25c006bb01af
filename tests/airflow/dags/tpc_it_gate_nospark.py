"""The approval gate of ``exactly_once_spark_group`` around a job that is plain Python.

The protocol's tasks after ``submit`` are built by ``exactly_once_tasks`` (the group's own
wiring, gate included); ``submit`` begins an attempt owned by this run, stages one file and
pre-commits, as StagedSparkSubmitOperator and the job would.  A run takes seconds.
"""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path
from typing import Any

from airflow.sdk import DAG, task

from airflow_tpc import Sink
from airflow_tpc.airflow.utils.task_group import exactly_once_tasks

ROOT = os.environ.get("TPC_IT_ROOT", "/tmp/tpc-it")
TARGET = os.path.join(ROOT, "gate_nospark_target")
NAMESPACE = "tpc_it_gate_nospark"

with DAG("tpc_it_gate_nospark", schedule=None, start_date=datetime(2026, 1, 1), catchup=False,
         tags=["tpc-test"]):

    @task(task_id="submit")
    def submit(**context: Any) -> None:
        """Begin an attempt of ``conf["epoch"]`` owned by this run, stage, pre-commit."""
        ti = context["ti"]
        sink = Sink(TARGET, NAMESPACE)
        txn = sink.begin(context["dag_run"].conf["epoch"],
                         owner={"dag_id": ti.dag_id, "run_id": ti.run_id})
        ti.xcom_push(key="tpc_txn", value={**txn.to_dict(), "storage_conn_id": None,
                                           "storage_options": {}})
        staging = Path(txn.staging_uri.removeprefix("file://"))
        staging.mkdir(parents=True, exist_ok=True)
        (staging / "part-0.parquet").write_bytes(b"x" * 64)
        sink.precommit(txn)

    exactly_once_tasks(submit().operator, target=TARGET, namespace=NAMESPACE, approval=True,
                       poke_interval=1, sensor_timeout=300, epoch="{{ dag_run.conf['epoch'] }}")
