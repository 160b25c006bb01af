"""OpenLineage of real commits through Airflow's own OpenLineage listener (its emission
policy in tests/airflow/conftest.py enables it for these DAGs only and points its file
transport at the session's ``openlineage.jsonl``), for tests/airflow/test_openlineage.py.

One DAG per kind of target — a folder, a Delta table, an Iceberg table (catalog
connection ``tpc_it_lineage_catalog``, set by the test) — each a plain-Python job (no
Spark: begin, stage two Parquet files of 7 rows, pre-commit), the sensor, the commit and
the abort.  ``conf["fail"]``: the job fails after staging, so the abort task aborts
(``conf["self_abort"]``: the job's own task aborts its attempt first, as
StagedSparkSubmitOperator does); ``conf["earlier"]``: that many earlier attempts of the
run are begun and left open first, as killed tries leave them.  ``tpc_it_lineage_tamper``
changes a staged file between validation and commit, so its commit fails.
"""

from __future__ import annotations

import os
from datetime import datetime
from typing import Any

from airflow.sdk import DAG, task

from airflow_tpc.airflow import (
    AbortOperator,
    CommitOperator,
    PrecommitSensor,
    StagedSparkSubmitOperator,
    TpcHook,
)
from airflow_tpc.airflow.operators.group import GroupArgs
from airflow_tpc.airflow.utils.task_group import exactly_once_group_tasks

ROOT = os.environ.get("TPC_IT_ROOT", "/tmp/tpc-it")
NAMESPACE = "tpc_it_lineage"
#: kind -> (target, catalog connection)
TARGETS = {"folder": (os.path.join(ROOT, "lineage_target"), None),
           "delta": (f"delta+file://{ROOT}/lineage_delta", None),
           "iceberg": ("iceberg://lineage/ol.events", "tpc_it_lineage_catalog"),
           # a folder whose staged file is changed between validation and commit: the
           # commit is refused (FAIL), then the abort task aborts
           "tamper": (os.path.join(ROOT, "lineage_tamper"), None)}

for kind, (target, catalog) in TARGETS.items():
    with DAG(f"tpc_it_lineage_{kind}", schedule=None, start_date=datetime(2026, 1, 1),
             catchup=False, tags=["tpc-test"]):

        @task(task_id="submit")
        def submit(target: str, catalog: str | None, **context: Any) -> None:
            """Begin an attempt of ``conf["epoch"]``, stage two files, pre-commit."""
            import pyarrow as pa
            import pyarrow.parquet as pq

            ti, conf = context["ti"], context["dag_run"].conf
            hook = TpcHook(target, NAMESPACE, catalog_conn_id=catalog)
            sink = hook.get_sink()
            mine = {"dag_id": ti.dag_id, "run_id": ti.run_id}
            for _ in range(int(conf.get("earlier", 0))):  # earlier tries' attempts, left open
                sink.begin(conf["epoch"], owner=mine)
            txn = sink.begin(conf["epoch"], owner=mine)
            ti.xcom_push(key="tpc_txn", value={**txn.to_dict(), "storage_conn_id": None,
                                               "storage_options": {}, "table": target
                                               if hook.is_table else None,
                                               "catalog_conn_id": catalog})
            staging = txn.staging_uri.removeprefix("file://")
            os.makedirs(staging, exist_ok=True)
            for name, ids in (("part-0.parquet", [1, 2, 3, 4, 5]), ("part-1.parquet", [6, 7])):
                pq.write_table(pa.table({"id": pa.array(ids, pa.int64()),
                                         "epoch": pa.array([conf["epoch"]] * len(ids))}),
                               f"{staging}/{name}")
            if conf.get("fail"):
                if conf.get("self_abort"):  # as StagedSparkSubmitOperator does on failure
                    sink.abort(txn, "the job failed")
                raise RuntimeError("the job failed after staging")
            # A folder's rows are what the job says (a table's come from the footers).
            sink.precommit(txn, **({} if hook.is_table else {
                "rows": {"part-0.parquet": 5, "part-1.parquet": 2}}))

        args = {"target": target, "namespace": NAMESPACE, "catalog_conn_id": catalog}
        begun = submit(target, catalog)
        wait = PrecommitSensor(task_id="wait_precommit", submit_task_id="submit",
                               poke_interval=1, timeout=300, **args)
        commit = CommitOperator(task_id="commit", sensor_task_id="wait_precommit", **args)
        abort = AbortOperator(task_id="abort", submit_task_id="submit", **args)
        if kind == "tamper":
            @task(task_id="tamper")
            def tamper(target: str, **context: Any) -> None:
                """Change a validated staged file: the commit's re-check refuses it."""
                doc = context["ti"].xcom_pull(task_ids="submit", key="tpc_txn")
                staging = doc["staging_uri"].removeprefix("file://")
                with open(f"{staging}/part-1.parquet", "ab") as fh:
                    fh.write(b"changed after validation")

            changed = tamper(target)
            begun >> wait >> changed >> commit
            [begun, wait, changed, commit] >> abort
        else:
            begun >> wait >> commit
            [begun, wait, commit] >> abort

