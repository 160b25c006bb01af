"""A DAG writing an Iceberg table target through the task group (test_tables_airflow.py).

The catalog is pyiceberg's SQL catalog on SQLite under the session's data root, named by
the ``iceberg_catalog`` connection ``tpc_it_catalog`` (set in the test's environment).
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta

from airflow.sdk import DAG

from airflow_tpc.airflow import exactly_once_spark_group

ROOT = os.environ.get("TPC_IT_ROOT", "/tmp/tpc-it")
JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "dags", "jobs",
                   "aggregate_events.py")
TABLE = "iceberg://itcat/analytics.daily_events"

with DAG("tpc_it_tables", schedule="@daily", start_date=datetime(2026, 1, 1), catchup=False,
         tags=["tpc-test"]):
    exactly_once_spark_group(
        "events", application=JOB, target=TABLE, namespace="tpc_it_tables",
        catalog_conn_id="tpc_it_catalog", conn_id="spark_local",
        application_args=["--rows", "{{ dag_run.conf.get('rows', 2000) }}",
                          "--seed", "{{ dag_run.conf.get('seed', 0) }}",
                          "--fail-on-try", "{{ dag_run.conf.get('fail_on_try', 0) }}",
                          "--try", "{{ ti.try_number }}"],
        sensor_mode="reschedule", poke_interval=1, sensor_timeout=600,
        submit_kwargs={"retries": 0, "retry_delay": timedelta(seconds=0)},
        conf={"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "4"},
        name="tpc-it-tables")
