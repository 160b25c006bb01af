"""Table-format commits vs folder promotions on S3 (issue 11's benchmark).

One epoch of N staged small Parquet files (1,000 / 10,000 / 100,000) is committed
four ways, interleaved, on moto's S3 server reached through ``bench/s3_proxy.py``
(the fault proxy adding a uniform 50-100 ms to every request, like real S3, and
counting requests), and through a second proxy that adds nothing:

* **iceberg**: an Iceberg target (``airflow_tpc.tables.open_sink('iceberg://...')``,
  pyiceberg SQL catalog on SQLite, warehouse on the same S3): the decision, then one
  Iceberg snapshot that adds the staged files where they are;
* **delta**: a Delta target (``delta+s3://bucket/prefix``, delta-rs), when
  ``airflow_tpc.tables`` has one (else "not measured");
* **copy**: a folder target with copy promotion (``SinkConfig()``: 16 parallel
  server-side copies), the baseline of every ratio;
* **manifest**: a folder target with ``promotion="manifest"`` (copies nothing).

Timed: ``sink.precommit(txn)`` alone, then ``sink.commit(txn)`` alone (the whole
commit: decision + table commit / promotion). Each variant's target first gets one
untimed epoch of one file, so the timed commit is a steady-state one (the table
exists, the pending index exists). Requests per precommit and per commit are the
proxy's counts per S3 operation. Where the time goes is measured by wrapping (not
changing) the functions a commit goes through, and by a cProfile of one commit.

Earlier runs also measured three monkeypatched Iceberg prototypes (footers read in
parallel once; statistics from pre-commit; schema checked once per distinct schema);
the shipped committer now does what the last one did (statistics sealed at
pre-commit), so they were removed; their figures stay in bench/results/tables.json
and the report. It also times, without S3, the committer's per-file CPU steps once
it holds the footers (``--cpu-files``). ::

    .venv/bin/python bench/bench_tables.py [--quick] [--sizes 1000 10000] [--reps 3]
        [--paths latency none] [--output docs/benchmarks.md]

Nothing is asserted: these are measurements, not tests.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import json
import os
import pstats
import shutil
import signal
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_core as core  # noqa: E402  (bench/bench_core.py: moto, proxy, helpers)
import tables_report  # noqa: E402  (bench/tables_report.py: the markdown)

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "tables.json"
EPOCH = "2026-01-01"
WARMUP_EPOCH = "2025-12-31"
NAMESPACE = "bench"
#: How many distinct small files are generated (file i gets body i % DISTINCT).
DISTINCT = 16
#: The proxies: "latency" adds --latency-ms to every request, "none" adds nothing.
PATHS = ("latency", "none")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ------------------------------------------------------------------ the files
def parquet_bodies(epoch: str) -> list[bytes]:
    """DISTINCT small Parquet files of the events schema (id, value, epoch), 20-35 rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = []
    for k in range(DISTINCT):
        ids = list(range(k * 100, k * 100 + 20 + k))
        table = pa.table({"id": pa.array(ids, pa.int64()),
                          "value": pa.array([f"v{i}" for i in ids], pa.string()),
                          "epoch": pa.array([epoch] * len(ids), pa.string())})
        buf = io.BytesIO()
        pq.write_table(table, buf)
        out.append(buf.getvalue())
    return out


def stage_files(client: Any, staging_uri: str, n: int, bodies: list[bytes]) -> int:
    """Put n Parquet files straight into moto (not through a proxy), as the job would."""
    bucket, prefix = staging_uri.split("://", 1)[1].split("/", 1)
    prefix = prefix.rstrip("/")
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda i: client.put_object(
            Bucket=bucket, Key=f"{prefix}/part-{i:06d}.parquet",
            Body=bodies[i % len(bodies)]), range(n)))
    return sum(len(bodies[i % len(bodies)]) for i in range(n))


# ------------------------------------------------------------------ the targets
def delta_available() -> bool:
    """Whether airflow_tpc.tables has a Delta target yet (being built in parallel)."""
    from airflow_tpc import tables

    return any(s.startswith("delta") for s in getattr(tables, "TABLE_SCHEMES", ()))


