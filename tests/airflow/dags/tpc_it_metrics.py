"""The protocol's Airflow tasks around a plain-Python job, for the metrics tests
(tests/airflow/test_metrics.py): each run's ``conf`` picks what happens to its attempt.

conf: ``epoch``; ``fail`` (the job dies before its pre-commit: the abort task aborts);
``fence`` (after the pre-commit another run begins a higher attempt of the epoch, so this
one is a fenced zombie); ``expire`` (the attempt is begun with a 0.2 s timeout and never
pre-committed: the sensor finds it expired).  Two files of known sizes and rows are staged.
"""

from __future__ import annotations

import os
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from airflow.sdk import DAG, task

from airflow_tpc import Sink, SinkConfig
from airflow_tpc.airflow import AbortOperator, CommitOperator, PrecommitSensor
from airflow_tpc.airflow.operators.group import GroupArgs
from airflow_tpc.airflow.utils.task_group import exactly_once_group_tasks

ROOT = os.environ.get("TPC_IT_ROOT", "/tmp/tpc-it")
TARGET = os.path.join(ROOT, "metrics_target")
NAMESPACE = "tpc_it_metrics"
#: relative path -> (bytes, rows) of the files every attempt stages
FILES = {"part-0.parquet": (100, 7), "part-1.parquet": (250, 35)}

with DAG("tpc_it_metrics", schedule=None, start_date=datetime(2026, 1, 1), catchup=False,
         tags=["tpc-test"]):

    @task(task_id="submit")
    def submit(**context: Any) -> None:
        conf = context["dag_run"].conf or {}
        ti = context["ti"]
        epoch = conf["epoch"]
        owner = {"dag_id": ti.dag_id, "run_id": ti.run_id}
        timeout = 0.2 if conf.get("expire") else 3600.0
        sink = Sink(TARGET, NAMESPACE, config=SinkConfig(timeout_s=timeout))
        txn = sink.begin(epoch, owner=owner)
        ti.xcom_push(key="tpc_txn", value={**txn.to_dict(), "storage_conn_id": None,
                                           "storage_options": {}})
        staging = Path(txn.staging_uri.removeprefix("file://"))
        staging.mkdir(parents=True, exist_ok=True)
        for name, (size, _) in FILES.items():
            (staging / name).write_bytes(b"x" * size)
        if conf.get("fail"):
            raise RuntimeError("the job failed before its pre-commit")
        if conf.get("expire"):
            while not txn.expired():  # wait for the condition, not for the sensor
                time.sleep(0.05)
            return
        sink.precommit(txn, rows={name: rows for name, (_, rows) in FILES.items()})
        if conf.get("fence"):
            Sink(TARGET, NAMESPACE).begin(epoch, owner={"dag_id": "another", "run_id": "zombie"})

    begun = submit()
    wait = PrecommitSensor(task_id="wait_precommit", target=TARGET, namespace=NAMESPACE,
                           submit_task_id="submit", mode="poke", poke_interval=1, timeout=300)
    # retries=0: the crash run needs its commit to stay failed (a retry would roll the
    # decided epoch forward before the test's own rerun, which counts that roll-forward)
    commit = CommitOperator(task_id="commit", target=TARGET, namespace=NAMESPACE,
                            sensor_task_id="wait_precommit", retries=0)
    abort = AbortOperator(task_id="abort", target=TARGET, namespace=NAMESPACE,
                          submit_task_id="submit")
    begun >> wait >> commit
    [begun, wait, commit] >> abort

#: A group of two folders (one decision), its files as FILES: metrics per member; its
#: sensor defers (the group's trigger runs in dag.test's own loop).
GROUP_NAMESPACE = "tpc_it_metrics_group"
GROUP_TARGETS = {"events": os.path.join(ROOT, "metrics_group_events"),
                 "daily": os.path.join(ROOT, "metrics_group_daily")}

