"""DAGs of tests/airflow/test_orphan_app.py: one submit task whose job runs until stopped.

``tpc_it_orphan`` runs it in local mode, ``tpc_it_orphan_cluster`` on the standalone
cluster (client mode; the connection ``spark_cluster`` is set by that test's fixture).
``tpc_it_orphan_group`` runs it as a group attempt over two folders (local mode), with
the group's abort task.  The flag prefix and whether the job blocks come from the run's
conf.
"""

from __future__ import annotations

import os
from datetime import datetime

from airflow.sdk import DAG

from airflow_tpc.airflow.operators.group import GroupAbortOperator, GroupSparkSubmitOperator
from airflow_tpc.airflow.operators.tpc import StagedSparkSubmitOperator

ROOT = os.environ.get("TPC_IT_ROOT", "/tmp/tpc-it")
JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "spark", "jobs",
                   "block_app.py")
ARGS = ["--flag", "{{ dag_run.conf['flag'] }}", "--block", "{{ dag_run.conf.get('block', 1) }}"]
SPARK = {"conf": {"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "1",
                  "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"},
         "name": "tpc-it-orphan"}

for dag_id, conn in (("tpc_it_orphan", "spark_local"), ("tpc_it_orphan_cluster", "spark_cluster")):
    with DAG(dag_id, schedule=None, start_date=datetime(2026, 1, 1), catchup=False,
             tags=["tpc-test"]):
        StagedSparkSubmitOperator(
            task_id="submit", application=JOB, application_args=ARGS, conn_id=conn,
            target=os.path.join(ROOT, f"{dag_id}_target"), namespace=dag_id, retries=0,
            **SPARK)

GROUP = {"targets": {"a": os.path.join(ROOT, "tpc_it_orphan_group_a"),
                     "b": os.path.join(ROOT, "tpc_it_orphan_group_b")},
         "namespace": "tpc_it_orphan_group"}
with DAG("tpc_it_orphan_group", schedule=None, start_date=datetime(2026, 1, 1), catchup=False,
         tags=["tpc-test"]):
    GroupSparkSubmitOperator(
        task_id="submit", application=JOB, application_args=[*ARGS, "--group", "1"],
        conn_id="spark_local", retries=0, **GROUP, **SPARK) >> GroupAbortOperator(
        task_id="abort", submit_task_id="submit", reason="rejected by the test", **GROUP)
