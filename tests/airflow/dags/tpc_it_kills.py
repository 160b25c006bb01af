"""DAGs of the process-kill tests (tests/airflow/test_kills.py).

Both write the same target under the same namespace (one table, two ways to run it):

* ``tpc_it_kills``: the normal pipeline; submit retries once at once, so a Spark job
  killed on try 1 is retried by Airflow in the same run.
* ``tpc_it_kills_abort``: the job writes but never pre-commits and the sensor gives
  up after 2 s, so every run ends in the ``abort`` task (the one_failed path).
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta

from airflow.sdk import DAG

from airflow_tpc.airflow import exactly_once_spark_group

ROOT = os.environ.get("TPC_IT_ROOT", "/tmp/tpc-it")
JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "spark", "jobs",
                   "kill_mid_write.py")
KILLS_TARGET = os.path.join(ROOT, "kills_target")
NAMESPACE = "tpc_it_kills"
ARGS = ["--rows", "{{ dag_run.conf.get('rows', 100) }}",
        "--pause-on-try", "{{ dag_run.conf.get('pause_on_try', 0) }}",
        "--try", "{{ ti.try_number }}",
        "--flag", "{{ dag_run.conf.get('flag', '') }}"]
# A tiny job is all JVM start-up and warm-up: C1-only JIT and the serial GC cut
# spark-submit from ~23-27 s to ~12-17 s on 2 busy cores here.
SPARK = {"conf": {"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2",
                  "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"},
         "name": "tpc-it-kills"}

with DAG("tpc_it_kills", schedule=None, start_date=datetime(2026, 1, 1), catchup=False,
         tags=["tpc-test"]):
    exactly_once_spark_group(
        "events", application=JOB, target=KILLS_TARGET, namespace=NAMESPACE,
        conn_id="spark_local", application_args=ARGS, poke_interval=1, sensor_timeout=600,
        submit_kwargs={"retries": 1, "retry_delay": timedelta(seconds=0)}, **SPARK)

with DAG("tpc_it_kills_abort", schedule=None, start_date=datetime(2026, 1, 1), catchup=False,
         tags=["tpc-test"]):
    exactly_once_spark_group(
        "events", application=JOB, target=KILLS_TARGET, namespace=NAMESPACE,
        conn_id="spark_local", application_args=[*ARGS, "--no-precommit", "1"],
        poke_interval=1, sensor_timeout=2, **SPARK)
