"""A job that fails on its first try and is retried by Airflow, for
tests/airflow/test_production_airflow.py (a retry through Celery on PostgreSQL).

The job is plain Python standing in for StagedSparkSubmitOperator and its Spark job:
every try begins a new attempt (a higher fencing number), writes Parquet rows carrying
that attempt number into its staging and pre-commits.  On try 1 it dies half way — one
partial file staged, no pre-commit — and, as the real operator does when spark-submit
fails, aborts its attempt before the task fails (``TpcHook.abort_quietly``).  Airflow
retries the task (``retries=1``, at once); the retry's attempt is what readers must
see, once, and nothing of the partial file.  The protocol's own tasks after ``submit``
are wired by ``exactly_once_tasks``, as ``exactly_once_spark_group`` wires them.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from airflow.sdk import DAG, task

from airflow_tpc.airflow import TpcHook
from airflow_tpc.airflow.utils.task_group import exactly_once_tasks

TARGET = (os.environ.get("TPC_EXAMPLE_TARGET") or "/tmp/tpc-it/celery") + "_retry"
NAMESPACE = "tpc_it_celery_retry"
#: Rows the successful try writes (the failed one stages fewer, then dies).
ROWS = 5

with DAG("tpc_it_celery_retry", schedule=None, start_date=datetime(2026, 11, 1),
         catchup=False, tags=["tpc-test"]):

    @task(task_id="submit", retries=1, retry_delay=timedelta(seconds=0))
    def submit(**context: Any) -> None:
        """Begin this try's attempt of the run's epoch (``ds``), stage, pre-commit; die
        after a partial write on try 1."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        ti, ds = context["ti"], context["ds"]
        hook = TpcHook(TARGET, NAMESPACE)
        sink = hook.get_sink()
        txn = sink.begin(ds, owner={"dag_id": ti.dag_id, "run_id": ti.run_id,
                                    "task_id": ti.task_id, "try_number": ti.try_number})
        ti.xcom_push(key="tpc_txn", value={**txn.to_dict(), "storage_conn_id": None,
                                           "storage_options": {}})
        staging = Path(txn.staging_uri.removeprefix("file://"))
        staging.mkdir(parents=True, exist_ok=True)
        rows = ROWS if ti.try_number > 1 else 2
        try:
            pq.write_table(pa.table({"id": pa.array(range(rows), pa.int64()),
                                     "epoch": pa.array([ds] * rows),
                                     "attempt": pa.array([txn.attempt] * rows, pa.int64())}),
                           staging / "part-0.parquet")
            if ti.try_number == 1:
                raise RuntimeError("the job died after a partial write (executor lost)")
            sink.precommit(txn)
        except BaseException as exc:
            hook.abort_quietly(txn, f"spark job failed: {type(exc).__name__}")
            raise

    exactly_once_tasks(submit().operator, target=TARGET, namespace=NAMESPACE,
                       poke_interval=1, sensor_timeout=600)
