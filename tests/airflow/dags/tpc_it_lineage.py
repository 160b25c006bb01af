"""OpenLineage of a real commit: a plain-Python job (no Spark), then a CommitOperator whose
try asks itself for its lineage the way the OpenLineage listener does when the task
completes (``get_openlineage_facets_on_complete(ti)``, the try's real task instance) and
pushes what it got to XCom (key ``lineage``; null without the OpenLineage provider)."""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path
from typing import Any

from airflow.sdk import DAG, task

from airflow_tpc import Sink
from airflow_tpc.airflow import CommitOperator, PrecommitSensor

ROOT = os.environ.get("TPC_IT_ROOT", "/tmp/tpc-it")
TARGET = os.path.join(ROOT, "lineage_target")
NAMESPACE = "tpc_it_lineage"


class LineageProbeCommit(CommitOperator):
    def execute(self, context: Any) -> Any:
        summary = super().execute(context)
        lineage = self.get_openlineage_facets_on_complete(context["ti"])
        doc = None
        if lineage is not None:
            from openlineage.client.serde import Serde

            doc = {"class": type(lineage).__name__,
                   "outputs": [{"class": type(o).__name__, **Serde.to_dict(o)}
                               for o in lineage.outputs],
                   "inputs": [Serde.to_dict(i) for i in lineage.inputs]}
        context["ti"].xcom_push(key="lineage", value=doc)
        return summary


with DAG("tpc_it_lineage", schedule=None, start_date=datetime(2026, 1, 1), catchup=False,
         tags=["tpc-test"]):

    @task(task_id="submit")
    def submit(**context: Any) -> None:
        """Begin an attempt of ``conf["epoch"]``, stage two files, pre-commit with rows."""
        ti = context["ti"]
        sink = Sink(TARGET, NAMESPACE)
        txn = sink.begin(context["dag_run"].conf["epoch"],
                         owner={"dag_id": ti.dag_id, "run_id": ti.run_id})
        ti.xcom_push(key="tpc_txn", value={**txn.to_dict(), "storage_conn_id": None,
                                           "storage_options": {}})
        staging = Path(txn.staging_uri.removeprefix("file://"))
        (staging / "country=NL").mkdir(parents=True, exist_ok=True)
        (staging / "country=NL" / "part-0.parquet").write_bytes(b"x" * 64)
        (staging / "part-1.parquet").write_bytes(b"y" * 36)
        sink.precommit(txn, rows={"country=NL/part-0.parquet": 5, "part-1.parquet": 2})

    wait = PrecommitSensor(task_id="wait_precommit", target=TARGET, namespace=NAMESPACE,
                           submit_task_id="submit", poke_interval=1, timeout=300)
    commit = LineageProbeCommit(task_id="commit", target=TARGET, namespace=NAMESPACE,
                                sensor_task_id="wait_precommit")
    submit() >> wait >> commit
