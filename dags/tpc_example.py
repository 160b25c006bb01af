"""Example pipeline: daily epochs of click-stream events, aggregated by PySpark, exactly once.

Each daily run is one epoch (its data interval's date) of the target.  A failed
Spark attempt, a retry, a manual rerun or a backfill of the same day never
duplicates or partially publishes that day: the commit task publishes the one
validated attempt, the abort task throws the rest away.

Configuration (environment, read when the DAG file is parsed):
  TPC_EXAMPLE_TARGET   where the table lives (default /tmp/airflow-tpc/daily_event_counts;
                       an s3://bucket/prefix or an az://container/path works too, with
                       TPC_EXAMPLE_STORAGE_CONN: an aws / generic or a wasb / adls connection)
  TPC_EXAMPLE_SPARK_CONN  the Spark connection (default spark_local:
                       AIRFLOW_CONN_SPARK_LOCAL='{"conn_type":"spark","host":"local[2]"}')
  TPC_EXAMPLE_TABLE    the same aggregates as an Iceberg table target (default
                       iceberg://tpc_example/analytics.daily_event_counts): one snapshot per
                       epoch commit; empty string: no table group
  TPC_EXAMPLE_CATALOG_CONN  the table's iceberg_catalog connection (default
                       tpc_example_catalog), e.g. the embedded SQL catalog on SQLite:
                       AIRFLOW_CONN_TPC_EXAMPLE_CATALOG='{"conn_type": "iceberg_catalog",
                         "host": "sqlite:////data/catalog.db",
                         "schema": "file:///data/warehouse", "extra": {"type": "sql"}}'
                       (scripts/demo.py sets it under the demo's data dir); a REST
                       catalog works the same way (host = its URI, login/password = its
                       client credential, extra = the other pyiceberg properties)
  TPC_EXAMPLE_LEDGER_URI  the table's ledger apart from it (needed on managed table
                       storage and for a new table of a REST catalog; docs/tables.md)
  TPC_EXAMPLE_REPLACE_WHERE  an existing table of its own partitioning: the rows one run
                       owns, templated, e.g. "day = '{{ ds }}'" (the job writes a "day"
                       column; without it the table uses the identity(epoch) layout)
  TPC_EXAMPLE_POKE_INTERVAL  seconds between the sensors' looks (default 5; the demo: 1)
  TPC_EXAMPLE_GROUP    the second DAG, tpc_daily_events_group: the same job writes a folder
                       (TPC_EXAMPLE_TARGET + "_group") and an Iceberg table (TPC_EXAMPLE_TABLE
                       + "_group") as ONE group transaction: both or neither (docs/groups.md);
                       "0": no such DAG
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta

from airflow.sdk import DAG, Param

from airflow_tpc.airflow import exactly_once_spark_group

JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "jobs", "aggregate_events.py")
TARGET = os.environ.get("TPC_EXAMPLE_TARGET", "/tmp/airflow-tpc/daily_event_counts")
TABLE = os.environ.get("TPC_EXAMPLE_TABLE", "iceberg://tpc_example/analytics.daily_event_counts")
ARGS = ["--rows", "{{ params.rows }}", "--seed", "{{ params.seed }}",
        "--fail-on-try", "{{ params.fail_on_try }}", "--try", "{{ ti.try_number }}"]
#: How every task group of this file runs the job (the same job, retried once).
RUN = {
    "application": JOB,
    "conn_id": os.environ.get("TPC_EXAMPLE_SPARK_CONN", "spark_local"),
    "storage_conn_id": os.environ.get("TPC_EXAMPLE_STORAGE_CONN") or None,
    "application_args": ARGS,
    "submit_kwargs": {"retries": 1, "retry_delay": timedelta(seconds=2)},
    "sensor_mode": "reschedule",
    "poke_interval": float(os.environ.get("TPC_EXAMPLE_POKE_INTERVAL") or 5),
}
PARAMS = {
    "rows": Param(20_000, type="integer", minimum=1),
    "seed": Param(0, type="integer", description="change to simulate changed input"),
    "fail_on_try": Param(0, type="integer", description="make the job die on this try"),
}

with DAG(
    dag_id="tpc_daily_events",
    description="Daily event aggregates written exactly once (airflow-tpc example)",
    schedule="@daily",
    start_date=datetime(2026, 11, 1),
    catchup=False,
    max_active_runs=2,
    params=PARAMS,
    tags=["airflow-tpc", "example"],
) as dag:
    exactly_once_spark_group(
        "daily_event_counts",
        target=TARGET,
        namespace="tpc_daily_events",
        **RUN,
        name="tpc-daily-events",
    )
    if TABLE:
        # The same job and epochs into an Iceberg table: the task group takes a table
        # target the way it takes a folder; each epoch's commit is one snapshot.
        exactly_once_spark_group(
            "daily_event_counts_table",
            target=TABLE,
            namespace="tpc_daily_events_table",
            catalog_conn_id=os.environ.get("TPC_EXAMPLE_CATALOG_CONN", "tpc_example_catalog"),
            ledger_uri=os.environ.get("TPC_EXAMPLE_LEDGER_URI") or None,
            replace_where=os.environ.get("TPC_EXAMPLE_REPLACE_WHERE") or None,
            **RUN,
            name="tpc-daily-events-table",
        )

if TABLE and os.environ.get("TPC_EXAMPLE_GROUP", "1") != "0":
    with DAG(
        dag_id="tpc_daily_events_group",
        description="Daily event aggregates into a folder and an Iceberg table, as one "
                    "transaction (airflow-tpc example)",
        schedule="@daily",
        start_date=datetime(2026, 11, 1),
        catchup=False,
        max_active_runs=2,
        params=PARAMS,
        tags=["airflow-tpc", "example"],
    ) as group_dag:
        # One job, two outputs, one decision: a reader joining the folder and the table
        # (through the group's cut) never sees one at a newer epoch than the other.
        exactly_once_spark_group(
            "daily_event_counts_both",
            targets={"folder": TARGET.rstrip("/") + "_group", "table": TABLE + "_group"},
            namespace="tpc_daily_events_group",
            catalog_conn_id=os.environ.get("TPC_EXAMPLE_CATALOG_CONN", "tpc_example_catalog"),
            **RUN,
            name="tpc-daily-events-group",
        )
