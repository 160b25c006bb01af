"""What exactly-once costs a Spark job: plain write vs staged+sealed+committed writes.

    python bench/bench_spark.py --rows 1000000 5000000

For each row count, in one Spark session (local[2]), repeated and interleaved
so drift hits every variant alike:

- plain:        ``df.write.parquet(<final dir>)`` — no guarantee at all;
- native-eo:    begin, ``df.write.parquet(txn.output_uri)`` into staging,
                ``txn.precommit()``, ``sink.commit()`` (default verify="checksum");
- native-eo-size: the same with ``SinkConfig(verify="size")`` (commit trusts sizes);
- tpc-source:   begin, ``write_tpc`` (fsspec Parquet from executors, MD5 while
                writing, pre-commit in ``commit()``), ``sink.commit()``.

Medians of ``--reps`` runs (after one warm-up of each) and ratios to plain are
printed and written to ``docs/bench-spark.md``.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ["PYTHONPATH"] = os.pathsep.join(
    [str(REPO), *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]])

from airflow_tpc import Sink, SinkConfig  # noqa: E402
from airflow_tpc.spark import JobTransaction, build_payload, write_tpc  # noqa: E402

VARIANTS = ("plain", "native-eo", "native-eo-size", "tpc-source")
SIZES: dict[str, int] = {}  # variant -> bytes of the last sealed write (for the report)
LOADS: dict[int, tuple[float, float]] = {}  # rows -> 1-min load average before, after
BYTES: dict[int, int] = {}  # rows -> bytes of Parquet one write produces


def make_df(spark, rows: int):
    """A typical fact table: ids, a low-cardinality key, numbers and a string."""
    return spark.range(rows).selectExpr(
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
            df.write.parquet(str(work / f"plain-{n}"))
            return {"write": time.perf_counter() - t0}
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
        sink.commit(txn.txn)
        t4 = time.perf_counter()
        return {"begin": t1 - t0, "write": t2 - t1, "precommit": t3 - t2, "commit": t4 - t3}
    return run


def bench(spark, rows: int, reps: int, work: Path) -> dict[str, list[dict[str, float]]]:
    df = make_df(spark, rows)
    counter = [0]
    load_before = os.getloadavg()[0]
    runs = {v: runner(spark, df, work, v, counter) for v in VARIANTS}
    times: dict[str, list[dict[str, float]]] = {v: [] for v in VARIANTS}
    for v in VARIANTS:  # warm-up: JIT, Python workers, imports
        runs[v]()
    for _ in range(reps):
        for v in VARIANTS:
            times[v].append(runs[v]())
    LOADS[rows] = (load_before, os.getloadavg()[0])
    BYTES[rows] = SIZES.get("native-eo", 0)
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
        out[v] = {"median": med, "min": min(total(p) for p in times[v]), "paired": paired,
                  "max": max(total(p) for p in times[v]), "ratio": med / base,
                  "overhead": ovh, "overhead_pct": 100 * ovh / base,
                  "precommit": statistics.median(p.get("precommit", 0.0) for p in times[v]),
                  "precommit_pct": 100 * statistics.median(
                      p.get("precommit", 0.0) for p in times[v]) / base,
                  "commit": statistics.median(p.get("commit", 0.0) for p in times[v])}
    return out


def report(results: dict[int, dict[str, list[dict[str, float]]]], reps: int,
           master: str) -> str:
    import pyarrow
    import pyspark

    lines = [
        "# Spark write benchmark: the cost of exactly-once",
        "",
        f"Generated by `python bench/bench_spark.py --rows "
        f"{' '.join(str(r) for r in results)}` on "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}."
        f" Machine: {os.cpu_count()} CPUs, {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}, PySpark {pyspark.__version__}, "
        f"pyarrow {pyarrow.__version__}; master `{master}`; local disk (ext4).",
        "",
        f"Median of {reps} interleaved repetitions after one warm-up of each variant; "
        "ratio = median / median of the plain write. *Protocol overhead* = begin + "
        "pre-commit + commit, timed around the Spark write in the same run: what "
        "exactly-once adds end to end. *Job-side overhead* = `txn.precommit()` only: under "
        "Airflow, begin runs in the submit task and commit in the commit task, so this is "
        "all the Spark job itself pays. Both are far less sensitive than end-to-end ratios "
        "to other load on the machine. *Paired ratio* = median over repetitions of "
        "(this variant's run / the plain run just before it), which cancels slow drifts "
        "in load. Rows: id, int key, double, string, timestamp; "
        "Parquet/snappy; 2 tasks (2 files per write).",
        "",
        "| rows | variant | median s | min s | max s | ratio to plain (medians) "
        "| paired ratio | protocol overhead s | / plain | job-side overhead s | / plain |",
        "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for rows, times in results.items():
        for v, st in summary(times).items():
            if v == "plain":
                extra = "— | — | — | —"
            else:
                extra = (f"{st['overhead']:.3f} | {st['overhead_pct']:.1f} % | "
                         f"{st['precommit']:.3f} | {st['precommit_pct']:.1f} %")
            lines.append(f"| {rows:,} | {v} | {st['median']:.2f} | {st['min']:.2f} | "
                         f"{st['max']:.2f} | {st['ratio']:.3f} | {st['paired']:.3f} | {extra} |")
    lines += ["", "Conditions of this run (a shared 2-CPU machine):", ""]
    for rows, times in results.items():
        plain = [total(p) for p in times["plain"]]
        before, after = LOADS.get(rows, (float("nan"), float("nan")))
        size = BYTES.get(rows, 0)
        lines.append(f"- {rows:,} rows: {size / 1e6:.0f} MB of Parquet per write; 1-minute "
                     f"load average {before:.1f} before, {after:.1f} after; identical plain "
                     f"writes took {min(plain):.2f}-{max(plain):.2f} s "
                     f"({max(plain) / min(plain):.1f}x spread). End-to-end ratios move with "
                     "that noise; the overhead columns are timed directly and do not.")
    lines += [
        "",
        "Variants:",
        "",
        "- **plain** — `df.write.parquet(final_dir)`: no isolation, no exactly-once.",
        "- **native-eo** — begin + native write into staging + `txn.precommit()` (hashes the "
        "files on threads) + `sink.commit()` (re-verifies checksums, then one directory swap).",
        "- **native-eo-size** — the same with `SinkConfig(verify=\"size\")`: the commit trusts "
        "the sizes recorded at pre-commit instead of re-hashing.",
        "- **tpc-source** — the `tpc` Python data source (fsspec Parquet from executors, "
        "hashed while writing: SHA-256 locally, MD5 on S3) + `txn.precommit()` (reuses those "
        "checksums) + `sink.commit()`.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[1_000_000, 5_000_000])
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--out", default=str(REPO / "docs" / "bench-spark.md"))
    ap.add_argument("--workdir", default=None)
    args = ap.parse_args(argv)

    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master(args.master).appName("bench-spark")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.memory", "4g").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    work = Path(args.workdir or tempfile.mkdtemp(prefix="bench-spark-"))
    results: dict[int, dict[str, list[dict[str, float]]]] = {}
    try:
        for rows in args.rows:
            results[rows] = bench(spark, rows, args.reps, work / str(rows))
            for v, st in summary(results[rows]).items():
                runs = " ".join(f"{total(p):.2f}" for p in results[rows][v])
                print(f"{rows:>10,} {v:<15} median {st['median']:6.2f} s  ratio "
                      f"{st['ratio']:.3f}  paired {st['paired']:.3f}  "
                      f"overhead {st['overhead']:.3f} s "
                      f"({st['overhead_pct']:.1f} %)  precommit {st['precommit']:.3f} s "
                      f"({st['precommit_pct']:.1f} %)  runs {runs}", flush=True)
            shutil.rmtree(work / str(rows), ignore_errors=True)
    finally:
        spark.stop()
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)
    text = report(results, args.reps, args.master)
    Path(args.out).write_text(text)
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