def make_sink(variant: str, bucket: str, endpoint: str, workdir: str) -> Any:
    """The sink of one variant, talking to S3 only through ``endpoint`` (a proxy)."""
    from airflow_tpc import Sink, SinkConfig

    options = {"endpoint_url": endpoint, **core.S3_CREDS}
    if variant == "copy":
        return Sink(f"s3://{bucket}/folder/events", NAMESPACE, storage_options=options)
    if variant == "manifest":
        return Sink(f"s3://{bucket}/folder/events", NAMESPACE, storage_options=options,
                    config=SinkConfig(promotion="manifest"))
    from airflow_tpc.tables import open_sink

    if variant == "delta":
        return open_sink(f"delta+s3://{bucket}/delta/events", NAMESPACE,
                         storage_options=options)
    cat = tempfile.mkdtemp(prefix="catalog-", dir=workdir)
    props = {"type": "sql", "uri": f"sqlite:///{cat}/catalog.db",
             "warehouse": f"s3://{bucket}/warehouse", "s3.endpoint": endpoint,
             "s3.access-key-id": core.S3_CREDS["key"],
             "s3.secret-access-key": core.S3_CREDS["secret"], "s3.region": "us-east-1"}
    return open_sink("iceberg://bench/analytics.events", NAMESPACE, catalog_properties=props,
                     storage_options=options)


# ------------------------------------------------------ where the time goes
class PhaseTimer:
    """Wall time and calls of named functions, by wrapping them for one block.

    Nested phases are each timed in full (a phase's time includes the phases it
    calls); the report says which phase contains which.
    """

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)

    def wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds[name] += time.perf_counter() - t0
                self.calls[name] += 1
        return wrapper

    @contextlib.contextmanager
    def patched(self) -> Iterator[PhaseTimer]:
        import airflow_tpc.promote as promote
        import airflow_tpc.sink as sink_mod
        import airflow_tpc.tables.switch as table_switch

        targets: list[tuple[Any, str, str]] = [
            (promote, "promote", "promote (everything after the decision record)"),
            (promote, "_swap_marker", "published marker"),
            (table_switch, "_swap_marker", "published marker"),
            (sink_mod.Sink, "precommit", "precommit (whole)"),
        ]
        for cls in [c for c in vars(promote).values()
                    if isinstance(c, type) and issubclass(c, promote.Strategy)
                    and "switch" in vars(c)]:
            targets.append((cls, "switch", f"switch: {cls.__name__}"))
        with contextlib.suppress(ImportError):
            import pyiceberg.table as pt

            import airflow_tpc.tables.iceberg as ice
            import airflow_tpc.tables.iceberg_commit as ice_commit
            targets += [
                (ice.IcebergTarget, "check_staged", "iceberg: check_staged (footer reads)"),
                (ice.IcebergTarget, "load_table", "iceberg: load_table (catalog + metadata)"),
                (ice.IcebergSnapshot, "_commit", "iceberg: table commit (_commit)"),
                (pt, "_parquet_files_to_data_files",
                 "iceberg: _parquet_files_to_data_files (footer reads, parallel)"),
                (ice_commit, "epoch_commits", "iceberg: epoch_commits (snapshot history)"),
            ]
        with contextlib.suppress(ImportError):
            import airflow_tpc.tables.delta as dl
            targets += [
                (dl.DeltaTarget, "check_staged", "delta: check_staged (footer reads)"),
                (dl.DeltaTarget, "footers", "delta: footers (sequential reads)"),
                (dl.DeltaTarget, "load_table", "delta: load_table (log)"),
                (dl.DeltaCommit, "_commit", "delta: table commit (_commit)"),
            ]
        saved = []
        try:
            for owner, attr, name in targets:
                orig = getattr(owner, attr)
                saved.append((owner, attr, orig))
                setattr(owner, attr, self.wrap(name, orig))
            yield self
        finally:
            for owner, attr, orig in reversed(saved):
                setattr(owner, attr, orig)

    def take(self) -> dict[str, list[float]]:
        out = {k: [round(self.seconds[k], 4), self.calls[k]] for k in sorted(self.seconds)}
        self.seconds.clear()
        self.calls.clear()
        return out  # type: ignore[return-value]


