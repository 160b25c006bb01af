"""An epoch's commit into an Iceberg table behind a REST catalog, vs copy promotion.

Issue 18's benchmark. SeaweedFS (``weed mini``, as the tests start it:
``tests/seaweed.py``) serves S3 and an Iceberg REST catalog; every request the sink
makes — to S3 and to the catalog — goes through ``bench/s3_proxy.py``, which adds a
uniform 50-100 ms (like real S3 and a remote catalog) and counts the requests.
One epoch of N small staged Parquet files (1,000 / 10,000) is committed two ways,
interleaved, in the same run:

* **iceberg-rest**: an Iceberg target in a table bucket (managed table storage) with
  its ledger apart (``ledger_uri``): the decision, then one catalog commit adding the
  staged files where they are;
* **copy**: a folder target in an ordinary bucket with copy promotion (16 parallel
  server-side copies): the baseline of the ratio.

Files are staged straight into SeaweedFS (not through the proxy), as the job would.
Timed: ``sink.commit(txn)`` alone (pre-commit, which reads the footers, is timed
apart). Each target first gets one untimed epoch of one file, so the timed commit is
a steady-state one (the table exists). Goal: the table commit ≤ 0.1× copy, and its
requests flat in the file count. ::

    .venv/bin/python bench/bench_rest.py [--sizes 1000 10000] [--reps 3]
        [--latency-ms 50 100] [--results bench/results/rest.json]
        [--output docs/benchmarks.md | -]

Nothing is asserted: these are measurements, not tests.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_core as core  # noqa: E402  (latency proxy, statistics helpers)

from tests import seaweed as sw  # noqa: E402  (the SeaweedFS the tests start)

RESULTS = ROOT / "bench" / "results" / "rest.json"
BEGIN, END = "<!-- rest:begin -->", "<!-- rest:end -->"
EPOCH, WARMUP = "2026-01-02", "2026-01-01"
VARIANTS = ("iceberg-rest", "copy")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def parquet_body(epoch: str) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    ids = list(range(20))
    buf = io.BytesIO()
    pq.write_table(pa.table({"id": pa.array(ids, pa.int64()),
                             "value": pa.array([f"v{i}" for i in ids]),
                             "epoch": pa.array([epoch] * len(ids))}), buf)
    return buf.getvalue()


def stage(server: sw.Seaweed, staging_uri: str, n: int, body: bytes) -> None:
    """Put n files straight into SeaweedFS (not through the proxy), as the job would."""
    client = server.client()
    bucket, prefix = staging_uri.split("://", 1)[1].split("/", 1)
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda i: client.put_object(
            Bucket=bucket, Key=f"{prefix.rstrip('/')}/part-{i:06d}.parquet", Body=body),
            range(n)))


def make_sink(variant: str, server: sw.Seaweed, s3: core.LatencyProxy,
              catalog: core.LatencyProxy) -> Any:
    """A fresh target of ``variant``, talking to SeaweedFS only through the proxies."""
    from airflow_tpc import Sink
    from airflow_tpc.tables import open_sink

    options = {**server.s3_options(), "endpoint_url": s3.endpoint}
    if variant == "copy":
        return Sink(f"{server.new_prefix()}/events", "bench", storage_options=options)
    props = {**server.catalog_properties(server.new_warehouse()), "uri": catalog.endpoint,
             "oauth2-server-uri": f"{catalog.endpoint}/v1/oauth/tokens",
             "s3.endpoint": s3.endpoint}
    return open_sink("iceberg://bench/analytics.events", "bench", catalog_properties=props,
                     storage_options=options, ledger_uri=server.new_prefix())


def run(server: sw.Seaweed, s3: core.LatencyProxy, catalog: core.LatencyProxy,
        variant: str, n: int) -> dict[str, Any]:
    """One steady-state commit of n files: seconds and requests (S3, catalog)."""
    sink = make_sink(variant, server, s3, catalog)
    warm = sink.begin(WARMUP)
    stage(server, warm.staging_uri, 1, parquet_body(WARMUP))
    sink.commit(warm, expected_digest=sink.precommit(warm).digest)
    txn = sink.begin(EPOCH)
    stage(server, txn.staging_uri, n, parquet_body(EPOCH))
    t0 = time.perf_counter()
    manifest = sink.precommit(txn)
    precommit = time.perf_counter() - t0
    s3.requests(), catalog.requests()
    t0 = time.perf_counter()
    result = sink.commit(txn, expected_digest=manifest.digest)
    commit = time.perf_counter() - t0
    if result.outcome != "committed":
        raise RuntimeError(f"{variant} commit of {n} files: {result.outcome}")
    return {"commit_s": commit, "precommit_s": precommit, "s3": s3.requests(),
            "catalog": catalog.requests()}


def report(data: dict[str, Any]) -> str:
    lines = [BEGIN, "", "## 6. Tables behind a REST catalog (SeaweedFS) vs copy promotion", "",
             f"Measured {data['date']} by `bench/bench_rest.py` ({data['reps']} reps, "
             f"interleaved; every request to S3 and to the catalog behind a uniform "
             f"{data['latency_ms'][0]:g}-{data['latency_ms'][1]:g} ms). One steady-state "
             "epoch commit of N small Parquet files: an Iceberg table in SeaweedFS's table "
             "bucket with its ledger apart (`ledger_uri`), and a folder target with copy "
             "promotion (16 parallel server-side copies). Medians; the ratio is paired per "
             "rep." + (f" {data['note']}" if data.get("note") else ""), "",
             "| files | iceberg-rest commit | copy commit | ratio (goal ≤ 0.1×) | iceberg-rest "
             "requests (S3 + catalog) | copy requests |",
             "| ---: | ---: | ---: | ---: | ---: | ---: |"]
    for case in data["cases"]:
        ice, copy = case["runs"]["iceberg-rest"], case["runs"]["copy"]

        def reqs(runs: list[dict[str, Any]]) -> str:
            s3 = core.median([float(sum(r["s3"].values())) for r in runs])
            cat = core.median([float(sum(r["catalog"].values())) for r in runs])
            return f"{s3:.0f} + {cat:.0f}"

        t_ice, t_copy = [r["commit_s"] for r in ice], [r["commit_s"] for r in copy]
        lines.append(
            f"| {case['n']:,} | {core.fmt_s(core.median(t_ice))} | "
            f"{core.fmt_s(core.median(t_copy))} | {core.fmt_x(core.paired(t_ice, t_copy))}"
            f" | {reqs(ice)} | {reqs(copy)} |")
    verdict = []
    for case in data["cases"]:
        ice, copy = case["runs"]["iceberg-rest"], case["runs"]["copy"]
        ratio = core.paired([r["commit_s"] for r in ice], [r["commit_s"] for r in copy])
        verdict.append(f"{case['n']:,} files: {core.fmt_x(ratio)} "
                       f"({'met' if ratio <= 0.1 else 'not met'})")
    lines += ["", "Goal ≤ 0.1× copy — " + "; ".join(verdict) + ". The table commit's requests "
              "are flat but for one LIST page per 1,000 staged files (staging is verified by "
              "listing it); a copy makes one request per file. What grows with the file count "
              "besides is CPU: the manifest's decode, the Iceberg manifest written, the "
              "marker listing every path (issue 21). Requests are the commit's only "
              "(pre-commit reads each footer once and seals the statistics, so the commit "
              "reads none). Raw figures: `bench/results/rest.json`.", "",
              "Why 1,000 files stays above 0.1×: 16 parallel copies of 1,000 files are ~63 "
              "rounds of latency, while the table commit's requests run one after another: "
              "the ledger's begin record, epoch listing, "
              "manifest, sealed statistics, staging listing, pending entry and decision; "
              "the published marker read; pyiceberg's read of the current manifest list and "
              "manifest, its new manifest and manifest list (pyarrow uploads each in three "
              "multipart requests); the catalog's load and commit; the marker, the published "
              "record and the pending entry's removal. At the 75 ms mean latency those "
              "alone are ~1.8 s, about 0.17× copy before any CPU. Levers left: the six "
              "reads before the decision do not depend on each other and could be made at "
              "once (~0.4 s), and single-request uploads of pyiceberg's two files (~0.3 s). "
              "Nothing is read twice any "
              "more (`tests/tables/test_commit_requests.py`): the commit went from 43 to 24 "
              "requests, and from 0.42× to 0.245× copy at 1,000 files.", "", END]
    return "\n".join(lines)


def write_report(text: str, output: str) -> None:
    if output == "-":
        print(text)
        return
    path = Path(output)
    doc = path.read_text()
    if BEGIN in doc and END in doc:
        head, rest = doc.split(BEGIN, 1)
        doc = head + text + rest.split(END, 1)[1]
    else:
        doc = doc.rstrip("\n") + "\n\n" + text + "\n"
    path.write_text(doc)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--latency-ms", type=float, nargs=2, default=[50.0, 100.0])
    parser.add_argument("--results", default=str(RESULTS))
    parser.add_argument("--output", default=str(ROOT / "docs" / "benchmarks.md"))
    parser.add_argument("--note", default="", help="a sentence for the report (the machine)")
    args = parser.parse_args(argv)
    latency = (args.latency_ms[0], args.latency_ms[1])
    data: dict[str, Any] = {"date": time.strftime("%Y-%m-%d"), "reps": args.reps,
                            "note": args.note,
                            "latency_ms": list(latency), "cases": []}
    with tempfile.TemporaryDirectory(prefix="bench-rest-") as work:
        server = sw.start(Path(work))
        s3 = core.LatencyProxy(server.s3_endpoint, latency)
        catalog = core.LatencyProxy(server.catalog_uri, latency)
        try:
            for n in args.sizes:
                runs: dict[str, list[dict[str, Any]]] = {v: [] for v in VARIANTS}
                for rep in range(args.reps):
                    for variant in core.rotated(list(VARIANTS), rep):
                        runs[variant].append(run(server, s3, catalog, variant, n))
                    log(f"  n={n} rep {rep + 1}/{args.reps}: " + ", ".join(
                        f"{v} {core.fmt_s(runs[v][-1]['commit_s'])}" for v in VARIANTS))
                data["cases"].append({"n": n, "runs": runs})
        finally:
            s3.close()
            catalog.close()
            server.stop()
    Path(args.results).write_text(json.dumps(data, indent=1, sort_keys=True))
    write_report(report(data), args.output)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
