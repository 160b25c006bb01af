"""A PySpark job reading committed epochs of Azure targets with the distributed reader,
run by spark-submit in tests/spark/test_azure_read.py with its own environment: the
account key there (as a job gets it from ``azure_job_env``), the account name nowhere
but in the reader's options.

argv: the result file, a JSON list of targets, the public options as JSON.  Writes, per
target, the rows of every committed epoch and of epochs B and C, the partition count,
and what the plan, the reader's options and the Spark conf hold (the parent checks that
no secret is among them).
"""

import json
import os
import sys

from pyspark.sql import SparkSession

from airflow_tpc.spark import read_committed

result_path, targets, public = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
spark = SparkSession.builder.appName("tpc-azure-read").getOrCreate()
spark.sparkContext.setLogLevel("ERROR")


def rows(df):
    return sorted([r["id"], r["side"], r["epoch"]] for r in df.collect())


out = {"env_has_account_name": "AZURE_STORAGE_ACCOUNT_NAME" in os.environ, "targets": {}}
for target in targets:
    df = read_committed(spark, target, storage_options=public)  # distributed by default
    qe = df._jdf.queryExecution()
    only_b = read_committed(spark, target, storage_options=public, epochs=["B", "C"],
                            distributed=True)
    out["targets"][target] = {
        "rows": rows(df), "only_b": rows(only_b), "partitions": df.rdd.getNumPartitions(),
        "plan": qe.toString(), "reader_options": qe.logical().options().toString(),
        "conf": [str(v) for _, v in spark.sparkContext.getConf().getAll()]
        + [str(v) for v in spark.conf.getAll.values()]}
with open(result_path, "w") as fh:
    json.dump(out, fh)
spark.stop()
