"""A tiny PySpark job as a user writes it, run by spark-submit in the tests.

It imports airflow_tpc from the --py-files zip with Airflow and boto3 blocked,
finds its transaction in the Spark conf, writes natively and pre-commits.
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import block_imports  # noqa: E402

block_imports.install()

from pyspark.sql import SparkSession  # noqa: E402

import airflow_tpc  # noqa: E402
from airflow_tpc.spark import current_transaction  # noqa: E402

spark = SparkSession.builder.appName("tpc-native-job").getOrCreate()
txn = current_transaction(spark)
df = spark.range(0, 1000, numPartitions=2).selectExpr("id", "id % 4 as bucket")
df.write.partitionBy("bucket").parquet(txn.output_uri)
manifest = txn.precommit()
with open(sys.argv[1], "w") as fh:
    json.dump({"airflow_tpc_file": airflow_tpc.__file__, "digest": manifest.digest,
               "rows_files": manifest.total_files,
               "blocked_loaded": sorted(m for m in sys.modules
                                        if m.split(".")[0] in ("airflow", "boto3"))}, fh)
spark.stop()
