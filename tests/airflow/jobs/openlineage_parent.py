"""A job run by spark-submit that writes, as its output, the OpenLineage properties its
Spark conf holds (``spark.openlineage.*``: what the OpenLineage Spark integration reads
to name its events' parent run), for tests/airflow/test_openlineage_spark.py: the
committed rows are what the job itself received.

It reads the conf spark-submit hands its driver (the JVM's ``spark.*`` properties,
through the gateway spark-submit opened) without starting a SparkContext: the conf is
what is under test, and a context's start would cost the suite seconds for nothing."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark import SparkConf, SparkContext

from airflow_tpc.spark import current_transaction


def main() -> None:
    SparkContext._ensure_initialized()  # the gateway of the spark-submit JVM, no context
    conf = SparkConf()  # loads the driver's spark.* properties: the submitted conf
    txn = current_transaction(SimpleNamespace(conf=conf))
    rows = sorted((k, v) for k, v in conf.getAll() if k.startswith("spark.openlineage."))
    out = txn.output_uri.removeprefix("file://")
    os.makedirs(out, exist_ok=True)
    pq.write_table(pa.table({"key": [k for k, _ in rows], "value": [v for _, v in rows]}),
                   os.path.join(out, "part-0.parquet"))
    txn.precommit()


if __name__ == "__main__":
    main()
