"""Example PySpark job: aggregate one day (epoch) of generated click-stream events.

Run by ``StagedSparkSubmitOperator``: it finds its transaction with
``current_transaction(spark)``, writes Parquet into the transaction's staging and
seals it with ``txn.precommit()``.  The same job writes a folder or a table target
(``txn.with_epoch_column`` adds the ``epoch`` column a table needs).  It never
publishes anything itself: Airflow's commit task does, after validating the manifest.

The input is generated deterministically from (epoch, seed), so a rerun of an epoch
with the same seed produces the same rows and a different seed stands for
"the input changed" (late data): the rerun must replace the epoch, not add to it.

Failure knobs (for demos and tests): ``--fail-on-try N --try T`` writes part of the
output and then dies when T == N; ``--no-precommit 1`` writes and exits without sealing.
"""

from __future__ import annotations

import argparse
import hashlib
import sys

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from airflow_tpc.spark import current_transaction, write_tpc
from airflow_tpc.spark.group_context import JobGroup, current_group, read_group_payload


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--fail-on-try", type=int, default=0)
    parser.add_argument("--try", dest="try_number", type=int, default=1)
    parser.add_argument("--no-precommit", type=int, default=0)
    args = parser.parse_args(argv)

    spark = SparkSession.builder.appName("tpc-aggregate-events").getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    # Run by the group submit (several outputs, one transaction): every member gets the
    # same aggregates; else one target.
    payload, _ = read_group_payload(spark)
    group = current_group(spark) if payload else None
    txn = current_transaction(spark) if group is None else group.member(group.names[0])
    day_seed = int(hashlib.sha256(f"{txn.epoch}/{args.seed}".encode()).hexdigest()[:8], 16)

    events = (spark.range(args.rows, numPartitions=4)
              .withColumn("r", F.rand(day_seed))
              .withColumn("event_type", F.element_at(
                  F.array(*[F.lit(t) for t in ("view", "click", "cart", "purchase")]),
                  (F.col("r") * 4).cast("int") + 1))
              .withColumn("hour", (F.rand(day_seed + 1) * 24).cast("int"))
              .withColumn("amount_cents", (F.rand(day_seed + 2) * 10_000).cast("long")))
    daily = (events.groupBy("event_type", "hour")
             .agg(F.count("*").alias("events"), F.sum("amount_cents").alias("amount_cents"))
             .withColumn("day", F.lit(txn.epoch))
             .orderBy("event_type", "hour")
             .coalesce(2))
    if group is not None:
        return write_group(spark, group, daily, args)
    # A table target (Iceberg, Delta) infers each file's partition from a string column
    # "epoch" in the file; a folder target's epoch is its folder name (unchanged here).
    daily = txn.with_epoch_column(daily)

    if args.fail_on_try and args.fail_on_try == args.try_number:
        # Leave half-written output in staging, then die: it must never be published.
        daily.limit(10).write.mode("overwrite").parquet(txn.output_uri + "/_partial_attempt")
        daily.limit(10).write.mode("append").parquet(txn.output_uri)
        print(f"injected failure on try {args.try_number} of {txn.txn_id}", file=sys.stderr)
        return 3

    if not txn.spark_native:
        # S3 or Azure: pyspark ships no hadoop-aws / hadoop-azure, so Spark's own writer
        # cannot reach the store; the tpc Python data source writes it (fsspec).
        write_tpc(daily, txn, precommit=not args.no_precommit)
    else:
        daily.write.mode("overwrite").parquet(txn.output_uri)
        if not args.no_precommit:
            txn.precommit()
    print(f"wrote {daily.count()} aggregate rows for {txn.txn_id}"
          f"{' (NOT pre-committed)' if args.no_precommit else ''}")
    spark.stop()
    return 0


def write_group(spark: SparkSession, group: JobGroup, daily: DataFrame,
                args: argparse.Namespace) -> int:
    """Write the aggregates into every member of the group, then seal them all: the
    commit task publishes every member or none."""
    daily = daily.cache()
    for k, name in enumerate(group.names):
        member = group.member(name)
        out = member.with_epoch_column(daily)
        if args.fail_on_try and args.fail_on_try == args.try_number and k == 1:
            # One member written, the next half-written, then die: neither is published.
            out.limit(10).write.mode("append").parquet(member.output_uri)
            print(f"injected failure on try {args.try_number} of {group.txn_id}",
                  file=sys.stderr)
            return 3
        if not member.spark_native:
            write_tpc(out, member, precommit=False)
        else:
            out.write.mode("overwrite").parquet(member.output_uri)
    if not args.no_precommit:
        group.precommit()
    print(f"wrote {daily.count()} aggregate rows into {', '.join(group.names)} for "
          f"{group.txn_id}{' (NOT pre-committed)' if args.no_precommit else ''}")
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