# ------------------------------------------------- committer CPU once footers are read
def bench_cpu(n: int, workdir: str) -> list[list[Any]]:
    """What the committer's Python spends per file once it holds the footers (local
    table, no S3): each step the Iceberg commit runs per staged file, timed over n
    parsed footers (the DISTINCT bodies, repeated).  [step, seconds, files]."""
    import pyarrow.parquet as pq
    from pyiceberg.io.pyarrow import (
        _check_pyarrow_schema_compatible,
        compute_statistics_plan,
        data_file_statistics_from_parquet_metadata,
        parquet_path_to_id_mapping,
    )

    from airflow_tpc.tables import open_sink
    from airflow_tpc.tables.iceberg_files import schema_problems

    cat = tempfile.mkdtemp(prefix="cpu-", dir=workdir)
    sink = open_sink("iceberg://cpu/analytics.events", NAMESPACE, catalog_properties={
        "type": "sql", "uri": f"sqlite:///{cat}/catalog.db", "warehouse": f"file://{cat}/w"})
    bodies = parquet_bodies(EPOCH)
    txn = sink.begin(EPOCH)
    staging = txn.staging_uri.removeprefix("file://")
    os.makedirs(staging, exist_ok=True)
    Path(staging, "part-0.parquet").write_bytes(bodies[0])
    sink.commit(txn, expected_digest=sink.precommit(txn).digest)
    table = sink.table_target.load_table()
    meta = table.metadata
    schema = meta.schema()
    plan = compute_statistics_plan(schema, meta.properties)
    mapping = parquet_path_to_id_mapping(schema)
    mds = [pq.read_metadata(io.BytesIO(bodies[i % DISTINCT])) for i in range(n)]
    out: list[list[Any]] = []

    def step(name: str, fn: Callable[[], Any]) -> Any:
        t, res = core.timed(fn)
        out.append([name, round(t, 4), n])
        return res

    schemas = step("footer → Arrow schema (`to_arrow_schema`)", lambda: [
        m.schema.to_arrow_schema().remove_metadata() for m in mds])
    step("`_epoch_problems` (epoch column statistics)", lambda: [
        sink.table_target._epoch_problems("u", m, sc, EPOCH)
        for m, sc in zip(mds, schemas, strict=True)])
    step("`_schema_problems` (airflow-tpc's schema check), per file", lambda: [
        schema_problems(sc, table) for sc in schemas])
    step("`_schema_problems` once per distinct schema (dedupe by serialized schema)",
         lambda: [schema_problems(sc, table) for sc in
                  {sc.serialize().to_pybytes(): sc for sc in schemas}.values()])
    step("pyiceberg `_check_pyarrow_schema_compatible`, per file", lambda: [
        _check_pyarrow_schema_compatible(schema, m.schema.to_arrow_schema(),
                                         format_version=meta.format_version) for m in mds])
    stats = step("pyiceberg `data_file_statistics_from_parquet_metadata`", lambda: [
        data_file_statistics_from_parquet_metadata(
            parquet_metadata=m, stats_columns=plan, parquet_column_mapping=mapping)
        for m in mds])
    step("`DataFileStatistics.to_serialized_dict`", lambda: [
        st.to_serialized_dict() for st in stats])
    step("`DataFileStatistics.partition`", lambda: [
        st.partition(meta.spec(), schema) for st in stats])
    return out


