"""The Spark job's own OpenLineage events can join the Airflow run: the submit task hands
the job its OpenLineage parent run in the Spark conf (the provider's injection, on by
default in StagedSparkSubmitOperator), and the job receives it.

A job run by spark-submit (tests/airflow/jobs/openlineage_parent.py) writes the
``spark.openlineage.*`` properties of its own Spark conf as its output; those rows (its
sealed staging: only the submit task runs) must name the submit task's run exactly as
Airflow's listener named it in the task's START event (run id, job name and namespace,
and the DAG run as root)."""

from __future__ import annotations

import os

import pyarrow.parquet as pq
import pytest

from airflow_tpc import Sink, TxnState

from .dags.tpc_it_lineage import NAMESPACE, SPARK_TARGET
from .helpers import states
from .test_openlineage import _events

pytestmark = pytest.mark.timeout(900)


def test_the_spark_job_receives_the_submit_tasks_run_as_its_parent(dagbag):
    dag_id, epoch = "tpc_it_lineage_spark", "2026-09-04"
    dr = dagbag.get_dag(dag_id).test(run_conf={"epoch": epoch})
    assert states(dr)["submit"] == "success", states(dr)
    [start] = [e for e in _events(dag_id, "submit") if e["eventType"] == "START"]
    [info] = Sink(SPARK_TARGET, NAMESPACE).describe(epoch)
    assert info.state is TxnState.PRECOMMITTED, info  # the job ran and sealed its output
    staged = os.path.join(info.staging_uri.removeprefix("file://"), "part-0.parquet")
    received = {r["key"]: r["value"] for r in pq.read_table(staged).to_pylist()}
    root = start["run"]["facets"]["parent"]["root"]
    assert {k: received.get(k) for k in (
        "spark.openlineage.parentRunId", "spark.openlineage.parentJobName",
        "spark.openlineage.parentJobNamespace", "spark.openlineage.rootParentRunId",
        "spark.openlineage.rootParentJobName")} == {
        "spark.openlineage.parentRunId": start["run"]["runId"],
        "spark.openlineage.parentJobName": start["job"]["name"],
        "spark.openlineage.parentJobNamespace": start["job"]["namespace"],
        "spark.openlineage.rootParentRunId": root["run"]["runId"],
        "spark.openlineage.rootParentJobName": root["job"]["name"]}
