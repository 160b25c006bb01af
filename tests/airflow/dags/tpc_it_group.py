"""A DAG writing a folder and an Iceberg table as one group transaction
(test_group_airflow.py): one job, one decision, both outputs or neither.

The catalog is pyiceberg's SQL catalog on SQLite under the session's data root, named by
the ``iceberg_catalog`` connection ``tpc_it_group_catalog`` (set by the test module).
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta

from airflow.sdk import DAG

from airflow_tpc.airflow import exactly_once_spark_group

ROOT = os.environ.get("TPC_IT_ROOT", "/tmp/tpc-it")
JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "dags", "jobs",
                   "aggregate_events.py")

with DAG("tpc_it_group", schedule="@daily", start_date=datetime(2026, 1, 1), catchup=False,
         tags=["tpc-test"]):
    exactly_once_spark_group(
        "events", application=JOB, namespace="tpc_it_group",
        targets={"folder": os.path.join(ROOT, "group_folder"),
                 "table": "iceberg://itgcat/analytics.group_events"},
        catalog_conn_id="tpc_it_group_catalog", conn_id="spark_local",
        application_args=["--rows", "{{ dag_run.conf.get('rows', 2000) }}",
                          "--seed", "{{ dag_run.conf.get('seed', 0) }}",
                          "--fail-on-try", "{{ dag_run.conf.get('fail_on_try', 0) }}",
                          "--try", "{{ ti.try_number }}"],
        sensor_mode="reschedule", poke_interval=1, sensor_timeout=600,
        submit_kwargs={"retries": 1, "retry_delay": timedelta(seconds=0)},
        conf={"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "4"},
        name="tpc-it-group")