# ------------------------------------------------------------------ one run
def run_variant(variant: str, n: int, path: str, rep: int, moto: str, proxies: dict[str, Any],
                client: Any, bodies: dict[str, list[bytes]], workdir: str,
                timer: PhaseTimer, profile: bool = False) -> dict[str, Any]:
    """Warm-up epoch, then stage n files, time precommit and commit, count requests."""
    core.moto_reset(moto)
    bucket = f"tables-{n}-{rep}-{abs(hash(variant)) % 10_000}"
    client.create_bucket(Bucket=bucket)
    via = proxies[path]
    base = variant.split(",")[0]
    sink = make_sink(base, bucket, via.endpoint, workdir)
    warm = sink.begin(WARMUP_EPOCH)
    stage_files(client, warm.staging_uri, 1, bodies[WARMUP_EPOCH])
    sink.commit(warm, expected_digest=sink.precommit(warm).digest)
    txn = sink.begin(EPOCH)
    staged_bytes = stage_files(client, txn.staging_uri, n, bodies[EPOCH])
    prof = cProfile.Profile() if profile else None
    with timer.patched():
        via.requests()
        t_pre, manifest = core.timed(lambda: sink.precommit(txn))
        pre_req = via.requests()
        pre_phases = timer.take()
        if prof is not None:
            prof.enable()
        t_commit, result = core.timed(lambda: sink.commit(txn, expected_digest=manifest.digest))
        if prof is not None:
            prof.disable()
        commit_req = via.requests()
        phases = timer.take()
    if result.outcome != "committed":
        raise RuntimeError(f"{variant} commit of {n} files: {result.outcome}")
    out = {"precommit": t_pre, "commit": t_commit, "precommit_requests": pre_req,
           "commit_requests": commit_req, "precommit_phases": pre_phases,
           "commit_phases": phases, "staged_bytes": staged_bytes}
    if prof is not None:
        out["profile"] = profile_rows(prof)
    return out


