"""Small helpers shared by the Spark tests."""

from __future__ import annotations

from airflow_tpc import Sink
from airflow_tpc.spark import CONF_KEY, JobTransaction, build_payload, current_transaction


def job_for(spark, sink: Sink, epoch: str, *, guarantee: str = "EXACTLY_ONCE",
            storage_options=None) -> JobTransaction:
    """What the submit operator + the job do: begin, pass the payload by conf, find it."""
    txn = sink.begin(epoch)
    spark.conf.set(CONF_KEY, build_payload(txn, guarantee=guarantee,
                                           storage_options=storage_options))
    try:
        return current_transaction(spark)
    finally:
        spark.conf.unset(CONF_KEY)


def rows_of(df, *cols: str) -> list[tuple]:
    return sorted(tuple(r[c] for c in cols) for r in df.collect())
