"""The protocol's own Airflow tasks (sensor, commit, abort) around a job that is plain Python.

No Spark: the ``submit`` task does what StagedSparkSubmitOperator and the job would (begin
attempts owned by this run, stage files, pre-commit unless told to fail), so a run takes
seconds and shows what the hook-backed tasks do.  The sensor records the storage requests
of each poke in XCom (key ``storage_requests``), counted on the real local store.
"""

from __future__ import annotations

import importlib.util
import os
from datetime import datetime
from pathlib import Path
from typing import Any

from airflow.sdk import DAG, task

from airflow_tpc import Sink
from airflow_tpc.airflow import AbortOperator, CommitOperator, PrecommitSensor

ROOT = os.environ.get("TPC_IT_ROOT", "/tmp/tpc-it")
TARGET = os.path.join(ROOT, "nospark_target")
NAMESPACE = "tpc_it_nospark"

# tests/airflow/helpers.py by path: this file is also parsed by schedulers whose sys.path
# does not hold the repository.
_spec = importlib.util.spec_from_file_location(
    "tpc_it_helpers", Path(__file__).resolve().parents[1] / "helpers.py")
_helpers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_helpers)


class CountingPrecommitSensor(PrecommitSensor):
    """PrecommitSensor whose every poke pushes the storage requests it made to XCom.

    Counted on the store class for the length of the poke, so a Sink built inside it is
    counted too; the hook (and its Sink) a sensor keeps across pokes is built first.
    """

    def poke(self, context: Any) -> Any:
        storage_cls = type(self.tpc_hook.get_sink().storage)
        with _helpers.count_storage_requests(storage_cls) as counts:
            result = super().poke(context)
        context["ti"].xcom_push(key="storage_requests", value=dict(counts))
        return result


with DAG("tpc_it_nospark", schedule=None, start_date=datetime(2026, 1, 1), catchup=False,
         tags=["tpc-test"]):

    @task(task_id="submit")
    def submit(**context: Any) -> None:
        """Begin attempts as a submit task's tries would, then stage and pre-commit.

        conf: ``epoch``; ``foreign`` (an attempt begun by another run first: never this
        run's to abort); ``stale`` (attempts this run began and aborted, as failed tries
        do); ``open`` (attempts this run began and left open, as killed tries do);
        ``fail`` (the job dies after staging, before its pre-commit).
        """
        conf = context["dag_run"].conf or {}
        ti = context["ti"]
        epoch = conf["epoch"]
        sink = Sink(TARGET, NAMESPACE)
        mine = {"dag_id": ti.dag_id, "run_id": ti.run_id}
        if conf.get("foreign"):
            sink.begin(epoch, owner={"dag_id": "another_dag", "run_id": "another_run"})
        for _ in range(int(conf.get("stale", 0))):
            sink.abort(sink.begin(epoch, owner=mine), "a failed earlier try")
        for _ in range(int(conf.get("open", 0))):
            sink.begin(epoch, owner=mine)
        txn = sink.begin(epoch, owner=mine)
        ti.xcom_push(key="tpc_txn", value={**txn.to_dict(), "storage_conn_id": None,
                                           "storage_options": {}})
        staging = Path(txn.staging_uri.removeprefix("file://"))
        staging.mkdir(parents=True, exist_ok=True)
        (staging / "part-0.parquet").write_bytes(b"x" * 64)
        if conf.get("fail"):
            raise RuntimeError("the job failed before its pre-commit")
        sink.precommit(txn)

    begun = submit()
    wait = CountingPrecommitSensor(task_id="wait_precommit", target=TARGET, namespace=NAMESPACE,
                                   submit_task_id="submit", mode="poke", poke_interval=1,
                                   timeout=300)
    commit = CommitOperator(task_id="commit", target=TARGET, namespace=NAMESPACE,
                            sensor_task_id="wait_precommit")
    abort = AbortOperator(task_id="abort", target=TARGET, namespace=NAMESPACE,
                          submit_task_id="submit")
    begun >> wait >> commit
    [begun, wait, commit] >> abort