def profile_rows(prof: cProfile.Profile, top: int = 14) -> list[list[Any]]:
    """Top functions by cumulative time below commit() (wall clock: waits count)."""
    st = pstats.Stats(prof, stream=io.StringIO())
    rows = []
    for (file, line, func), (_cc, nc, tt, ct, _callers) in st.stats.items():  # type: ignore[attr-defined]
        short = file
        for marker in ("site-packages/", "airflow_tpc/", "bench/"):
            if marker in file:
                short = file[file.index(marker):].replace("site-packages/", "")
                break
        rows.append([f"{func} ({short}:{line})", nc, round(tt, 4), round(ct, 4)])
    rows.sort(key=lambda r: -r[3])
    keep = [r for r in rows if "bench_tables" not in r[0] and "bench/" not in r[0]
            and not r[0].startswith("<built-in method builtins.exec")]
    return keep[:top]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: 100 files, 1 repetition, both paths "
                        "(~4 min)")
    parser.add_argument("--sizes", type=int, nargs="+", default=None,
                        help="staged files per commit (default 1000 10000)")
    parser.add_argument("--reps", type=int, default=None, help="repetitions (default 3)")
    parser.add_argument("--paths", nargs="+", choices=PATHS, default=list(PATHS),
                        help="through the latency proxy, the no-latency proxy, or both")
    parser.add_argument("--variants", nargs="+", default=None,
                        help="subset of: iceberg delta copy manifest (default all available)")
    parser.add_argument("--slow-max", type=int, default=1_000,
                        help="run Iceberg as shipped behind latency only up to this many "
                        "files (default 1000: at 10,000 one commit takes over an hour; its "
                        "requests grow linearly, so larger sizes are extrapolated)")
    parser.add_argument("--cpu-files", type=int, default=None,
                        help="footers for the committer-CPU step timings (default 2000, "
                        "quick 500; 0 skips them)")
    parser.add_argument("--latency-ms", type=float, nargs=2, default=[50.0, 100.0],
                        metavar=("MIN", "MAX"))
    parser.add_argument("--profile", action="store_true",
                        help="cProfile one Iceberg commit of the first size and path")
    parser.add_argument("--results", default=str(RESULTS),
                        help="JSON (default bench/results/tables.json); cases of other sizes "
                        "and paths already in it are kept, unless --fresh")
    parser.add_argument("--fresh", action="store_true", help="drop earlier cases")
    parser.add_argument("--output", default=str(core.DEFAULT_OUTPUT),
                        help="markdown with the Tables section ('-' for none)")
    args = parser.parse_args(argv)
    sizes = args.sizes or ([100] if args.quick else [1_000, 10_000])
    reps = args.reps or (1 if args.quick else 3)
    variants = args.variants or ["iceberg", "delta", "copy", "manifest"]
    if "delta" in variants and not delta_available():
        log("delta: airflow_tpc.tables has no Delta target yet: not measured")
        variants.remove("delta")
    unknown = set(variants) - {"iceberg", "delta", "copy", "manifest"}
    if unknown:
        parser.error(f"unknown variants: {', '.join(sorted(unknown))}")
    started = time.perf_counter()
    load_start = os.getloadavg()
    workdir = tempfile.mkdtemp(prefix="tpc-bench-tables-")
    info = core.machine_info(workdir)
    bodies = {e: parquet_bodies(e) for e in (EPOCH, WARMUP_EPOCH)}
    timer = PhaseTimer()
    cases: list[dict[str, Any]] = []
    profile: dict[str, Any] = {}
    lat = (args.latency_ms[0], args.latency_ms[1])
    cpu_n = args.cpu_files if args.cpu_files is not None else (500 if args.quick else 2000)
    cpu = bench_cpu(cpu_n, workdir) if cpu_n else []
    if cpu:
        log("committer CPU per file: " + "; ".join(
            f"{name} {1e6 * t / n:,.0f} µs" for name, t, n in cpu))
    with core.moto_server() as moto:
        proxies = {"latency": core.LatencyProxy(moto, lat),
                   "none": core.LatencyProxy(moto, (0.0, 0.0))}
        client = core.s3_client(moto)
        try:
            for n in sizes:
                for path in args.paths:
                    case: dict[str, Any] = {
                        "files": n, "path": path,
                        "latency_ms": list(lat) if path == "latency" else [0, 0],
                        "reps": reps, "runs": {v: [] for v in variants},
                        "load": [os.getloadavg()[0]]}
                    for rep in range(reps):
                        for variant in core.rotated(variants, rep):
                            if variant == "iceberg" and path == "latency" \
                                    and n > args.slow_max:
                                continue
                            r = run_variant(variant, n, path, rep, moto, proxies, client,
                                            bodies, workdir, timer)
                            case["runs"][variant].append(r)
                            log(f"  {n:>6} files, {path:<7} rep {rep + 1}/{reps} {variant}: "
                                f"precommit {core.fmt_s(r['precommit'])} "
                                f"({sum(r['precommit_requests'].values())} req), commit "
                                f"{core.fmt_s(r['commit'])} "
                                f"({sum(r['commit_requests'].values())} req)")
                    case["load"].append(os.getloadavg()[0])
                    cases.append(case)
                    if args.profile and not profile and "iceberg" in variants:
                        r = run_variant("iceberg", n, path, reps, moto, proxies, client,
                                        bodies, workdir, timer, profile=True)
                        profile = {"files": n, "path": path, "commit": r["commit"],
                                   "rows": r["profile"]}
        finally:
            for p in proxies.values():
                p.close()
            shutil.rmtree(workdir, ignore_errors=True)
    elapsed = time.perf_counter() - started
    results_path = Path(args.results)
    old = json.loads(results_path.read_text()) if results_path.exists() and not args.fresh \
        else {}
    keep = [c for c in old.get("cases", [])
            if (c["files"], c["path"]) not in {(c2["files"], c2["path"]) for c2 in cases}]
    cmd = "python bench/bench_tables.py" + (" " + " ".join(argv if argv is not None
                                                           else sys.argv[1:])).rstrip()
    run = {"command": cmd.strip(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "elapsed_s": round(elapsed, 1), "load_start": list(load_start),
           "load_end": list(os.getloadavg()), "cores": os.cpu_count(),
           "code": info["airflow-tpc commit"], "machine": info,
           "delta": "measured" if "delta" in variants else "not measured: no Delta target in "
           "airflow_tpc.tables yet"}
    for c in cases:
        c["run"] = run
    data = {"schema": 1, "runs": [*old.get("runs", []), run] if not args.fresh else [run],
            "cases": sorted([*keep, *cases], key=lambda c: (c["files"], c["path"])),
            "profile": profile or old.get("profile", {}),
            "notes": old.get("notes", []),  # hand-written remarks on earlier runs
            "cpu": {"files": cpu_n, "load": os.getloadavg()[0], "steps": cpu} if cpu
            else old.get("cpu", {})}
    results_path.parent.mkdir(parents=True, exist_ok=True)
    results_path.write_text(json.dumps(data, indent=1) + "\n")
    log(f"results saved to {results_path}")
    if args.output != "-":
        tables_report.write(data, Path(args.output))
        log(f"Tables section written to {args.output}")
    print(tables_report.render(data))
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    raise SystemExit(main())
