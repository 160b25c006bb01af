"""What exactly-once costs a Spark job: plain write vs staged, sealed and committed writes.

    .venv/bin/python bench/bench_spark.py [--rows 1000000 5000000] [--files 2 200] [--reps 7]
        [--master local[2]] [--results bench/results/spark.json] [--output docs/bench-spark.md]

For each case (rows x output files), in one Spark session, after one warm-up of each
variant, repeated and interleaved (the order rotates every repetition). A case writes the
same DataFrame, built with ``files`` partitions (``spark.range(0, rows, 1, files)``: one
task and one Parquet file per partition, no shuffle), in every variant:

- plain:          ``df.write.parquet(<final dir>)``, no guarantee at all;
- native-eo:      begin, ``df.write.parquet(txn.output_uri)`` into staging,
                  ``txn.precommit()``, ``sink.commit()`` (default settings);
- native-eo-size: the same with ``SinkConfig(verify="size")``;
- tpc-source:     begin, ``write_tpc`` (fsspec Parquet from executors, checksums while
                  writing), ``sink.commit()``.

2 files is few large files (per-file costs vanish); 200 files is what a job writes after
a shuffle with Spark's default ``spark.sql.shuffle.partitions``. Results go to
``bench/results/spark.json``; ``bench/report.py`` writes docs/bench-spark.md.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ["PYTHONPATH"] = os.pathsep.join(  # an export on PYTHONPATH wins over the checkout
    [*[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p], str(REPO)])
sys.path.insert(0, str(REPO / "bench"))
import harness as h  # noqa: E402
import report  # noqa: E402

from airflow_tpc import Sink, SinkConfig  # noqa: E402
from airflow_tpc.spark import JobTransaction, build_payload, write_tpc  # noqa: E402

VARIANTS = ("plain", "native-eo", "native-eo-size", "tpc-source")
Case = tuple[int, int]  # (rows, output files)
SIZES: dict[str, int] = {}  # variant -> bytes of the last sealed write
NFILES: dict[str, int] = {}  # variant -> data files of the last write
LOADS: dict[Case, tuple[float, float]] = {}
BYTES: dict[Case, int] = {}
WRITTEN: dict[Case, dict[str, int]] = {}


def make_df(spark, rows: int, files: int):
    """A typical fact table: ids, a low-cardinality key, numbers and a string.

    Built with ``files`` partitions, so every variant's write runs ``files`` tasks
    and writes ``files`` Parquet files; no shuffle (a ``repartition`` would add its
    own cost to every variant's write and dilute the protocol's share of it).
    """
    return spark.range(0, rows, 1, files).selectExpr(
        "id", "cast(id % 97 as int) as store", "rand(7) * 1000 as amount",
        "concat('customer-', cast(id % 100003 as string)) as customer",
        "timestamp_seconds(1700000000 + id) as ts")


def runner(spark, df, work: Path, variant: str, counter: list[int]
           ) -> Callable[[], dict[str, float]]:
    """One write of ``variant``; returns its phase times (``write`` is Spark's part)."""
    def run() -> dict[str, float]:
        counter[0] += 1
        n = counter[0]
        t0 = time.perf_counter()
        if variant == "plain":
            out = work / f"plain-{n}"
            df.write.parquet(str(out))
            t1 = time.perf_counter()
            NFILES[variant] = sum(1 for _ in out.glob("*.parquet"))
            shutil.rmtree(out, ignore_errors=True)  # 200-file cases would pile up otherwise
            return {"write": t1 - t0}
        config = SinkConfig(verify="size") if variant == "native-eo-size" else None
        sink = Sink(str(work / f"{variant}-target"), "bench", config=config)
        txn = JobTransaction.from_payload(build_payload(sink.begin(str(n))))
        t1 = time.perf_counter()
        if variant == "tpc-source":
            write_tpc(df, txn, precommit=False)
        else:
            df.write.parquet(txn.output_uri)
        t2 = time.perf_counter()
        manifest = txn.precommit()
        t3 = time.perf_counter()
        SIZES[variant] = manifest.total_bytes
        NFILES[variant] = sum(1 for f in manifest.files if f.path.endswith(".parquet"))
        sink.commit(txn.txn)
        t4 = time.perf_counter()
        return {"begin": t1 - t0, "write": t2 - t1, "precommit": t3 - t2, "commit": t4 - t3}
    return run


def bench(spark, case: Case, reps: int, work: Path, warmup: bool = True
          ) -> dict[str, list[dict[str, float]]]:
    rows, files = case
    df = make_df(spark, rows, files)
    NFILES.clear()
    counter = [0]
    load_before = os.getloadavg()[0]
    runs = {v: runner(spark, df, work, v, counter) for v in VARIANTS}
    times: dict[str, list[dict[str, float]]] = {v: [] for v in VARIANTS}
    for v in VARIANTS if warmup else ():  # warm-up: JIT, Python workers, imports
        runs[v]()
    for rep in range(reps):  # the order rotates: each variant goes first in turn
        k = rep % len(VARIANTS)
        for v in VARIANTS[k:] + VARIANTS[:k]:
            times[v].append(runs[v]())
    LOADS[case] = (load_before, os.getloadavg()[0])
    BYTES[case] = SIZES.get("native-eo", 0)
    WRITTEN[case] = dict(NFILES)
    return times


def total(phases: dict[str, float]) -> float:
    return sum(phases.values())


def overhead(phases: dict[str, float]) -> float:
    """What the protocol adds around Spark's write: begin + precommit + commit."""
    return total(phases) - phases["write"]


def summary(times: dict[str, list[dict[str, float]]]) -> dict[str, dict[str, float]]:
    base = statistics.median(total(p) for p in times["plain"])
    out: dict[str, dict[str, float]] = {}
    for v in VARIANTS:
        med = statistics.median(total(p) for p in times[v])
        ovh = statistics.median(overhead(p) for p in times[v])
        paired = statistics.median(total(p) / total(q) for p, q in zip(times[v], times["plain"],
                                                                        strict=True))
        # The protocol's share of each repetition's own plain write: its spread says
        # whether this machine's noise can resolve a few per cent either way.
        shares = [100 * overhead(p) / total(q) for p, q in zip(times[v], times["plain"],
                                                                strict=True)]
        out[v] = {"overhead_paired_pct": statistics.median(shares),
                  "overhead_pct_min": min(shares), "overhead_pct_max": max(shares),
                  "median": med, "min": min(total(p) for p in times[v]), "paired": paired,
                  "max": max(total(p) for p in times[v]), "ratio": med / base,
                  "overhead": ovh, "overhead_pct": 100 * ovh / base,
                  "precommit": statistics.median(p.get("precommit", 0.0) for p in times[v]),
                  "precommit_pct": 100 * statistics.median(
                      p.get("precommit", 0.0) for p in times[v]) / base,
                  "commit": statistics.median(p.get("commit", 0.0) for p in times[v])}
    return out


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    h.add_common_args(ap, "spark.json")
    ap.add_argument("--rows", type=int, nargs="+", default=None,
                    help="default 1000000 5000000; quick 1000000; smoke 2000")
    ap.add_argument("--files", type=int, nargs="+", default=None,
                    help="output files per write, one case each (default 2 200; quick 2)")
    ap.add_argument("--master", default=None, help="default local[2]; smoke local[1]")
    ap.add_argument("--workdir", default=None)
    args = ap.parse_args(argv)
    rows = args.rows or ([2000] if args.smoke else [1_000_000] if args.quick
                         else [1_000_000, 5_000_000])
    files = args.files or ([2] if args.smoke or args.quick else [2, 200])
    reps = args.reps or (1 if args.smoke else 3 if args.quick else 7)
    master = args.master or ("local[1]" if args.smoke else "local[2]")
    data = h.run_info("bench/bench_spark.py " + " ".join(argv), h.mode(args))
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master(master).appName("bench-spark")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.memory", "4g").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    import pyarrow
    import pyspark

    data.update(master=master, reps=reps, versions=f"PySpark {pyspark.__version__}, "
                f"pyarrow {pyarrow.__version__}", verify_default=SinkConfig().verify, cases=[])
    work = Path(args.workdir or tempfile.mkdtemp(prefix="bench-spark-"))
    try:
        for case in [(r, f) for r in rows for f in files]:
            times = bench(spark, case, reps, work / f"{case[0]}x{case[1]}", not args.smoke)
            st = summary(times)
            h.log(f"  {case[0]:,} rows x {case[1]} files: " + ", ".join(
                f"{v} {x['median']:.2f} s (overhead {x['overhead_pct']:.1f} %)"
                for v, x in st.items()))
            plain = [total(p) for p in times["plain"]]
            data["cases"].append({"rows": case[0], "files": case[1], "times": times,
                                  "summary": st, "load": list(LOADS[case]),
                                  "bytes": BYTES[case], "written": WRITTEN[case],
                                  "plain_spread": max(plain) / min(plain)})
            shutil.rmtree(work / f"{case[0]}x{case[1]}", ignore_errors=True)
    finally:
        spark.stop()
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)
    h.save(data, args.results)
    report.publish("spark", data, args.output)
    return 0


if __name__ == "__main__":
    h.on_sigterm()
    raise SystemExit(main())
