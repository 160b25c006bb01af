"""A small PySpark job for the process-kill tests (tests/airflow/test_kills.py).

It writes ``--rows`` rows (column ``events`` = 1 per row, so the sum of ``events``
over the published table counts the copies of the output) as Parquet into its
transaction's staging in two partitions, then pre-commits.

``--pause-on-try N[,M...] --try T --flag F``: when T is listed the write *stalls mid-way*:
partition 0 is written and its task committed, partition 1 yields its first batch
to the Parquet writer (an open, half-written file under ``_temporary/``) and then
the Python worker writes its pid to ``F.tryT`` and sleeps, so the test can SIGKILL the
spark-submit process tree while the Spark write job is in flight.

``--no-precommit 1`` writes everything but never seals the transaction.
"""

from __future__ import annotations

import argparse
import sys

from pyspark.sql import SparkSession

from airflow_tpc.spark import current_transaction


def stall_partition(flag: str):
    def run(batches):
        import os
        import time

        from pyspark import TaskContext

        stall = TaskContext.get().partitionId() == 1
        for batch in batches:
            yield batch
            if stall:
                with open(flag + ".tmp", "w") as fh:
                    fh.write(str(os.getpid()))
                os.replace(flag + ".tmp", flag)
                time.sleep(900)  # killed long before
    return run


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=100)
    parser.add_argument("--pause-on-try", default="0")
    parser.add_argument("--try", dest="try_number", type=int, default=1)
    parser.add_argument("--flag", default="")
    parser.add_argument("--no-precommit", type=int, default=0)
    args = parser.parse_args(argv)

    spark = SparkSession.builder.appName("tpc-kill-mid-write").getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    txn = current_transaction(spark)
    df = spark.range(args.rows, numPartitions=2).selectExpr("id", "1 AS events",
                                                           f"'{txn.epoch}' AS day")
    if str(args.try_number) in args.pause_on_try.split(","):
        if not args.flag:
            raise SystemExit("--pause-on-try needs --flag")
        flag = f"{args.flag}.try{args.try_number}"
        # Small Arrow batches so partition 1 hands over a first batch and then stalls.
        spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "10")
        df = df.mapInArrow(stall_partition(flag), df.schema)
    df.write.mode("overwrite").parquet(txn.output_uri)
    if not args.no_precommit:
        txn.precommit()
    print(f"wrote {args.rows} rows for {txn.txn_id}"
          f"{' (NOT pre-committed)' if args.no_precommit else ''}")
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
