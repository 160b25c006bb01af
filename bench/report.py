"""The documents of the benchmarks, written from their results JSON and nothing else.

``docs/benchmarks.md`` (the Summary with every goal, then the transaction core and S3)
from ``bench/results/{core,s3,spark}.json``, and ``docs/bench-spark.md`` from
``spark.json``. Each benchmark calls :func:`publish` when it ends; run alone, this
rewrites both documents from the saved results::

    .venv/bin/python bench/report.py

Every ratio divides two timings of the same run: the median over repetitions of the
per-repetition ratio (*paired*; the variants are interleaved, order rotating). A ratio
within 5 % of 1 is *parity*.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from harness import RESULTS, ROOT, SCHEMA, fmt_b, fmt_s, fmt_x, median, paired, table, verdict
from report_stores import azure_goal_rows, azure_section, s3_goal_rows, s3_section

DOCS = ROOT / "docs"
KINDS = ("core", "s3", "azure", "spark")
MB = 1_000_000


def load(kind: str) -> dict[str, Any] | None:
    path = RESULTS / f"{kind}.json"
    data = json.loads(path.read_text()) if path.exists() else None
    return data if data and data.get("schema") == SCHEMA else None


def run_line(label: str, d: dict[str, Any]) -> str:
    busy = " (busy: absolute times inflated, ratios the figures to read)" \
        if max(d["load_start"], d["load_end"]) > d["cores"] else ""
    stopped = "; stopped before its end: each case shows the repetitions it completed" \
        if d.get("partial") else ""
    return (f"- {label}: `{d['command'].strip()}` ({d['mode']} mode{stopped}) on {d['date']}, "
            f"{d['elapsed_s'] / 60:.0f} min, code {d['code']}; 1-minute load "
            f"{d['load_start']:.1f} at start, {d['load_end']:.1f} at end on {d['cores']} "
            f"cores{busy}.")


# ------------------------------------------------------------------ figures
def local_ratio(r: dict[str, Any], den: str, num: str = "tpc") -> float:
    t = r["times"]
    return paired(t[num], t[den]) if num in t and den in t else float("nan")


def rss_mb(m: dict[str, Any], key: str) -> float:
    return m["commit"][key] / MB


# ------------------------------------------------------------------ summary
def goals(core: dict[str, Any] | None, s3: dict[str, Any] | None,
          spark: dict[str, Any] | None, azure: dict[str, Any] | None = None) -> list[str]:
    rows: list[list[str]] = []
    local = (core or {}).get("local", [])
    big = [r for r in local if r["n"] >= 10_000]
    full = any(r["n"] >= 100_000 for r in big)
    gap = "" if full else " (100k not run in this mode)"
    if big:
        fl = [(r["n"], local_ratio(r, "floor")) for r in big]
        rows.append(["21. local commit vs its floor (one scandir + stat pass)",
                     "≤ 1.5x at 10k and 100k files, default settings",
                     "; ".join(f"{fmt_x(x)} at {n:,} (v1: {fmt_x(local_ratio(r, 'v1'))})"
                               for (n, x), r in zip(fl, big, strict=True)) + gap,
                     verdict(all(x <= 1.5 for _, x in fl) if full else None)])
    mem = [m for m in (core or {}).get("memory", []) if "commit" in m]
    if mem:
        m = mem[-1]
        c = m["commit"]
        heap = f"{c['heap_peak'] / MB:.0f} MB" if "heap_peak" in c else "not measured"
        rows.append(["21. memory of a 100k-file commit", "peak ≤ 100 MB (judged: what the "
                     "commit adds to the process's resident set)",
                     f"+{rss_mb(m, 'added'):.0f} MB resident at {m['n']:,} files (process "
                     f"{rss_mb(m, 'rss_base'):.0f} MB before, {rss_mb(m, 'rss_peak'):.0f} MB "
                     f"peak; Python heap peak {heap})",
                     verdict(rss_mb(m, "added") <= 100 if m["n"] >= 100_000 else None)])
    hist = (core or {}).get("history", [])
    if hist:
        e = core["history_target"]["epochs"] if core else 0
        vals = [(x["n"], paired(x["history"], x["fresh"])) for x in hist]
        rows.append(["10/21. flat in history", "≤ 1.2x with 500 past epochs (keep ~1x)",
                     ", ".join(f"{fmt_x(v)} at {n:,} files" for n, v in vals)
                     + f" ({e} epochs)", verdict(all(v <= 1.2 for _, v in vals)
                                                 if e >= 500 else None)])
    if big and "v1" in big[0]["times"]:
        vals = [(r["n"], local_ratio(r, "v1")) for r in big]
        rows.append(["10. local commit vs Hadoop v1 `commitJob`", "≤ 0.05x at 10k and 100k",
                     ", ".join(f"{fmt_x(v)} at {n:,}" for n, v in vals) + gap,
                     verdict(all(v <= 0.05 for _, v in vals) if full else None)])
    if mem:
        d = max(m["decision_bytes"] for m in mem)
        rows.append(["10. O(1) decision record", "< 4 KB at any file count",
                     f"≤ {d:,} B ({mem[0]['n']:,}–{mem[-1]['n']:,} files)",
                     verdict(0 <= d < 4000)])
    for c in (spark or {}).get("cases", []):
        st = c["summary"]["native-eo"]
        rows.append([f"10. protocol vs plain Spark write, {c['rows']:,} rows × {c['files']} "
                     "files", "≤ 3 %", f"{st['overhead_pct']:.1f} % (per rep "
                     f"{st['overhead_pct_min']:.1f}–{st['overhead_pct_max']:.1f} %)",
                     verdict(st["overhead_pct"] <= 3)])
    rows += s3_goal_rows(s3) + azure_goal_rows(azure)
    return ["### Goals", "", *table(["issue / goal", "target", "measured (paired medians)",
                                     "verdict"], rows)]


def summary(core: dict[str, Any] | None, s3: dict[str, Any] | None,
            spark: dict[str, Any] | None, azure: dict[str, Any] | None = None) -> list[str]:
    out = ["## Summary", "", "Runs (each ratio below divides two timings of one run):", ""]
    for label, d in (("Core", core), ("S3", s3), ("Azure", azure), ("Spark", spark)):
        out.append(run_line(label, d) if d else f"- {label}: no results yet.")
    out += ["", *goals(core, s3, spark, azure)]
    return out


# ------------------------------------------------------------------ sections
def core_sections(core: dict[str, Any]) -> list[str]:
    out: list[str] = []
    local = core.get("local", [])
    if local:
        tpc = [v for v in local[0]["times"] if v.startswith("tpc")]
        out += ["## 1. Local commit vs its floor and vs Hadoop's FileOutputCommitter", "",
                "One epoch of N small files (1-4 KiB) on the local disk; per repetition, "
                "interleaved, order rotating: **floor** = one `os.scandir` + `DirEntry.stat` "
                "pass over the staged files (the floor of any commit that checks each file); "
                "**tpc** = `sink.commit(txn, expected_digest=…)` alone, as CommitOperator calls "
                "it with the digest its sensor validated (begin, staging and precommit done "
                "untimed; the commit walks staging once for the status digest pre-commit "
                "sealed, docs/PROTOCOL.md §3.3) on a target that committed one epoch before "
                "(as from a target's second epoch on), default settings" +
                (", each other `verify` mode, and the default on a fresh target (`tpc first "
                 "commit`: it also makes the target's lock file, pending index and ledger "
                 "folders)" if len(tpc) > 1 else "") +
                f"; **v1** = Hadoop {core.get('hadoop', '?')}'s real `FileOutputCommitter` "
                "`commitJob` of algorithm 1 (Spark's default), from pyspark's jars through "
                "py4j, on the same files (`commitTask` done untimed; its files have no `.crc` "
                "side files, which favours v1); **v2** = `commitTask` + `commitJob` of "
                "algorithm 2 (not atomic), for reference. Files are moved between runs with "
                "one directory rename and flushed with `sync` before anything is timed. "
                "Ratios: paired medians.", ""]
        rows = []
        for r in local:
            t = r["times"]
            row = [f"{r['n']:,}", str(r["reps"]), fmt_s(median(t["floor"])),
                   fmt_s(median(t["tpc"])), fmt_x(local_ratio(r, "floor")),
                   fmt_s(median(t.get("v1", []))), fmt_x(local_ratio(r, "v1")),
                   fmt_s(median(t.get("v2", []))) if "v2" in t else "not run"]
            row += [f"{fmt_s(median(t[v]))} ({fmt_x(local_ratio(r, 'floor', v))} floor)"
                    for v in tpc[1:]]
            rows.append(row)
        out += table(["files", "reps", "floor", "tpc commit", "**tpc / floor**", "v1 commitJob",
                      "**tpc / v1**", "v2", *tpc[1:]], rows)
        rows = [[f"{r['n']:,}", *(f"{median(r['times'][v]) / r['n'] * 1e6:,.2f} µs "
                                  f"({fmt_s(min(r['times'][v]))} – {fmt_s(max(r['times'][v]))})"
                                  for v in ("floor", "tpc", "v1") if v in r["times"])]
                for r in local]
        out += ["Per file (median / files), and the spread of the repetitions:", "",
                *table(["files", "floor", "tpc", "v1"][:len(rows[0])], rows)]
    prof = core.get("profile") or {}
    if prof.get("rows"):
        out += [f"### Where a local commit spends its time ({prof['n']:,} files)", "",
                "cProfile of one default `commit()`, top functions by own time (the "
                "profiler inflates times: compare shares).", ""]
        out += table(["function", "calls", "own", "cumulative"],
                     [[f"`{f}`", f"{c:,}", fmt_s(o), fmt_s(cu)] for f, c, o, cu in prof["rows"]])
    hist, ht = core.get("history", []), core.get("history_target", {})
    if hist:
        out += ["## 2. Flat in history", "",
                f"A target with {ht['epochs']} committed epochs ({ht['files_per_epoch']} files "
                f"each; {ht['aborted_after_precommit']} also with an attempt aborted after its "
                f"precommit, {ht['aborted_before_precommit']} before it; built in "
                f"{ht['build_s']} s) vs a fresh target and vs a target with one epoch (whose "
                "first commit made its lock file, pending index and ledger folders already): "
                "the same commit of a new epoch, "
                "interleaved. A commit lists only its own epoch's ledger and the pending "
                "index (docs/PROTOCOL.md §5.8).", ""]
        out += table(["files", "reps", "fresh", "one epoch", "with history",
                      "**history / fresh**", "history / one epoch"],
                     [[f"{x['n']:,}", str(x["reps"]), fmt_s(median(x["fresh"])),
                       fmt_s(median(x.get("one_epoch", []))), fmt_s(median(x["history"])),
                       fmt_x(paired(x["history"], x["fresh"])),
                       fmt_x(paired(x["history"], x["one_epoch"])) if "one_epoch" in x
                       else "not run"]
                      for x in hist])
    mem = [m for m in core.get("memory", []) if "commit" in m]
    if mem:
        out += ["## 3. Memory and record sizes (local store, default settings)", "",
                "**Commit memory**: the commit runs in a fresh child process (it imports "
                "only `airflow_tpc` and loads the pre-committed transaction); *process "
                "before* = its resident set (VmRSS) just before `commit()`, *peak* = the "
                f"resident high-water mark after it; method: {mem[-1]['commit']['method']}. "
                "The resident set, not tracemalloc, because the goal is the process's "
                "memory: it includes C allocations (the manifest's decode, buffers) that "
                "tracemalloc does not see, and what the allocator keeps. *commit heap* = "
                "tracemalloc peak of the same commit (of a second epoch of the same files, "
                "in another child: tracemalloc slows and inflates the process), Python "
                "allocations only; *precommit heap* = tracemalloc peak of `precommit()`. "
                "**XCom pointer** = "
                "`len(json.dumps(pointer))` of what `PrecommitSensor._pointer` returns for "
                "the pre-committed transaction, in a child that imports Airflow.", ""]
        rows = []
        for m in mem:
            c, x = m["commit"], m.get("xcom", {})
            rows.append([f"{m['n']:,}", fmt_b(m["staged_bytes"]), fmt_b(m["manifest_bytes"]),
                         f"{m['decision_bytes']:,} B", f"{m['marker_bytes']:,} B",
                         f"{x['json_bytes']:,} B" if "json_bytes" in x else
                         f"n/a ({x.get('error', 'not measured')[:60]})",
                         fmt_b(m["precommit_peak"]), f"{rss_mb(m, 'rss_base'):.0f} MB",
                         f"**+{rss_mb(m, 'added'):.1f} MB**", f"{rss_mb(m, 'rss_peak'):.0f} MB",
                         f"{c['heap_peak'] / MB:.1f} MB" if "heap_peak" in c else "n/a",
                         fmt_s(c["seconds"])])
        out += table(["files", "staged", "manifest", "decision record", "published marker",
                      "XCom pointer", "precommit heap", "process before commit",
                      "commit adds", "peak", "commit heap", "commit (child)"], rows)
    return out


def benchmarks_md(core: dict[str, Any] | None, s3: dict[str, Any] | None,
                  spark: dict[str, Any] | None, azure: dict[str, Any] | None = None) -> str:
    out = ["# Benchmarks", "",
           "Generated by `scripts/bench.sh` from `bench/results/*.json` (`bench/report.py`); "
           "do not edit by hand. The Spark end-to-end benchmark is in "
           "[bench-spark.md](bench-spark.md); how to run and read: `bench/README.md`.", "",
           *summary(core, s3, spark, azure), ""]
    out += core_sections(core) if core else []
    out += s3_section(s3) if s3 else []
    out += azure_section(azure) if azure else []
    return "\n".join(out).rstrip() + "\n"


def spark_md(d: dict[str, Any]) -> str:
    out = ["# Spark write benchmark: the cost of exactly-once", "",
           "Generated from `bench/results/spark.json` (`bench/report.py`; do not edit by "
           "hand).", "", run_line("Run", d), f"- {d['versions']}; master `{d['master']}`; "
           "local disk.", "",
           f"Median of {d['reps']} interleaved repetitions after one warm-up of each variant. "
           "*Protocol overhead* = begin + pre-commit + commit, timed directly around the "
           "Spark write; *job-side* = `txn.precommit()` alone (under Airflow, all the Spark "
           "job pays); both in % of the plain write's median. *Paired* = median over "
           "repetitions of (variant / the plain write of the same repetition); *per rep* = "
           "the protocol overhead of each repetition in % of that repetition's plain write "
           "(min–max: where it straddles a target, the machine's noise cannot resolve it). "
           "Variants: **plain** `df.write.parquet(final)`; **native-eo** begin, native "
           "write into staging, `txn.precommit()`, `sink.commit()` (verify=\""
           f"{d.get('verify_default', '?')}\"); **native-eo-size** the same with "
           "`verify=\"size\"`; **tpc-source** the `tpc` data source (checksums while "
           "writing). *files*: the DataFrame has that many partitions, no shuffle.", ""]
    rows, phases = [], []
    for c in d["cases"]:
        for v, st in c["summary"].items():
            head = [f"{c['rows']:,}", str(c["files"]), v]
            if v == "plain":
                rows.append([*head, f"{st['median']:.2f} s", "1 (baseline)", "—", "—", "—"])
            else:
                rows.append([*head, f"{st['median']:.2f} s", fmt_x(st["paired"]),
                             f"{st['overhead']:.3f} s = {st['overhead_pct']:.1f} %",
                             f"{st['overhead_pct_min']:.1f}–{st['overhead_pct_max']:.1f} %",
                             f"{st['precommit']:.3f} s = {st['precommit_pct']:.1f} %"])
            runs = c["times"][v]
            phases.append([*head, *(f"{median(p[k] for p in runs):.3f}" if k in runs[0]
                                    else "—" for k in ("begin", "write", "precommit",
                                                       "commit"))])
    out += table(["rows", "files", "variant", "median", "paired ratio", "protocol overhead",
                  "per rep", "job-side"], rows)
    out += ["Median seconds of each phase (*write* is Spark's):", "",
            *table(["rows", "files", "variant", "begin", "write", "pre-commit", "commit"],
                   phases), "Conditions:", ""]
    for c in d["cases"]:
        plain = [sum(p.values()) for p in c["times"]["plain"]]
        out.append(f"- {c['rows']:,} rows × {c['files']} files: {c['bytes'] / 1e6:.0f} MB of "
                   f"Parquet per write; files written {c['written']}; load "
                   f"{c['load'][0]:.1f} → {c['load'][1]:.1f}; identical plain writes "
                   f"{min(plain):.2f}–{max(plain):.2f} s ({c['plain_spread']:.1f}x spread).")
    return "\n".join(out) + "\n"


def publish(kind: str, data: dict[str, Any], output: str | None) -> None:
    """Write the document ``kind``'s results appear in; ``output`` '-' prints it, a path
    writes it there (the other results are read from bench/results, never written)."""
    results = {k: load(k) for k in KINDS}
    results[kind] = data
    doc = spark_md(data) if kind == "spark" else benchmarks_md(
        results["core"], results["s3"], results["spark"], results["azure"])
    if output == "-":
        print(doc)
        return
    path = Path(output) if output else DOCS / ("bench-spark.md" if kind == "spark"
                                               else "benchmarks.md")
    path.write_text(doc)
    print(f"wrote {path}", file=sys.stderr)
    if kind == "spark" and output is None:  # its figures are in the summary too
        (DOCS / "benchmarks.md").write_text(benchmarks_md(results["core"], results["s3"], data,
                                                          results["azure"]))


def main() -> int:
    r = {k: load(k) for k in KINDS}
    (DOCS / "benchmarks.md").write_text(benchmarks_md(r["core"], r["s3"], r["spark"],
                                                      r["azure"]))
    if r["spark"]:
        (DOCS / "bench-spark.md").write_text(spark_md(r["spark"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
