"""An existing ``days(ts)``-partitioned Iceberg table behind a REST catalog, on managed
table storage (SeaweedFS's table bucket): the protocol's own tasks with ``ledger_uri``
and a templated ``replace_where``, around a plain-Python job (no Spark: Spark here has
no S3 client).

Everything about the services comes from connections (set by the test, as a platform
team would: ``tpc_it_rest_catalog``, an ``iceberg_catalog`` one with the REST URI and
client credential, and maybe ``tpc.ledger-root``; ``tpc_it_rest_s3``, the store's keys
and endpoint) and the run's conf (``ledger``: the ledger folder, else the catalog
connection's ledger root decides; ``ids``: the rows the job writes).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from airflow.sdk import DAG, task

from airflow_tpc.airflow import TpcHook
from airflow_tpc.airflow.utils.task_group import exactly_once_tasks

TARGET = "iceberg://sw/analytics.events"
NAMESPACE = "tpc_it_rest"
#: The rows of the run's day, and only those: Airflow renders it per run.
REPLACE_WHERE = ("ts >= '{{ ds }}T00:00:00' AND "
                 "ts < '{{ macros.ds_add(ds, 1) }}T00:00:00'")
SINK = {"target": TARGET, "namespace": NAMESPACE, "storage_conn_id": "tpc_it_rest_s3",
        "catalog_conn_id": "tpc_it_rest_catalog",
        "ledger_uri": "{{ dag_run.conf.get('ledger') or '' }}", "replace_where": REPLACE_WHERE}

with DAG("tpc_it_rest", schedule=None, start_date=dt.datetime(2026, 1, 1), catchup=False,
         tags=["tpc-test"]):

    @task(task_id="submit", templates_dict={k: SINK[k] for k in ("ledger_uri",
                                                                 "replace_where")})
    def submit(templates_dict: dict[str, str], **context: Any) -> None:
        """What StagedSparkSubmitOperator and its job do: begin, write Parquet files of
        the run's day into staging (pyarrow through the store's file system), seal."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        ti = context["ti"]
        hook = TpcHook(TARGET, NAMESPACE, storage_conn_id=SINK["storage_conn_id"],
                       catalog_conn_id=SINK["catalog_conn_id"], **templates_dict)
        sink = hook.get_sink()
        txn = sink.begin(context["ds"], owner={"dag_id": ti.dag_id, "run_id": ti.run_id})
        ti.xcom_push(key="tpc_txn", value={
            **txn.to_dict(), "storage_conn_id": SINK["storage_conn_id"],
            "storage_options": hook.public_options, "table": TARGET,
            "catalog_conn_id": SINK["catalog_conn_id"],
            "ledger_uri": hook.resolved_ledger_uri()})
        day = dt.datetime.fromisoformat(context["ds"])
        ids = list(context["dag_run"].conf["ids"])
        rows = pa.table({"id": pa.array(ids, pa.int64()),
                         "value": pa.array([f"v{i}" for i in ids], pa.string()),
                         "ts": pa.array([day + dt.timedelta(hours=1, minutes=i) for i in ids],
                                        pa.timestamp("us"))})
        io = sink.table_target.file_io()
        with io.new_output(f"{txn.staging_uri}/part-0.parquet").create() as out:
            pq.write_table(rows, out)
        sink.precommit(txn)

    exactly_once_tasks(submit().operator, poke_interval=1, sensor_timeout=600, **SINK)