#: A group of a folder and an Iceberg table (one decision): one output per member.
GROUP_TARGETS = {"folder": os.path.join(ROOT, "lineage_group_folder"),
                 "table": "iceberg://lineage/ol.group_events"}
GROUP_URI = os.path.join(ROOT, "_tpc_groups", "tpc_it_lineage_group")

with DAG("tpc_it_lineage_group", schedule=None, start_date=datetime(2026, 1, 1),
         catchup=False, tags=["tpc-test"]):

    @task(task_id="submit")
    def submit_group(**context: Any) -> None:
        """Begin a group attempt of ``conf["epoch"]``, stage two files a member, seal."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        from airflow_tpc import Group

        ti, conf = context["ti"], context["dag_run"].conf
        hooks = {"folder": TpcHook(GROUP_TARGETS["folder"], NAMESPACE),
                 "table": TpcHook(GROUP_TARGETS["table"], NAMESPACE,
                                  catalog_conn_id="tpc_it_lineage_catalog")}
        group = Group({n: h.get_sink() for n, h in hooks.items()}, GROUP_URI)
        gtxn = group.begin(conf["epoch"], owner={"dag_id": ti.dag_id, "run_id": ti.run_id})
        args = GroupArgs.of(GROUP_TARGETS, NAMESPACE, GROUP_URI,
                            catalog_conn_id="tpc_it_lineage_catalog")
        ti.xcom_push(key="tpc_group_txn", value=args.xcom(gtxn))
        for txn in gtxn.members.values():
            staging = txn.staging_uri.removeprefix("file://")
            os.makedirs(staging, exist_ok=True)
            for name, ids in (("part-0.parquet", [1, 2, 3, 4, 5]), ("part-1.parquet", [6, 7])):
                pq.write_table(pa.table({"id": pa.array(ids, pa.int64()),
                                         "epoch": pa.array([conf["epoch"]] * len(ids))}),
                               f"{staging}/{name}")
        group.sinks["folder"].precommit(gtxn.member("folder"), rows={
            "part-0.parquet": 5, "part-1.parquet": 2})
        group.sinks["table"].precommit(gtxn.member("table"))

    exactly_once_group_tasks(submit_group().operator, targets=GROUP_TARGETS,
                             namespace=NAMESPACE, group_uri=GROUP_URI,
                             catalog_conn_id="tpc_it_lineage_catalog", poke_interval=1,
                             sensor_timeout=300, epoch="{{ dag_run.conf['epoch'] }}")

#: A job run by spark-submit (tests/airflow/jobs/openlineage_parent.py) whose output is
#: the OpenLineage properties its Spark conf received; only the submit task (what is
#: under test is what the job receives, the job's pre-commit is its staged output).
SPARK_TARGET = os.path.join(ROOT, "lineage_spark")
SPARK_JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "jobs",
                         "openlineage_parent.py")

with DAG("tpc_it_lineage_spark", schedule=None, start_date=datetime(2026, 1, 1),
         catchup=False, tags=["tpc-test"]):
    StagedSparkSubmitOperator(
        task_id="submit", application=SPARK_JOB, target=SPARK_TARGET, namespace=NAMESPACE,
        conn_id="spark_local", epoch="{{ dag_run.conf['epoch'] }}",
        conf={"spark.ui.enabled": "false"})
