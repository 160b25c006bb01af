"""A daily exactly-once DAG without Spark, for tests/airflow/test_real_scheduler.py.

Shaped like dags/tpc_example.py (daily epochs, ``max_active_runs=2``, the protocol's
sensor / commit / abort tasks) but its job is plain Python, so a run through the real
scheduler takes seconds rather than a spark-submit's JVM start.  The epoch is the run's
data interval start (``ds``); the target is $TPC_EXAMPLE_TARGET, as for the example DAG.

Beside the folder, each run commits a Delta table (``<target>_delta``) and an Iceberg
table (catalog connection ``tpc_it_scheduler_catalog``, set by the test): task
processes that open native table libraries (delta-rs, pyarrow, pyiceberg) and must
all exit 0 (issue 18's clean exit).
"""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path
from typing import Any

from airflow.sdk import DAG, task

from airflow_tpc import Sink
from airflow_tpc.airflow import AbortOperator, CommitOperator, PrecommitSensor, TpcHook

TARGET = os.environ.get("TPC_EXAMPLE_TARGET") or os.path.join(
    os.environ.get("TPC_IT_ROOT", "/tmp/tpc-it"), "scheduler_target")
NAMESPACE = "tpc_it_scheduler"
#: The table targets beside the folder: (suffix of the task ids, target, catalog conn).
TABLES = [("delta", f"delta+file://{TARGET}_delta", None),
          ("iceberg", "iceberg://sched/tpc.events", "tpc_it_scheduler_catalog")]

# end_date: unpausing the DAG (which the backfill needs) creates no scheduled run of
# today's interval beside the backfill's runs.
with DAG("tpc_it_scheduler", schedule="@daily", start_date=datetime(2026, 11, 1),
         end_date=datetime(2026, 11, 10), catchup=False, max_active_runs=2, tags=["tpc-test"]):

    @task(task_id="submit")
    def submit(**context: Any) -> None:
        """Begin this run's attempt for its epoch, stage one file, pre-commit."""
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
    commit = CommitOperator(task_id="commit", target=TARGET, namespace=NAMESPACE,
                            sensor_task_id="wait_precommit")
    abort = AbortOperator(task_id="abort", target=TARGET, namespace=NAMESPACE,
                          submit_task_id="submit")
    begun >> wait >> commit
    [begun, wait, commit] >> abort

    for name, table, catalog in TABLES:

        @task(task_id=f"submit_{name}")
        def submit_table(table: str, catalog: str | None, **context: Any) -> None:
            """Begin, stage one Parquet file of the epoch (with its ``epoch`` column),
            pre-commit: what the Spark job does, in a task process of its own."""
            import pyarrow as pa
            import pyarrow.parquet as pq

            ti, ds = context["ti"], context["ds"]
            hook = TpcHook(table, NAMESPACE, catalog_conn_id=catalog)
            sink = hook.get_sink()
            txn = sink.begin(ds, owner={"dag_id": ti.dag_id, "run_id": ti.run_id})
            ti.xcom_push(key="tpc_txn", value={**txn.to_dict(), "storage_conn_id": None,
                                               "storage_options": {}, "table": table,
                                               "catalog_conn_id": catalog})
            staging = Path(txn.staging_uri.removeprefix("file://"))
            staging.mkdir(parents=True, exist_ok=True)
            pq.write_table(pa.table({"id": pa.array([1, 2, 3], pa.int64()),
                                     "epoch": pa.array([ds] * 3)}),
                           staging / "part-0.parquet")
            sink.precommit(txn)

        args = {"target": table, "namespace": NAMESPACE, "catalog_conn_id": catalog}
        staged = submit_table(table, catalog)
        waited = PrecommitSensor(task_id=f"wait_{name}", submit_task_id=f"submit_{name}",
                                 mode="poke", poke_interval=1, timeout=600, **args)
        done = CommitOperator(task_id=f"commit_{name}", sensor_task_id=f"wait_{name}", **args)
        aborted = AbortOperator(task_id=f"abort_{name}", submit_task_id=f"submit_{name}",
                                **args)
        staged >> waited >> done
        [staged, waited, done] >> aborted
