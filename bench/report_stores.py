"""The object-store parts of docs/benchmarks.md: S3 (moto, SeaweedFS) and Azure (Azurite).

From ``bench/results/s3.json`` and ``bench/results/azure.json`` (``bench/bench_s3.py``):
their rows of the Summary's goal table and sections 4 and 5. Split from ``report.py``
to keep each module readable; ``report.py`` assembles the document.
"""

from __future__ import annotations

from typing import Any

from harness import FLOOR, SEQ, fmt_s, fmt_x, median, paired, table, verdict

#: The table and manifest modes whose requests per commit should not grow with the files.
FLAT_MODES = ("manifest", "iceberg", "delta")
#: "Flat": at most one more request per this many more files (list pages only).
FLAT_PER = 100


def s3_case(s3: dict[str, Any] | None, backend: str, n: int | None = None
            ) -> dict[str, Any] | None:
    cases = [c for c in (s3 or {}).get("cases", []) if c["backend"] == backend
             and (n is None or c["n"] == n)]
    return cases[-1] if cases else None


def commits(c: dict[str, Any], v: str) -> list[float]:
    return [r["commit"] for r in c["runs"].get(v, [])]


def reqs(runs: list[dict[str, Any]], key: str = "commit_requests") -> dict[str, int]:
    """The requests of the repetition whose total is the median one."""
    ordered = sorted((r[key] for r in runs), key=lambda d: sum(d.values()))
    return ordered[len(ordered) // 2] if ordered else {}


def req_total(d: dict[str, int]) -> str:
    cat = sum(v for k, v in d.items() if k.startswith("catalog"))
    s3 = sum(d.values()) - cat
    return f"{s3:,} + {cat:,} catalog" if cat else f"{s3:,}"


# ------------------------------------------------------------------ goal rows
def s3_goal_rows(s3: dict[str, Any] | None) -> list[list[str]]:
    rows: list[list[str]] = []
    for b in ("moto", "seaweedfs"):
        c = s3_case(s3, b, 1_000) or s3_case(s3, b)
        if c and SEQ in c["runs"]:
            x = paired(commits(c, SEQ), commits(c, "copy"))
            rows.append([f"10/21. S3 parallel vs sequential copies, {b}",
                         "≥ 8x at 1k files behind 50-100 ms",
                         f"{fmt_x(x)} at {c['n']:,} files",
                         verdict(x >= 8 if c["n"] >= 1_000 and s3 and
                                 s3["latency_ms"][1] >= 50 else None)])
    for b, fmt, issue, n in (("moto", "iceberg", "11", 10_000), ("moto", "delta", "11", 10_000),
                             ("seaweedfs", "iceberg", "18", 1_000),
                             ("seaweedfs", "iceberg", "18", 10_000)):  # issue 18: 1k and 10k
        c = s3_case(s3, b, n) or s3_case(s3, b)
        if c and fmt in c["runs"]:
            x = paired(commits(c, fmt), commits(c, "copy"))
            rows.append([f"{issue}. {fmt} table commit vs copy, {b}",
                         f"≤ 0.1x at {n:,} files behind 50-100 ms",
                         f"{fmt_x(x)} at {c['n']:,} files ({req_total(reqs(c['runs'][fmt]))} "
                         "requests)", verdict(x <= 0.1) if c["n"] >= n else
                         f"not measured at {n:,} files"])
    for b in ("moto", "seaweedfs"):
        c = s3_case(s3, b, 1_000) or s3_case(s3, b)
        if c:
            rows.append([f"21. requests per commit, {b}", "copy, manifest and table promotion",
                         f"at {c['n']:,} files: " + ", ".join(
                             f"{v} {req_total(reqs(runs))}" for v, runs in c["runs"].items()
                             if v in ("copy", "manifest", "iceberg", "delta")), "measured"])
    return rows


def azure_goal_rows(az: dict[str, Any] | None) -> list[list[str]]:
    """Issue 35 §4: on Azurite behind 50-100 ms, 1k and 10k files by copy, manifest,
    Iceberg and Delta against copy promotion in one run; requests flat in the file
    count where the mode allows."""
    cases = sorted((az or {}).get("cases", []), key=lambda c: c["n"])
    if not cases:
        return []
    sizes = [c["n"] for c in cases]
    both = 1_000 in sizes and 10_000 in sizes and az is not None \
        and az["latency_ms"][1] >= 50
    vs_copy = "; ".join(f"at {c['n']:,}: " + ", ".join(
        f"{v} {fmt_x(paired(commits(c, v), commits(c, 'copy')))}"
        for v in FLAT_MODES if v in c["runs"]) for c in cases)
    missing = ", ".join(f"{n:,}" for n in (1_000, 10_000) if n not in sizes)
    rows = [["35. Azure (Azurite) commit vs copy promotion: manifest, iceberg, delta",
             "1k and 10k files behind 50-100 ms, one run", vs_copy,
             "measured" if both else f"not measured at {missing} files" if missing
             else "not measured behind 50-100 ms"]]
    lo, hi = cases[0], cases[-1]
    if lo is hi:
        rows.append(["35. Azure requests per commit flat in the file count",
                     "manifest, iceberg, delta", f"at {lo['n']:,} files only: " + ", ".join(
                         f"{v} {sum(reqs(runs).values()):,}" for v, runs in lo["runs"].items()
                         if v in ("copy", *FLAT_MODES)), "not measured (one file count)"])
        return rows
    grows = {v: (sum(reqs(lo["runs"][v]).values()), sum(reqs(hi["runs"][v]).values()))
             for v in ("copy", *FLAT_MODES) if v in lo["runs"] and v in hi["runs"]}
    flat = [v for v in FLAT_MODES if v in grows]
    ok = all((grows[v][1] - grows[v][0]) * FLAT_PER <= hi["n"] - lo["n"] for v in flat)
    rows.append(["35. Azure requests per commit flat in the file count",
                 f"manifest, iceberg, delta: ≤ 1 more request per {FLAT_PER} more files "
                 "(list pages); copy: per file",
                 f"{lo['n']:,} → {hi['n']:,} files: " + ", ".join(
                     f"{v} {a:,} → {b:,}" for v, (a, b) in grows.items()),
                 verdict(ok if hi["n"] >= 10 * lo["n"] and flat else None)])
    return rows


# ------------------------------------------------------------------ sections
def case_tables(c: dict[str, Any], workers: int) -> list[str]:
    """One case (a backend at one file count): its variants, and the parallel copies."""
    base = commits(c, "copy")
    rows = [[v, fmt_s(median(r["precommit"] for r in runs)),
             req_total(reqs(runs, "precommit_requests")), fmt_s(median(commits(c, v))),
             fmt_x(paired(commits(c, v), base)) if v != "copy" else "1 (baseline)",
             req_total(reqs(runs)), ", ".join(f"{k} {n:,}" for k, n in sorted(
                 reqs(runs).items(), key=lambda kv: -kv[1]))]
            for v, runs in c["runs"].items()]
    out = [f"**{c['backend']}, {c['n']:,} files** ({c['reps']} reps, load "
           f"{c['load']:.1f} at the end):", "",
           *table(["variant", "precommit", "requests", "commit", "commit / copy",
                   "requests per commit", "by operation"], rows)]
    if SEQ in c["runs"]:
        x = paired(commits(c, SEQ), base)
        r = reqs(c["runs"]["copy"])
        copies = r.get("copy", 0)
        # per-file deletes (Azure's) run in the same pool as the copies; S3's are batches
        deletes = r.get("delete", 0) if r.get("delete", 0) >= copies else 0
        par, total = copies + deletes, sum(r.values())
        bound = total / (total - par + par / workers)
        per_req = median(commits(c, SEQ)) / total
        out += [f"Parallel vs sequential copies on {c['backend']}: **{fmt_x(x)}** "
                f"(sequential / parallel, paired). With `copy_workers={workers}` the "
                f"{copies:,} copies{f' and {deletes:,} deletes' if deletes else ''} overlap "
                f"but the commit's other {total - par} requests run one after another: "
                "with free CPU "
                f"and equal requests the ratio would reach ~{bound:.1f}x (Amdahl, from the "
                f"request counts). Sequentially a request took {fmt_s(per_req)} on "
                f"average (the added latency averages 75 ms; the rest is client, proxy "
                f"and server CPU on this machine); parallel copies through a proxy "
                f"adding no latency took {fmt_s(median(commits(c, FLOOR)))}, what this "
                "machine's CPU allows without any latency.", ""]
    return out


def s3_section(s3: dict[str, Any]) -> list[str]:
    lo, hi = s3["latency_ms"]
    out = ["## 4. S3 behind real-S3-like latency: moto and SeaweedFS", "",
           "Two real S3 servers on 127.0.0.1, each a process of its own: moto's server (one "
           "Python process, a few ms of CPU per request) and SeaweedFS (`weed mini`, started "
           "as the tests start it, `tests/seaweed.py`: a Go server, also an Iceberg REST "
           "catalog). The sink reaches them only through `tests/faults/proxy.py` (run by "
           f"`bench/harness.py` in a process of its own), which delays every request by "
           f"{lo:g}-{hi:g} ms (uniform) and counts requests per operation. One epoch of N "
           "small Parquet files is staged straight into the server; `precommit` and "
           "`commit` are timed alone, each target having committed one untimed epoch first "
           "(steady state). **copy** = folder target, copy promotion, default "
           f"`copy_workers={s3['default_workers']}` (the baseline); **{SEQ}** = the same "
           f"copies one at a time; **{FLOOR}** = *copy* through a proxy adding nothing (what "
           "the server allows here); **manifest** = `promotion=\"manifest\"`; **iceberg** = "
           "an Iceberg table (moto: SQL catalog on SQLite, warehouse on the same S3; "
           "SeaweedFS: its REST catalog, a table bucket, the ledger apart, every catalog "
           "request behind the same latency and counted as *catalog*); **delta** = a Delta "
           "table. *Requests* are the commit's alone; *commit / copy* is paired.", ""]
    for c in s3["cases"]:
        out += case_tables(c, s3["default_workers"])
    return out


def azure_section(az: dict[str, Any]) -> list[str]:
    lo, hi = az["latency_ms"]
    out = ["## 5. Azure Blob Storage on Azurite behind the same latency", "",
           "Issue 35 §4. Azurite (`azurite-blob`, Microsoft's emulator in Node.js, started "
           "as the tests start it, `tests/azurite.py`) on 127.0.0.1, reached only through "
           f"the same proxy ({lo:g}-{hi:g} ms a request, uniform; Azure's operations counted "
           "in S3's terms: Copy Blob is *copy*, List Blobs *list*, Put Block (List) "
           "*multipart*). The same harness and variants as section 4 (`bench/bench_s3.py "
           "--backends azurite`): **copy** = an `az://` folder target, copy promotion, "
           f"`copy_workers={az['default_workers']}` (the baseline); **{SEQ}**, **{FLOOR}**, "
           "**manifest** as on S3; **iceberg** = an Iceberg table on pyiceberg's SQL catalog "
           "(SQLite) with its warehouse on `abfs://` (pyiceberg's fsspec FileIO over adlfs); "
           "**delta** = a Delta table (`delta+az://`, delta-rs's Azure object store). Each "
           "run's target is a fresh container. airflow-tpc's Azure store deletes blobs one "
           "by one (in parallel; it does not use Blob Batch), so a copy promotion makes two "
           "requests a file: the copy, then the staged blob's delete. *Requests* are the "
           "commit's alone; *commit / copy* is paired.",
           ""]
    for c in az["cases"]:
        out += case_tables(c, az["default_workers"])
    # what a run stopped early saw beyond its complete cases, as its log said it
    out += [f"*Note:* {note}" for note in az.get("notes", [])] + [""] * bool(az.get("notes"))
    return out
