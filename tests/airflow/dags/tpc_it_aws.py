"""An S3 target whose credentials come from the Amazon provider's ``aws`` connection
(tests/airflow/test_aws_connection.py): the connection assumes a role through STS, so the
hook and the Spark job work with temporary credentials and their session token."""

from __future__ import annotations

import os
from datetime import datetime

from airflow.sdk import DAG

from airflow_tpc.airflow import exactly_once_spark_group

JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "dags", "jobs",
                   "aggregate_events.py")
AWS_TARGET = os.environ.get("TPC_IT_AWS_TARGET", "s3://tpc-aws/tables/daily")

with DAG("tpc_it_aws_role", schedule="@daily", start_date=datetime(2026, 1, 1), catchup=False,
         tags=["tpc-test"]):
    exactly_once_spark_group(
        "events", application=JOB, target=AWS_TARGET, namespace="tpc_it_aws_role",
        conn_id="spark_local", storage_conn_id="tpc_aws_role",
        application_args=["--rows", "{{ dag_run.conf.get('rows', 100) }}"],
        deferrable=True, poke_interval=1, sensor_timeout=600,
        conf={"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2"},
        name="tpc-it-aws")
