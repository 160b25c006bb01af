"""A PySpark job that runs until it is stopped (tests/airflow/test_orphan_app.py).

``--flag F``: the driver writes its pid to ``F.driver``; one Spark task (in a Python
worker) writes the worker's pid to ``F.worker`` and then waits for ``F.go``, which the
test never creates: the application lives until something stops it. ``--block 0``
writes one file into staging and ends at once (a later attempt that must not block).
``--group 1``: the job of a group attempt (writes every member when it does not block).
"""

from __future__ import annotations

import argparse
import os
import sys

from pyspark.sql import SparkSession

from airflow_tpc.spark import current_group, current_transaction


def _publish(path: str, text: str) -> None:
    with open(path + ".tmp", "w") as fh:
        fh.write(text)
    os.replace(path + ".tmp", path)


def wait_forever(flag: str):
    def run(_x: int) -> int:
        import os
        import time

        _publish(flag + ".worker", str(os.getpid()))
        while not os.path.exists(flag + ".go"):
            time.sleep(0.2)
        return 0
    return run


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--flag", required=True)
    parser.add_argument("--block", type=int, default=1)
    parser.add_argument("--group", type=int, default=0)
    args = parser.parse_args(argv)
    spark = SparkSession.builder.appName("tpc-block-app").getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    txn = current_group(spark) if args.group else current_transaction(spark)
    _publish(args.flag + ".driver", str(os.getpid()))
    if args.block:
        spark.sparkContext.parallelize([0], 1).map(wait_forever(args.flag)).collect()
    for uri in ([txn.output_uri(n) for n in txn.names] if args.group else [txn.output_uri]):
        spark.range(3, numPartitions=1).write.mode("overwrite").parquet(uri)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
