"""One run, two targets, the same epoch and the same attempt number in each: what the
example DAG (a folder and an Iceberg table) does.  No Spark: each group's ``submit``
begins its attempt, stages a file and pre-commits, then the protocol's own sensor and
commit tasks run.  The run page and the commit tasks' *TPC manifest* links must each
name their own group's transaction (tests/airflow/test_run_page.py)."""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path
from typing import Any

from airflow.sdk import DAG, TaskGroup, task

from airflow_tpc import Sink
from airflow_tpc.airflow import CommitOperator, PrecommitSensor

ROOT = os.environ.get("TPC_IT_ROOT", "/tmp/tpc-it")
#: group -> (target, namespace, the bytes its file holds)
GROUPS = {"events": (os.path.join(ROOT, "two", "events"), "tpc_two_events", b"e" * 64),
          "daily": (os.path.join(ROOT, "two", "daily"), "tpc_two_daily", b"d" * 128)}

with DAG("tpc_it_two", schedule=None, start_date=datetime(2026, 1, 1), catchup=False,
         tags=["tpc-test"]):
    for group, (target, namespace, data) in GROUPS.items():
        with TaskGroup(group):

            @task(task_id="submit")
            def submit(target: str = target, namespace: str = namespace, data: bytes = data,
                       **context: Any) -> None:
                ti = context["ti"]
                sink = Sink(target, namespace)
                txn = sink.begin(context["dag_run"].conf["epoch"],
                                 owner={"dag_id": ti.dag_id, "run_id": ti.run_id})
                ti.xcom_push(key="tpc_txn", value={**txn.to_dict(), "storage_conn_id": None,
                                                   "storage_options": {}})
                staging = Path(txn.staging_uri.removeprefix("file://"))
                staging.mkdir(parents=True, exist_ok=True)
                (staging / "part-0.parquet").write_bytes(data)
                sink.precommit(txn)

            wait = PrecommitSensor(task_id="wait_precommit", target=target, namespace=namespace,
                                   submit_task_id=f"{group}.submit", mode="poke",
                                   poke_interval=1, timeout=300)
            commit = CommitOperator(task_id="commit", target=target, namespace=namespace,
                                    sensor_task_id=f"{group}.wait_precommit")
            submit() >> wait >> commit
