"""What exactly-once costs a Spark job: plain write vs staged+sealed+committed writes.

    python bench/bench_spark.py --rows 1000000 5000000 --files 2 200

For each case (row count x output files), in one Spark session (local[2]),
repeated and interleaved (the order rotates every repetition) so drift hits
every variant alike. A case writes the same DataFrame, built with ``--files``
partitions (``spark.range(0, rows, 1, files)``: one task and one Parquet file
per partition, no shuffle), in every variant:

- plain:        ``df.write.parquet(<final dir>)`` — no guarantee at all;
- native-eo:    begin, ``df.write.parquet(txn.output_uri)`` into staging,
                ``txn.precommit()``, ``sink.commit()`` (default settings);
- native-eo-size: the same with ``SinkConfig(verify="size")`` (commit trusts sizes);
- tpc-source:   begin, ``write_tpc`` (fsspec Parquet from executors, MD5 while
                writing, pre-commit in ``commit()``), ``sink.commit()``.

2 files is the write of earlier runs (``local[2]``'s two tasks); 200 files is
what a job after a shuffle writes with Spark's default ``spark.sql.shuffle.partitions``,
where the protocol's per-file costs (listing, fingerprints, records) show.

Medians of ``--reps`` runs (after one warm-up of each) and ratios to plain are
printed and written to ``docs/bench-spark.md``, with a plot in ``docs/img/``; every
timing is saved in ``bench/results/spark.json`` and the summary at the top of
``docs/benchmarks.md`` is refreshed from it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
for _p in reversed([p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]):
    sys.path.insert(0, _p)  # an export of airflow_tpc on PYTHONPATH wins over the checkout
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ["PYTHONPATH"] = os.pathsep.join(  # an export on PYTHONPATH wins over the checkout
    [*[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p], str(REPO)])

sys.path.insert(0, str(REPO / "bench"))
import plotting  # noqa: E402  (bench/plotting.py)
import summary as bench_summary  # noqa: E402  (bench/summary.py)

from airflow_tpc import Sink, SinkConfig  # noqa: E402
from airflow_tpc.spark import JobTransaction, build_payload, write_tpc  # noqa: E402

VARIANTS = ("plain", "native-eo", "native-eo-size", "tpc-source")
#: A ratio to the plain write within this of 1 is reported as parity.
PARITY = 0.05
#: Output files per write when ``--files`` is not given: today's 2 and a many-files case.
DEFAULT_FILES = (2, 200)
Case = tuple[int, int]  # (rows, output files)
SIZES: dict[str, int] = {}  # variant -> bytes of the last sealed write (for the report)
NFILES: dict[str, int] = {}  # variant -> data files of the last write (checks --files)
LOADS: dict[Case, tuple[float, float]] = {}  # case -> 1-min load average before, after
BYTES: dict[Case, int] = {}  # case -> bytes of Parquet one write produces
WRITTEN: dict[Case, dict[str, int]] = {}  # case -> variant -> data files one write produced
COMMIT = ["unknown"]  # the commit measured: HEAD when the run began (airflow_tpc is imported then)


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


def bench(spark, case: Case, reps: int, work: Path) -> dict[str, list[dict[str, float]]]:
    rows, files = case
    df = make_df(spark, rows, files)
    NFILES.clear()
    counter = [0]
    load_before = os.getloadavg()[0]
    runs = {v: runner(spark, df, work, v, counter) for v in VARIANTS}
    times: dict[str, list[dict[str, float]]] = {v: [] for v in VARIANTS}
    for v in VARIANTS:  # warm-up: JIT, Python workers, imports
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


def git_commit() -> str:
    """HEAD, and whether the measured package had uncommitted changes."""
    try:
        head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--",
                                "airflow_tpc"], capture_output=True, text=True,
                               check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    import airflow_tpc

    where = Path(airflow_tpc.__file__).resolve().parent
    if not where.is_relative_to(REPO):  # an export of a commit, see bench_core.code_origin
        return f"{head} ({os.environ.get('TPC_BENCH_CODE') or 'airflow_tpc from ' + str(where)})"
    return head + (" + uncommitted changes in airflow_tpc/" if dirty else "")


def command_line(args: argparse.Namespace) -> str:
    cmd = f".venv/bin/python bench/bench_spark.py --rows {' '.join(str(r) for r in args.rows)}"
    if tuple(args.files) != DEFAULT_FILES:
        cmd += f" --files {' '.join(str(f) for f in args.files)}"
    if args.reps != 7:
        cmd += f" --reps {args.reps}"
    if args.master != "local[2]":
        cmd += f" --master '{args.master}'"
    return cmd


def label(case: Case) -> str:
    rows, files = case
    return f"{rows:,} | {files:,}"


def results_dict(args: argparse.Namespace, results: dict[Case, dict[str, list[dict[str, float]]]],
                 date: str, elapsed: float, load_start: float) -> dict:
    """Everything measured, as saved in bench/results/spark.json (plot and summary use it).

    Schema 2: one entry per (rows, files) case in ``cases``; schema 1 had one per row
    count (2 files each) under ``rows`` and ``summary``.
    """
    return {
        "schema": 2, "command": command_line(args), "reps": args.reps, "master": args.master,
        "elapsed_s": elapsed, "load_start": round(load_start, 2),
        "load_end": round(os.getloadavg()[0], 2),
        "info": {"Date": date, "airflow-tpc commit": COMMIT[0], "cores": os.cpu_count()},
        "cases": [{"rows": rows, "files": files, "times": t,
                   "load": list(LOADS.get((rows, files), ())),
                   "bytes": BYTES.get((rows, files), 0),
                   "written": WRITTEN.get((rows, files), {}),
                   "summary": summary(t),
                   "plain_spread": max(total(p) for p in t["plain"])
                   / min(total(p) for p in t["plain"])}
                  for (rows, files), t in results.items()],
    }


def report(results: dict[Case, dict[str, list[dict[str, float]]]], reps: int,
           master: str, command: str = "", date: str = "", elapsed: float = 0.0,
           plot: str | None = None, plot_skipped: str | None = None) -> str:
    import pyarrow
    import pyspark

    files = sorted({f for _, f in results})
    lines = [
        "# Spark write benchmark: the cost of exactly-once",
        "",
        f"Generated by `{command}` (run by `scripts/bench.sh`; do not edit by hand) on "
        f"{date}, {elapsed:.0f} s wall, airflow-tpc commit {COMMIT[0]} (at the start)."
        f" Machine: {os.cpu_count()} CPUs, {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}, PySpark {pyspark.__version__}, "
        f"pyarrow {pyarrow.__version__}; master `{master}`; local disk (ext4). "
        "Headline figures and the verdict against issue 10's goal 4 (whole protocol "
        "≤ 3 % of the plain write, with few and with many files): the Summary of "
        "[benchmarks.md](benchmarks.md).",
        "",
        f"Median of {reps} interleaved repetitions after one warm-up of each variant; "
        "ratio = median / median of the plain write. *Protocol overhead* = begin + "
        "pre-commit + commit, timed around the Spark write in the same run: what "
        "exactly-once adds end to end. *Job-side overhead* = `txn.precommit()` only: under "
        "Airflow, begin runs in the submit task and commit in the commit task, so this is "
        "all the Spark job itself pays. Both are far less sensitive than end-to-end ratios "
        "to other load on the machine. *Paired ratio* = median over repetitions of "
        "(this variant's run / the plain run of the same repetition), which cancels slow "
        "drifts in load; the order of the variants rotates every repetition (each goes "
        "first in turn), so none always runs right after another. *Per repetition* = the "
        "protocol overhead of each repetition in % of that repetition's plain write "
        "(min–max over repetitions): where it straddles a target, this machine's noise "
        "cannot resolve the target. A ratio within 5 % of 1 is parity with the plain write. "
        "Rows: id, int key, double, string, timestamp; Parquet/snappy. *Files*: the "
        "DataFrame is built with that many partitions (`spark.range(0, rows, 1, files)`, "
        "no shuffle), so every variant's write runs that many tasks and writes that many "
        f"Parquet files ({', '.join(str(f) for f in files)} per write here); 2 files are "
        "the writes of earlier runs, 200 files what a job writes after a shuffle with "
        "Spark's default `spark.sql.shuffle.partitions`, where per-file costs show.",
        "",
        "| rows | files | variant | median s | min s | max s | ratio to plain (medians) "
        "| paired ratio | protocol overhead s | / plain | per repetition | "
        "job-side overhead s | / plain |",
        "| ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
        "| ---: |",
    ]
    for case, times in results.items():
        for v, st in summary(times).items():
            ratio, pair = f"{st['ratio']:.3f}", f"{st['paired']:.3f}"
            if v == "plain":
                ratio, pair = "1 (baseline)", "1 (baseline)"
                extra = "— | — | — | — | —"
            else:
                ratio += " (parity)" if abs(st["ratio"] - 1) <= PARITY else ""
                pair += " (parity)" if abs(st["paired"] - 1) <= PARITY else ""
                extra = (f"{st['overhead']:.3f} | {st['overhead_pct']:.1f} % | "
                         f"{st['overhead_pct_min']:.1f}–{st['overhead_pct_max']:.1f} % | "
                         f"{st['precommit']:.3f} | {st['precommit_pct']:.1f} %")
            lines.append(f"| {label(case)} | {v} | {st['median']:.2f} | {st['min']:.2f} | "
                         f"{st['max']:.2f} | {ratio} | {pair} | {extra} |")
    lines += ["", "Median time of each phase (s; *write* is Spark's part, the rest the "
              "protocol's):", "",
              "| rows | files | variant | begin | write | pre-commit | commit |",
              "| ---: | ---: | --- | ---: | ---: | ---: | ---: |"]
    for case, times in results.items():
        for v, runs in times.items():
            cells = [f"{statistics.median(p[k] for p in runs):.3f}" if k in runs[0] else "—"
                     for k in ("begin", "write", "precommit", "commit")]
            lines.append(f"| {label(case)} | {v} | " + " | ".join(cells) + " |")
    lines += [""]
    if plot:
        lines += [f"![Seconds per write for each variant and case (median, min–max); "
                  f"protocol and job-side overhead in % of the plain write]({plot})", ""]
    elif plot_skipped:
        lines += [f"*(Plot skipped: {plot_skipped})*", ""]
    lines += ["Conditions of this run (a shared 2-CPU machine):", ""]
    for case, times in results.items():
        rows, nfiles = case
        plain = [total(p) for p in times["plain"]]
        before, after = LOADS.get(case, (float("nan"), float("nan")))
        size = BYTES.get(case, 0)
        written = WRITTEN.get(case, {})
        counts = sorted(set(written.values()))
        check = (f"every variant wrote {counts[0]:,} Parquet files" if len(counts) == 1 else
                 "Parquet files per variant: " + ", ".join(f"{v} {n:,}"
                                                           for v, n in written.items()))
        lines.append(f"- {rows:,} rows, {nfiles:,} files: {size / 1e6:.0f} MB of Parquet per "
                     f"write ({check}); 1-minute load average {before:.1f} before, "
                     f"{after:.1f} after; identical plain writes took "
                     f"{min(plain):.2f}-{max(plain):.2f} s "
                     f"({max(plain) / min(plain):.1f}x spread). End-to-end ratios move with "
                     "that noise; the overhead columns are timed directly and move less.")
    lines += [
        "",
        "Variants:",
        "",
        "- **plain** — `df.write.parquet(final_dir)`: no isolation, no exactly-once.",
        "- **native-eo** — begin + native write into staging + `txn.precommit()` (hashes the "
        "files on threads) + `sink.commit()` with default settings (verify=\"" +
        str(getattr(SinkConfig(), "verify", "?")) + "\"; then one directory swap).",
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
    ap.add_argument("--files", type=int, nargs="+", default=list(DEFAULT_FILES),
                    help="output files per write, one case per value and row count "
                    "(default: 2 200)")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--out", default=str(REPO / "docs" / "bench-spark.md"))
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--results", default=str(REPO / "bench" / "results" / "spark.json"),
                    help="JSON of every timing (default: bench/results/spark.json)")
    ap.add_argument("--no-plots", action="store_true", help="tables only")
    args = ap.parse_args(argv)
    started = time.perf_counter()
    load_start = os.getloadavg()[0]
    COMMIT[0] = git_commit()

    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master(args.master).appName("bench-spark")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.memory", "4g").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    work = Path(args.workdir or tempfile.mkdtemp(prefix="bench-spark-"))
    results: dict[Case, dict[str, list[dict[str, float]]]] = {}
    try:
        for case in [(rows, files) for rows in args.rows for files in args.files]:
            case_dir = work / f"{case[0]}x{case[1]}"
            case_started = time.perf_counter()
            results[case] = bench(spark, case, args.reps, case_dir)
            for v, st in summary(results[case]).items():
                runs = " ".join(f"{total(p):.2f}" for p in results[case][v])
                print(f"{case[0]:>10,} {case[1]:>4} files {v:<15} median {st['median']:6.2f} s"
                      f"  ratio {st['ratio']:.3f}  paired {st['paired']:.3f}  "
                      f"overhead {st['overhead']:.3f} s "
                      f"({st['overhead_pct']:.1f} %, per rep "
                      f"{st['overhead_pct_min']:.1f}-{st['overhead_pct_max']:.1f} %)  "
                      f"precommit {st['precommit']:.3f} s "
                      f"({st['precommit_pct']:.1f} %)  runs {runs}", flush=True)
            print(f"  ({time.perf_counter() - case_started:.0f} s; files written: "
                  f"{WRITTEN.get(case)}; load {LOADS.get(case)})", flush=True)
            shutil.rmtree(case_dir, ignore_errors=True)
    finally:
        spark.stop()
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)
    date = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    elapsed = time.perf_counter() - started
    data = results_dict(args, results, date, elapsed, load_start)
    out = Path(args.out)
    Path(args.results).parent.mkdir(parents=True, exist_ok=True)
    Path(args.results).write_text(json.dumps(data, indent=1) + "\n")
    print(f"\nresults saved to {args.results}")
    skipped = "--no-plots" if args.no_plots else plotting.unavailable()
    plot = None
    if skipped:
        print(f"plot skipped: {skipped}")
    else:
        drawn = plotting.plot_spark(data, out.parent / "img")
        plot = os.path.relpath(drawn["spark"], out.parent) if "spark" in drawn else None
        print(f"plot: {drawn.get('spark')}")
    text = report(results, args.reps, args.master, data["command"], date, elapsed, plot,
                  skipped)
    out.write_text(text)
    print(f"wrote {args.out}")
    if out.resolve() == (REPO / "docs" / "bench-spark.md").resolve() and \
            bench_summary.update(spark=data):
        print(f"updated the summary of {bench_summary.BENCHMARKS_MD}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
