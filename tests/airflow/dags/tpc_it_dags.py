"""DAGs for the Airflow integration tests (targets and connections come from the environment
the test session sets up in tests/airflow/conftest.py)."""

from __future__ import annotations

import os
from datetime import datetime, timedelta

from airflow.sdk import DAG, Asset, task

from airflow_tpc.airflow import exactly_once_spark_group, target_asset

ROOT = os.environ.get("TPC_IT_ROOT", "/tmp/tpc-it")
JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "dags", "jobs",
                   "aggregate_events.py")
LOCAL_TARGET = os.path.join(ROOT, "local_target")
S3_TARGET = os.environ.get("TPC_IT_S3_TARGET", "s3://tpc-it/tables/daily")
#: An Azure container (Azurite in tests/airflow/test_azure_pipeline.py, which creates it).
AZURE_TARGET = os.environ.get("TPC_IT_AZURE_TARGET", "az://tpc-it-azure/tables/daily")
CLUSTER_TARGET = os.path.join(ROOT, "cluster_target")

ARGS = ["--rows", "{{ dag_run.conf.get('rows', 2000) }}",
        "--seed", "{{ dag_run.conf.get('seed', 0) }}",
        "--fail-on-try", "{{ dag_run.conf.get('fail_on_try', 0) }}",
        "--try", "{{ ti.try_number }}",
        "--no-precommit", "{{ dag_run.conf.get('no_precommit', 0) }}"]
SPARK = {"conf": {"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "4"},
         "name": "tpc-it"}

with DAG("tpc_it_local", schedule="@daily", start_date=datetime(2026, 1, 1), catchup=False,
         max_active_runs=2, tags=["tpc-test"]):
    exactly_once_spark_group(
        "events", application=JOB, target=LOCAL_TARGET, namespace="tpc_it_local",
        conn_id="spark_local", application_args=ARGS, sensor_mode="reschedule",
        poke_interval=1, sensor_timeout=600,
        submit_kwargs={"retries": 1, "retry_delay": timedelta(seconds=0)}, **SPARK)

with DAG("tpc_it_downstream", schedule=[target_asset(LOCAL_TARGET)],
         start_date=datetime(2026, 1, 1), catchup=False, tags=["tpc-test"]):
    @task
    def consume(triggering_asset_events=None) -> list:
        return [e.extra for events in (triggering_asset_events or {}).values() for e in events]

    consume()

with DAG("tpc_it_s3", schedule="@daily", start_date=datetime(2026, 1, 1), catchup=False,
         tags=["tpc-test"]):
    exactly_once_spark_group(
        "events", application=JOB, target=S3_TARGET, namespace="tpc_it_s3",
        conn_id="spark_local", storage_conn_id="tpc_s3",
        storage_options={"region_name": "us-east-1"},
        application_args=ARGS, deferrable=True, poke_interval=1, sensor_timeout=600, **SPARK)

# The same pipeline pointed at Azure: only the target and the connection change (a
# ``wasb`` connection: account URL, account name and key).
with DAG("tpc_it_azure", schedule="@daily", start_date=datetime(2026, 1, 1), catchup=False,
         tags=["tpc-test"]):
    exactly_once_spark_group(
        "events", application=JOB, target=AZURE_TARGET, namespace="tpc_it_azure",
        conn_id="spark_local", storage_conn_id="tpc_azure",
        application_args=ARGS, deferrable=True, poke_interval=1, sensor_timeout=600, **SPARK)

with DAG("tpc_it_cluster", schedule="@daily", start_date=datetime(2026, 1, 1), catchup=False,
         tags=["tpc-test"]):
    exactly_once_spark_group(
        "events", application=JOB, target=CLUSTER_TARGET, namespace="tpc_it_cluster",
        conn_id="spark_cluster", application_args=ARGS, poke_interval=1, sensor_timeout=600,
        total_executor_cores=1, executor_memory="512m", **SPARK)

with DAG("tpc_it_gate", schedule="@daily", start_date=datetime(2026, 1, 1), catchup=False,
         tags=["tpc-test"]):
    exactly_once_spark_group(
        "events", application=JOB, target=os.path.join(ROOT, "gate_target"),
        namespace="tpc_it_gate", conn_id="spark_local", application_args=ARGS,
        approval=True, outlets=[Asset("tpc-it-gate")], **SPARK)

with DAG("tpc_it_backfill", schedule="@daily", start_date=datetime(2026, 2, 1), catchup=False,
         max_active_runs=2, tags=["tpc-test"]):
    exactly_once_spark_group(
        "events", application=JOB, target=os.path.join(ROOT, "backfill_target"),
        namespace="tpc_it_backfill", conn_id="spark_local", application_args=ARGS,
        sensor_mode="reschedule", poke_interval=2, sensor_timeout=600, **SPARK)