with DAG("tpc_it_metrics_group", schedule=None, start_date=datetime(2026, 1, 1),
         catchup=False, tags=["tpc-test"]):

    @task(task_id="submit")
    def submit_group(**context: Any) -> None:
        """Begin a group attempt, stage FILES into each member; ``fail``: die before the
        pre-commit (the abort task aborts the group)."""
        from airflow_tpc import Group

        conf, ti = context["dag_run"].conf or {}, context["ti"]
        group = Group({n: Sink(t, GROUP_NAMESPACE) for n, t in GROUP_TARGETS.items()},
                      os.path.join(ROOT, "_tpc_groups", GROUP_NAMESPACE))
        gtxn = group.begin(conf["epoch"], owner={"dag_id": ti.dag_id, "run_id": ti.run_id})
        args = GroupArgs.of(GROUP_TARGETS, GROUP_NAMESPACE,
                            os.path.join(ROOT, "_tpc_groups", GROUP_NAMESPACE))
        ti.xcom_push(key="tpc_group_txn", value=args.xcom(gtxn))
        for txn in gtxn.members.values():
            staging = Path(txn.staging_uri.removeprefix("file://"))
            staging.mkdir(parents=True, exist_ok=True)
            for rel, (size, _) in FILES.items():
                (staging / rel).write_bytes(b"x" * size)
        if conf.get("fail"):
            raise RuntimeError("the job failed before its pre-commit")
        for name, sink in group.sinks.items():
            sink.precommit(gtxn.member(name), rows={r: n for r, (_, n) in FILES.items()})

    exactly_once_group_tasks(submit_group().operator, targets=GROUP_TARGETS,
                             namespace=GROUP_NAMESPACE,
                             group_uri=os.path.join(ROOT, "_tpc_groups", GROUP_NAMESPACE),
                             poke_interval=1, sensor_timeout=300, deferrable=True,
                             epoch="{{ dag_run.conf['epoch'] }}")

#: An Iceberg table on pyiceberg's SQL catalog (the ``iceberg_catalog`` connection
#: ``tpc_it_metrics_catalog``, set by test_metrics.py): its health gauges come from the
#: sensor's and the commit's ends, the table opened through that connection.
ICEBERG_TARGET = "iceberg://metrics/m.events"
ICEBERG_CATALOG = "tpc_it_metrics_catalog"

with DAG("tpc_it_metrics_iceberg", schedule=None, start_date=datetime(2026, 1, 1),
         catchup=False, tags=["tpc-test"]):

    @task(task_id="submit")
    def submit_iceberg(**context: Any) -> None:
        """Begin an attempt of ``conf["epoch"]`` on the table, stage one Parquet file,
        pre-commit (the table's rows come from the footer)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        from airflow_tpc.airflow.hooks.tpc import TpcHook

        ti, conf = context["ti"], context["dag_run"].conf
        hook = TpcHook(ICEBERG_TARGET, NAMESPACE, catalog_conn_id=ICEBERG_CATALOG)
        sink = hook.get_sink()
        txn = sink.begin(conf["epoch"], owner={"dag_id": ti.dag_id, "run_id": ti.run_id})
        ti.xcom_push(key="tpc_txn", value={**txn.to_dict(), "storage_conn_id": None,
                                           "storage_options": {}, "table": ICEBERG_TARGET,
                                           "catalog_conn_id": ICEBERG_CATALOG})
        staging = txn.staging_uri.removeprefix("file://")
        os.makedirs(staging, exist_ok=True)
        pq.write_table(pa.table({"id": pa.array([1, 2, 3], pa.int64()),
                                 "epoch": pa.array([conf["epoch"]] * 3)}),
                       f"{staging}/part-0.parquet")
        sink.precommit(txn)

    table_args = {"target": ICEBERG_TARGET, "namespace": NAMESPACE,
                  "catalog_conn_id": ICEBERG_CATALOG}
    table_wait = PrecommitSensor(task_id="wait_precommit", submit_task_id="submit",
                                 poke_interval=1, timeout=300, **table_args)
    table_commit = CommitOperator(task_id="commit", sensor_task_id="wait_precommit",
                                  **table_args)
    submit_iceberg() >> table_wait >> table_commit
