"""Benchmarks of the airflow-tpc transaction core (local disk and S3 through moto).

Run from the repository root::

    .venv/bin/python bench/bench_core.py            # full run (adds 100,000 local files)
    .venv/bin/python bench/bench_core.py --quick    # about 1-2 minutes on 2 cores

Three benchmarks, each reported as medians over repetitions, with every ratio
computed from timings taken in the same run (numbers from different machines or
runs are never compared):

1. local commit of one epoch vs Spark's FileOutputCommitter v1 job commit
   (one ``os.rename`` per file out of ``_temporary``);
2. S3 (moto server on 127.0.0.1) promotion with parallel vs sequential copies;
3. memory (tracemalloc peak), record sizes and the XCom pointer the
   PrecommitSensor pushes, vs the number of files.

The results are printed and written as markdown to ``docs/benchmarks.md`` (with
the Summary of both benchmarks at its top), plots to ``docs/img/`` and every
timing to ``bench/results/core.json``. ``scripts/bench.sh`` runs this and
``bench_spark.py`` in one go.
Nothing here asserts on a time: this is a measurement, not a test.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import dataclasses
import datetime as _dt
import functools
import io
import json
import os
import platform
import pstats
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from airflow_tpc import Sink, SinkConfig, Transaction
from airflow_tpc.ledger import PUBLISHED_MARKER
from airflow_tpc.manifest import MANIFEST_NAME

sys.path.insert(0, str(Path(__file__).resolve().parent))
import plotting  # noqa: E402  (bench/plotting.py)
import summary  # noqa: E402  (bench/summary.py)

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUTPUT = ROOT / "docs" / "benchmarks.md"
RESULTS = ROOT / "bench" / "results" / "core.json"
NAMESPACE = "bench"
EPOCH = "2026-01-01"
S3_CREDS = {"key": "testing", "secret": "testing-secret-key", "region_name": "us-east-1"}
_BLOCK = os.urandom(4096)
#: For moto's own API on 127.0.0.1: never through an HTTP proxy from the environment.
XCOM_MARK = "XCOM-PROBE "  # reply lines of bench/xcom_probe.py
_LOCAL_HTTP = urllib.request.build_opener(urllib.request.ProxyHandler({}))


# ----------------------------------------------------------------- helpers
def file_size(i: int) -> int:
    """Deterministic small-file size between 1 KiB and 4 KiB."""
    return 1024 + (i * 797) % 3073


def file_name(i: int) -> str:
    return f"part-{i:06d}-{uuid.UUID(int=i).hex[:8]}.c000.snappy.parquet"


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    """Run ``fn`` once; (seconds, result)."""
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def fmt_s(seconds: float) -> str:
    """A duration for a table: ms below 1 s."""
    if seconds != seconds:  # NaN
        return "n/a"
    return f"{seconds * 1000:.1f} ms" if seconds < 1 else f"{seconds:,.2f} s"


def fmt_ratio(num: float, den: float) -> str:
    return f"{num / den:.2f}x" if den > 0 else "n/a"


def ratios(num: list[float], den: list[float]) -> str:
    """Ratio of the medians, and the paired ratio: the median of per-repetition ratios.

    Both sides of a pair ran in the same repetition, back to back, so the paired
    ratio cancels slow drifts in machine load.
    """
    paired = median([a / b for a, b in zip(num, den, strict=True) if b > 0])
    return f"{fmt_ratio(median(num), median(den))} (paired {paired:.2f}x)"


def fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    return f"{n:,.1f} GiB"  # pragma: no cover


def spread(values: list[float]) -> str:
    """min-max of the repetitions, for the reader to judge the noise."""
    return f"{fmt_s(min(values))} – {fmt_s(max(values))}" if values else ""


def write_local_files(directory: str, n: int) -> None:
    """What Spark tasks leave behind: ``n`` small files (no fsync, as Spark's writers)."""
    os.makedirs(directory, exist_ok=True)
    for i in range(n):
        with open(os.path.join(directory, file_name(i)), "wb") as fh:
            fh.write(_BLOCK[: file_size(i)])


def flush_page_cache_writes() -> None:
    """Write back dirty pages so no timed fsync pays for earlier writes."""
    if hasattr(os, "sync"):
        os.sync()


class FilePool:
    """``n`` data files written once, then moved from run to run.

    Each run receives the whole folder with one directory rename and hands it
    back the same way, so the files are created once per size instead of once
    per run (creating 100,000 files costs far more than any commit measured
    here), and every run sees them equally warm in the page and dentry caches.
    """

    def __init__(self, base: str, n: int) -> None:
        self.n = n
        self.path = os.path.join(base, "pool")
        write_local_files(self.path, n)

    def move_to(self, dest: str) -> None:
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        os.rename(self.path, dest)

    def take_back(self, src: str, extra: tuple[str, ...] = ()) -> None:
        """Recover the files from ``src``, dropping the bookkeeping files ``extra``."""
        for name in extra:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(src, name))
        os.rename(src, self.path)
        left = len(os.listdir(self.path))
        if left != self.n:
            raise RuntimeError(f"file pool holds {left} files, expected {self.n}")


# ----------------------------------------------------- 1. local vs FileOutputCommitter v1
def run_v1(pool: FilePool, base: str) -> tuple[float, float]:
    """FileOutputCommitter v1 ``commitJob`` on the pool's files.

    The files sit in a committed task folder ``_temporary/0/task_0000``; the job
    commit lists it and renames each file into the output folder (``mergePaths``:
    the output exists, so file by file), then removes ``_temporary`` and writes
    ``_SUCCESS``. Returns (seconds for listing + per-file renames, seconds
    including the clean-up and ``_SUCCESS``).
    """
    out = os.path.join(base, "v1_output")
    job_dir = os.path.join(out, "_temporary", "0")
    pool.move_to(os.path.join(job_dir, "task_0000"))
    flush_page_cache_writes()
    start = time.perf_counter()
    with os.scandir(job_dir) as tasks:
        task_dirs = [t.path for t in tasks if t.is_dir()]
    for task_dir in task_dirs:
        with os.scandir(task_dir) as files:
            for f in files:
                os.rename(f.path, os.path.join(out, f.name))
    renamed = time.perf_counter()
    shutil.rmtree(os.path.join(out, "_temporary"))
    with open(os.path.join(out, "_SUCCESS"), "wb"):
        pass
    total = time.perf_counter() - start
    pool.take_back(out, ("_SUCCESS",))
    return renamed - start, total


@contextlib.contextmanager
def tpc_staged(pool: FilePool, base: str, verify: str) -> Iterator[tuple[Sink, Transaction]]:
    """A new sink, ``begin()`` done and the pool's files in the attempt's staging.

    After the caller's commit, the published files go back to the pool.
    """
    sink = Sink(os.path.join(base, f"tpc_{verify}"), NAMESPACE,
                config=SinkConfig(verify=verify, copy_workers=16))
    txn = sink.begin(EPOCH)
    pool.move_to(sink.layout.staging(txn.epoch, txn.attempt))
    flush_page_cache_writes()
    yield sink, txn
    pool.take_back(sink.layout.published_dir(EPOCH), (MANIFEST_NAME, PUBLISHED_MARKER))


def run_tpc(pool: FilePool, base: str, verify: str) -> tuple[float, float]:
    """Seconds of ``precommit()`` and of ``commit()`` alone, for one epoch."""
    with tpc_staged(pool, base, verify) as (sink, txn):
        t_pre, _ = timed(lambda: sink.precommit(txn))
        flush_page_cache_writes()  # precommit's reads may have dirtied atimes
        t_commit, result = timed(lambda: sink.commit(txn))
        if result.outcome != "committed":
            raise RuntimeError(f"commit outcome {result.outcome}")
    return t_pre, t_commit


@dataclass
class LocalResult:
    n: int
    reps: int
    v1_rename: list[float] = field(default_factory=list)
    v1_total: list[float] = field(default_factory=list)
    precommit: dict[str, list[float]] = field(default_factory=dict)
    commit: dict[str, list[float]] = field(default_factory=dict)


def bench_local(pool: FilePool, workdir: str, reps: int,
                log: Callable[[str], None]) -> LocalResult:
    """Benchmark 1: one epoch's commit on a local disk, tpc vs v1 renames."""
    n = pool.n
    res = LocalResult(n, reps, precommit={"size": [], "checksum": []},
                      commit={"size": [], "checksum": []})
    variants = ["v1", "size", "checksum"]
    for rep in range(reps):
        order = variants[rep % 3:] + variants[:rep % 3]  # rotate who goes first
        for variant in order:
            base = tempfile.mkdtemp(prefix=f"local-{n}-{rep}-{variant}-", dir=workdir)
            if variant == "v1":
                renames, total = run_v1(pool, base)
                res.v1_rename.append(renames)
                res.v1_total.append(total)
            else:
                t_pre, t_commit = run_tpc(pool, base, variant)
                res.precommit[variant].append(t_pre)
                res.commit[variant].append(t_commit)
            shutil.rmtree(base)
        log(f"  local n={n:>6} rep {rep + 1}/{reps}: v1 {fmt_s(res.v1_rename[-1])}, "
            f"tpc size {fmt_s(res.commit['size'][-1])}, "
            f"checksum {fmt_s(res.commit['checksum'][-1])}")
    return res


ProfileRow = tuple[str, int, float, float]


def profile_local_commit(pool: FilePool, workdir: str, top: int = 10) -> list[ProfileRow]:
    """cProfile of one local commit (verify="size"): top functions by own time.

    Returns (function, calls, own seconds, cumulative seconds); times are inflated
    by the profiler, so only their shares matter.
    """
    base = tempfile.mkdtemp(prefix="profile-", dir=workdir)
    prof = cProfile.Profile()
    with tpc_staged(pool, base, "size") as (sink, txn):
        sink.precommit(txn)
        flush_page_cache_writes()
        prof.enable()
        sink.commit(txn)
        prof.disable()
    shutil.rmtree(base)
    stats = pstats.Stats(prof, stream=io.StringIO())
    rows = []
    for (filename, line, func), (_cc, ncalls, tottime, cumtime, _) in \
            stats.stats.items():  # type: ignore[attr-defined]
        where = filename
        if filename.startswith(str(ROOT)):
            where = os.path.relpath(filename, ROOT)
        elif "site-packages" in filename:
            where = "site-packages/" + os.path.basename(filename)
        elif "/lib/python" in filename:
            where = "stdlib/" + os.path.basename(filename)
        label = f"{func} ({where}:{line})" if where != "~" else func
        rows.append((label, ncalls, tottime, cumtime))
    rows.sort(key=lambda r: r[2], reverse=True)
    return rows[:top]


# ------------------------------------------------------------- 2. S3 through moto
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def moto_server() -> Iterator[str]:
    """moto's S3 server as a separate process on 127.0.0.1; killed on exit."""
    exe = Path(sys.executable).with_name("moto_server")
    cmd = [str(exe) if exe.exists() else (shutil.which("moto_server") or "moto_server")]
    port = free_port()
    proc = subprocess.Popen([*cmd, "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with _LOCAL_HTTP.open(f"{endpoint}/moto-api/", timeout=1):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"moto_server did not start on port {port}") from None
                time.sleep(0.1)
        yield endpoint
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def s3_client(endpoint: str) -> Any:
    import boto3
    from botocore.config import Config

    return boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=S3_CREDS["key"],
                        aws_secret_access_key=S3_CREDS["secret"], region_name="us-east-1",
                        config=Config(max_pool_connections=16))


def moto_reset(endpoint: str) -> None:
    """Drop every bucket in the server so each run starts from the same state."""
    req = urllib.request.Request(f"{endpoint}/moto-api/reset", method="POST")
    with _LOCAL_HTTP.open(req, timeout=30):
        pass


@dataclass
class S3Result:
    n: int
    reps: int
    precommit: dict[int, list[float]] = field(default_factory=dict)
    commit: dict[int, list[float]] = field(default_factory=dict)
    copies: dict[int, list[float]] = field(default_factory=dict)
    calls: dict[int, dict[str, list[float]]] = field(default_factory=dict)


STORAGE_CALLS = ("list", "list_dirs", "read_bytes", "read_versioned", "put", "put_if_absent",
                 "put_if_version", "copy_many", "delete_files")


def instrument(storage: Any) -> dict[str, list[float]]:
    """Count and time the calls of a sink's storage: method -> [calls, seconds].

    Wraps the methods on this one instance (calls a method makes to another,
    e.g. ``delete_prefix`` listing first, are counted too); clear the dict to reset.
    """
    calls: dict[str, list[float]] = {}

    def wrap(name: str) -> None:
        original = getattr(storage, name)

        @functools.wraps(original)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            t, result = timed(lambda: original(*args, **kwargs))
            entry = calls.setdefault(name, [0, 0.0])
            entry[0] += 1
            entry[1] += t
            return result

        setattr(storage, name, wrapper)

    for name in STORAGE_CALLS:
        wrap(name)
    return calls


def bench_s3(endpoint: str, sizes: list[int], reps: int, workers: list[int],
             log: Callable[[str], None]) -> list[S3Result]:
    """Benchmark 2: promotion of one epoch on S3, copy_workers=16 vs 1."""
    options = {"endpoint_url": endpoint, **S3_CREDS}
    client = s3_client(endpoint)
    results = []
    for n in sizes:
        res = S3Result(n, reps, {w: [] for w in workers}, {w: [] for w in workers},
                       {w: [] for w in workers})
        for rep in range(reps):
            order = workers if rep % 2 == 0 else list(reversed(workers))
            for w in order:
                moto_reset(endpoint)
                bucket = f"bench-{n}-{rep}-{w}"
                client.create_bucket(Bucket=bucket)
                sink = Sink(f"s3://{bucket}/tables/events", NAMESPACE, storage_options=options,
                            config=SinkConfig(copy_workers=w))
                txn = sink.begin(EPOCH)
                staging = sink.layout.staging(txn.epoch, txn.attempt)
                prefix = staging.split("/", 1)[1]
                with ThreadPoolExecutor(8) as pool:
                    list(pool.map(lambda i, p=prefix, b=bucket: client.put_object(
                        Bucket=b, Key=f"{p}/{file_name(i)}", Body=_BLOCK[: file_size(i)]),
                        range(n)))
                calls = instrument(sink.storage)
                t_pre, _ = timed(lambda s=sink, t=txn: s.precommit(t))
                calls.clear()
                t_commit, result = timed(lambda s=sink, t=txn: s.commit(t))
                res.calls[w] = {k: list(v) for k, v in calls.items()}  # last rep's are kept
                if result.outcome != "committed" or len(sink.committed_files()[EPOCH]) != n:
                    raise RuntimeError(f"S3 commit of {n} files did not publish them")
                res.precommit[w].append(t_pre)
                res.commit[w].append(t_commit)
                res.copies[w].append(res.calls[w].get("copy_many", [0, 0.0])[1])
            log(f"  s3 n={n:>5} rep {rep + 1}/{reps}: " + ", ".join(
                f"workers={w} {fmt_s(res.commit[w][-1])}" for w in workers))
        results.append(res)
    moto_reset(endpoint)
    return results


# ---------------------------------------------------------- 3. memory and sizes
class XComProbe:
    """``PrecommitSensor._pointer`` run in ``bench/xcom_probe.py``, a separate process.

    Started on first use (so its Airflow import overlaps no timed call), kept for
    the run, stopped by :meth:`close`. Airflow is never imported in this process.
    """

    def __init__(self) -> None:
        self.proc: subprocess.Popen[str] | None = None
        self.errors = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 (closed in close())

    def pointer(self, target: str, txn: Transaction) -> dict[str, Any]:
        """The sensor's pointer for a pre-committed ``txn``: {pointer, json_bytes, seconds}
        or {error}."""
        if self.proc is None:
            self.proc = subprocess.Popen(
                [sys.executable, str(Path(__file__).with_name("xcom_probe.py"))],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.errors, text=True,
                env={**os.environ, "PYTHONPATH": os.pathsep.join(
                    [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])})
        assert self.proc.stdin is not None and self.proc.stdout is not None
        # What the submit task pushes (StagedSparkSubmitOperator.execute) and the sensor pulls.
        doc = {**txn.to_dict(), "storage_conn_id": None, "storage_options": {}}
        try:
            self.proc.stdin.write(json.dumps({"target": target, "namespace": NAMESPACE,
                                              "txn": doc}) + "\n")
            self.proc.stdin.flush()
            for line in self.proc.stdout:
                if line.startswith(XCOM_MARK):
                    return dict(json.loads(line[len(XCOM_MARK):]))
        except OSError as exc:
            return {"error": f"probe process: {exc}"}
        self.errors.seek(0)
        return {"error": "probe process ended: " + self.errors.read()[-500:]}

    def close(self) -> None:
        if self.proc is not None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None
        self.errors.close()


@dataclass
class MemResult:
    n: int
    staged_bytes: int
    manifest_bytes: int
    decision_bytes: int
    marker_bytes: int
    precommit_peak: int
    commit_peak: int
    #: len(json.dumps(pointer)) of the PrecommitSensor's XCom; None if Airflow is missing.
    xcom_bytes: int | None = None
    #: seconds of PrecommitSensor._pointer (re-load, read and validate the manifest).
    pointer_s: float | None = None
    xcom_error: str | None = None
    xcom_pointer: dict[str, Any] | None = None


def bench_memory(pool: FilePool, workdir: str, log: Callable[[str], None],
                 probe: XComProbe | None = None) -> MemResult:
    """Benchmark 3: tracemalloc peak of precommit/commit, record sizes, the XCom pointer."""
    base = tempfile.mkdtemp(prefix=f"mem-{pool.n:06d}-", dir=workdir)
    with tpc_staged(pool, base, "size") as (sink, txn):
        tracemalloc.start()
        try:
            tracemalloc.reset_peak()
            sink.precommit(txn)
            pre_peak = tracemalloc.get_traced_memory()[1]
            manifest_bytes = os.path.getsize(
                os.path.join(sink.layout.staging(txn.epoch, txn.attempt), MANIFEST_NAME))
        finally:
            tracemalloc.stop()
        # Between pre-commit and commit, as in the DAG: the sensor validates and pushes.
        xcom = probe.pointer(os.path.join(base, "tpc_size"), txn) if probe else \
            {"error": "not measured"}
        tracemalloc.start()
        try:
            tracemalloc.reset_peak()
            sink.commit(txn)
            commit_peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        decision = sink.layout.record(txn.epoch, txn.attempt, "decision")
        res = MemResult(pool.n, sum(file_size(i) for i in range(pool.n)), manifest_bytes,
                        os.path.getsize(decision), os.path.getsize(sink.layout.marker(EPOCH)),
                        pre_peak, commit_peak, xcom.get("json_bytes"), xcom.get("seconds"),
                        xcom.get("error"), xcom.get("pointer"))
    shutil.rmtree(base)
    log(f"  memory n={pool.n:>6}: commit peak {fmt_bytes(res.commit_peak)}, decision "
        f"{fmt_bytes(res.decision_bytes)}, XCom pointer "
        + (f"{res.xcom_bytes} B" if res.xcom_bytes is not None else f"n/a ({res.xcom_error})"))
    return res


# ------------------------------------------------------------------ reporting
def load_average() -> str:
    with contextlib.suppress(OSError, AttributeError):
        return " / ".join(f"{x:.2f}" for x in os.getloadavg())
    return "unknown"


def machine_info(workdir: str) -> dict[str, str]:
    """What a reader needs to judge the numbers."""
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as fh:
        for line in fh:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem = ""
    with contextlib.suppress(OSError, ValueError), open("/proc/meminfo") as fh:
        kib = int(fh.readline().split()[1])
        mem = f"{kib / 1024**2:.1f} GiB"
    fs = "unknown"
    with contextlib.suppress(OSError), open("/proc/mounts") as fh:
        best = ""
        real = os.path.realpath(workdir)
        for line in fh:
            parts = line.split()
            if len(parts) > 2 and real.startswith(parts[1]) and len(parts[1]) >= len(best):
                best, fs = parts[1], parts[2]
    commit = "unknown"
    with contextlib.suppress(OSError, subprocess.CalledProcessError):
        commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                                capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--",
                                "airflow_tpc"], capture_output=True, text=True,
                               check=True).stdout.strip()
        if dirty:
            commit += " + uncommitted changes in airflow_tpc/"
    import boto3
    import moto

    return {
        "CPU": f"{cpu}, {os.cpu_count()} cores",
        "Memory": mem or "unknown",
        "OS": f"{platform.system()} {platform.release()}",
        "File system (work dir)": fs,
        "Python": platform.python_version(),
        "boto3 / moto": f"{boto3.__version__} / {moto.__version__}",
        "airflow-tpc commit": commit,
        "Load average (1/5/15 min) at start": load_average(),
        "Date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    }


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |",
             "|" + "|".join("---:" if i else "---" for i in range(len(header))) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def image(plots: dict[str, str], key: str, alt: str, skipped: str | None) -> list[str]:
    """Markdown for one plot (``plots``: key -> path relative to the report); or why none."""
    if key in plots:
        return [f"![{alt}]({plots[key]})", ""]
    return [f"*(Plot skipped: {skipped})*", ""] if skipped else []


def render(args: argparse.Namespace, info: dict[str, str], local: list[LocalResult],
           profile: list[ProfileRow], profile_n: int, s3: list[S3Result],
           mem: list[MemResult], elapsed: float, summary_block: str = "",
           plots: dict[str, str] | None = None, plots_skipped: str | None = None) -> str:
    """The markdown report."""
    plots = plots or {}
    out = ["# Benchmarks", "",
           "Generated by `scripts/bench.sh` (which runs `bench/bench_core.py` for this page "
           "and `bench/bench_spark.py` for [bench-spark.md](bench-spark.md)); do not edit "
           "by hand, run it again (see `bench/README.md`).", ""]
    if summary_block:
        out += [summary_block, ""]
    out += ["## The transaction core", "",
            f"Command: `{command_line(args)}` ({'quick' if args.quick else 'full'} mode, "
            f"{elapsed:.0f} s wall). The Spark end-to-end benchmark is in "
            "[bench-spark.md](bench-spark.md).", "",
            "| Machine | |", "|---|---|"]
    out += [f"| {k} | {v} |" for k, v in info.items()]
    loads = [float(v.split(" / ")[0]) for k, v in info.items()
             if k.startswith("Load average") and v != "unknown"]
    if loads and max(loads) > (os.cpu_count() or 1):
        out += ["", f"**Note:** the machine was busy with other work during this run (1-minute "
                f"load average up to {max(loads):.1f} on {os.cpu_count()} cores): absolute "
                "times are inflated and noisy; the ratios, taken from interleaved "
                "repetitions, are the more reliable figures."]
    out += ["", "Every figure is a median over the repetitions of one run, and every ratio "
            "divides two medians of the same run. Staged files are small (1-4 KiB, "
            "deterministic sizes), created once per size and moved from run to run with one "
            "directory rename (so every run sees them equally cached). They are written "
            "without fsync (as Spark's writers do) and flushed with `sync` before anything "
            "is timed, so no timed fsync pays for them. Nothing here is asserted: these are "
            "measurements, not tests.", ""]

    if local:
        out += ["## 1. Local disk: commit of one epoch vs FileOutputCommitter v1", "",
                "- **v1 renames**: Spark's FileOutputCommitter v1 job commit — list "
                "`_temporary/0/task_*` and `os.rename` each file into the output directory "
                "(the files sit in one committed task folder; a real job has one per task, "
                "and listing and removing more of them would only slow the baseline). "
                "This is the baseline of every ratio.",
                "- **v1 incl. cleanup**: the same plus removing `_temporary` and writing "
                "`_SUCCESS` (what commitJob also does); shown, not used in ratios.",
                "- **tpc precommit**: `sink.precommit(txn)` — list staging, sha256 every file, "
                "write the manifest (same for both verify modes).",
                "- **tpc commit**: `sink.commit(txn)` alone (begin, staging and precommit done): "
                "re-list and verify staging (`verify=\"size\"`: sizes; `\"checksum\"`: also "
                "re-hash every file), write the decision record (the commit point, fsynced), "
                "promote by one directory rename, write the published record.",
                "- **ratio** = tpc commit / v1 renames: the time the tpc commit takes in "
                "multiples of v1's (below 1x the tpc commit is faster). "
                "First the ratio of the medians, then the *paired* ratio: the median over "
                "repetitions of (tpc / v1) measured back to back in the same repetition, which "
                "cancels slow drifts in machine load.",
                ""]
        rows = []
        for r in local:
            rows.append([f"{r.n:,}", str(r.reps), fmt_s(median(r.v1_rename)),
                         fmt_s(median(r.v1_total)),
                         fmt_s(median(r.precommit["size"] + r.precommit["checksum"])),
                         fmt_s(median(r.commit["size"])),
                         ratios(r.commit["size"], r.v1_rename),
                         fmt_s(median(r.commit["checksum"])),
                         ratios(r.commit["checksum"], r.v1_rename),
                         ratios(r.commit["checksum"], r.commit["size"])])
        out += [table(["files", "reps", "v1 renames", "v1 incl. cleanup", "tpc precommit",
                       "tpc commit (size)", "ratio tpc/v1 (size)", "tpc commit (checksum)",
                       "ratio tpc/v1 (checksum)", "checksum/size"], rows), ""]
        out += ["Per-file cost (median commit time / files):", ""]
        rows = [[f"{r.n:,}", f"{median(r.v1_rename) / r.n * 1e6:,.1f} µs",
                 f"{median(r.commit['size']) / r.n * 1e6:,.1f} µs",
                 f"{median(r.commit['checksum']) / r.n * 1e6:,.1f} µs"] for r in local]
        out += [table(["files", "v1 renames", "tpc commit (size)", "tpc commit (checksum)"],
                      rows), ""]
        out += ["Spread (min – max over the repetitions):", ""]
        rows = [[f"{r.n:,}", spread(r.v1_rename), spread(r.commit["size"]),
                 spread(r.commit["checksum"])] for r in local]
        out += [table(["files", "v1 renames", "tpc commit (size)", "tpc commit (checksum)"],
                      rows), ""]
        out += image(plots, "local", "Local commit time vs files: v1 renames, tpc commit "
                     "(size, checksum) and precommit, log-log; and the paired ratio tpc/v1",
                     plots_skipped)
    if profile:
        total = sum(p[2] for p in profile)
        out += [f"### Where a local commit spends its time ({profile_n:,} files, "
                "verify=\"size\")", "",
                "cProfile of one `commit()`, top functions by own time (the profiler inflates "
                "times; compare shares, not values).", ""]
        rows = [[f"`{label}`", f"{calls:,}", f"{own * 1000:,.0f} ms",
                 f"{cum * 1000:,.0f} ms"] for label, calls, own, cum in profile]
        out += [table(["function", "calls", "own time", "cumulative"], rows), "",
                f"(These {len(profile)} functions: {total * 1000:,.0f} ms of own time.)", ""]

    if s3:
        out += ["## 2. S3 (moto server): promotion of one epoch, parallel vs sequential copies",
                "",
                "moto's server runs as a separate process on 127.0.0.1 (real HTTP; no network, "
                "no real S3 latency: on AWS each copy takes tens of ms, so parallelism matters "
                "more there). Files are staged with `put_object`, then `sink.precommit(txn)` "
                "(listing; the ETag is the checksum) and `sink.commit(txn)` are timed; "
                "`verify=\"checksum\"` (the default; ETags come with the listing). Ratios as in "
                "section 1 (of the medians, then paired). "
                "**copies** is the time inside `storage.copy_many` alone (server-side "
                "`CopyObject` per file); the rest of commit is listings, the decision "
                "record, the marker's compare-and-swap and deleting the staged objects.", ""]
        rows = []
        for r in s3:
            w1, wn = min(r.commit), max(r.commit)
            rows.append([f"{r.n:,}", str(r.reps),
                         fmt_s(median(r.precommit[w1] + r.precommit[wn])),
                         fmt_s(median(r.commit[w1])), fmt_s(median(r.copies[w1])),
                         fmt_s(median(r.commit[wn])), fmt_s(median(r.copies[wn])),
                         ratios(r.commit[w1], r.commit[wn]),
                         ratios(r.copies[w1], r.copies[wn])])
        w1, wn = min(s3[0].commit), max(s3[0].commit)
        out += [table(["files", "reps", "precommit", f"commit, copy_workers={w1}",
                       "of which copies", f"commit, copy_workers={wn}", "of which copies",
                       f"ratio commit {w1}/{wn}", f"ratio copies {w1}/{wn}"], rows), ""]
        out += ["Spread (min – max):", ""]
        rows = [[f"{r.n:,}", spread(r.commit[w1]), spread(r.commit[wn])] for r in s3]
        out += [table(["files", f"commit, copy_workers={w1}", f"commit, copy_workers={wn}"],
                      rows), ""]
        big = s3[-1]
        calls = big.calls.get(wn, {})
        if calls:
            out += [f"Storage calls made by one commit ({big.n:,} files, copy_workers={wn}, "
                    "last repetition; `list` is a paged recursive listing, `copy_many` all "
                    "the copies):", ""]
            rows = [[f"`{name}`", f"{int(c)}", fmt_s(t)]
                    for name, (c, t) in sorted(calls.items(), key=lambda kv: -kv[1][1])]
            rows.append(["total in storage calls", "", fmt_s(sum(t for _, t in calls.values()))])
            rows.append(["whole commit (this repetition)", "", fmt_s(big.commit[wn][-1])])
            out += [table(["storage method", "calls", "time"], rows), ""]
        out += image(plots, "s3", "S3 commit time, copy_workers=1 vs 16, with the share of "
                     "the copies", plots_skipped)

    if mem:
        out += ["## 3. Memory, record and XCom sizes vs files (local store, verify=\"size\")",
                "",
                "tracemalloc peak of the Python heap during one `precommit()` and one "
                "`commit()` (allocations by Python code only; the peak is above what was "
                "already allocated when the call began). The decision record embeds the "
                "whole manifest (it is the commit point and must be self-sufficient), and the "
                "published marker lists every file again for readers.",
                "",
                "**XCom pointer** is what `PrecommitSensor` pushes as its XCom "
                "(`len(json.dumps(pointer))`), from the real code path: "
                "`PrecommitSensor._pointer` called on the pre-committed transaction, between "
                "`precommit()` and `commit()` as in the DAG, in a separate Python process "
                "(`bench/xcom_probe.py`) so that Airflow's import weighs on none of the "
                "timings here. **sensor validation** is the time of that call: re-load the "
                "transaction from the ledger, read and validate the manifest (digest, every "
                "entry).", ""]
        rows = []
        for m in mem:
            rows.append([f"{m.n:,}", fmt_bytes(m.staged_bytes), fmt_bytes(m.manifest_bytes),
                         f"{m.manifest_bytes / m.n:,.0f} B", fmt_bytes(m.decision_bytes),
                         f"{m.decision_bytes / m.n:,.0f} B", fmt_bytes(m.marker_bytes),
                         f"{m.xcom_bytes:,} B" if m.xcom_bytes is not None else "n/a",
                         fmt_s(m.pointer_s) if m.pointer_s is not None else "n/a",
                         fmt_bytes(m.precommit_peak), fmt_bytes(m.commit_peak),
                         f"{m.commit_peak / m.n / 1024:,.2f} KiB"])
        out += [table(["files", "data staged", "manifest", "manifest / file",
                       "decision record", "decision / file", "published marker",
                       "XCom pointer", "sensor validation", "precommit peak", "commit peak",
                       "commit peak / file"], rows), ""]
        errors = sorted({m.xcom_error for m in mem if m.xcom_error})
        if errors:
            out += ["XCom pointer not measured: " + "; ".join(errors), ""]
        sample = next((m for m in reversed(mem) if m.xcom_pointer), None)
        if sample is not None:
            out += [f"The pointer at {sample.n:,} files (its `manifest_uri` names the "
                    "target's path, here a temporary directory: a longer target path makes "
                    "it longer by as many bytes):", "", "```json",
                    json.dumps(sample.xcom_pointer, indent=1), "```", ""]
        out += image(plots, "memory", "Manifest, decision record, published marker and XCom "
                     "pointer sizes vs files; precommit and commit heap peaks vs files",
                     plots_skipped)
    return "\n".join(out).rstrip() + "\n"


# ----------------------------------------------------------------------- main
def command_line(args: argparse.Namespace) -> str:
    """The command as a reader would type it (defaults left out)."""
    cmd = ".venv/bin/python bench/bench_core.py" + (" --quick" if args.quick else "")
    if args.reps:
        cmd += f" --reps {args.reps}"
    for o in args.only or []:
        cmd += f" --only {o}"
    return cmd


def results(args: argparse.Namespace, info: dict[str, str], local: list[LocalResult],
            profile: list[ProfileRow], profile_n: int, s3: list[S3Result],
            mem: list[MemResult], elapsed: float, load_start: float,
            load_end: float) -> dict[str, Any]:
    """Everything measured, as saved in bench/results/core.json (plots and summary use it)."""
    return {
        "schema": 1, "command": command_line(args), "mode": "quick" if args.quick else "full",
        "elapsed_s": elapsed, "load_start": round(load_start, 2), "load_end": round(load_end, 2),
        "info": {**info, "cores": os.cpu_count()},
        "local": [dataclasses.asdict(r) for r in local],
        "profile": {"n": profile_n, "rows": [list(p) for p in profile]},
        "s3": [{"n": r.n, "reps": r.reps,
                **{k: {str(w): v for w, v in getattr(r, k).items()}
                   for k in ("precommit", "commit", "copies", "calls")}} for r in s3],
        "memory": [dataclasses.asdict(m) for m in mem],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="fewer repetitions, no 100,000-file case (~1-2 min on 2 cores)")
    parser.add_argument("--output", default=str(DEFAULT_OUTPUT),
                        help="markdown file to write (default: docs/benchmarks.md); '-' for none")
    parser.add_argument("--workdir", default=None,
                        help="where to stage files (default: a temp dir, removed at the end)")
    parser.add_argument("--only", choices=["local", "s3", "memory"], action="append",
                        help="run only these benchmarks (repeatable)")
    parser.add_argument("--reps", type=int, default=None,
                        help="repetitions per case (default 3 quick, 5 full; at most 3 for "
                        "100,000 files)")
    parser.add_argument("--results", default=str(RESULTS),
                        help="JSON of every measurement (default: bench/results/core.json); "
                        "written with the markdown")
    parser.add_argument("--no-plots", action="store_true",
                        help="tables only (plots also skip themselves without matplotlib)")
    args = parser.parse_args(argv)
    only = set(args.only or ["local", "s3", "memory"])

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    local_sizes = [100, 1_000, 10_000] + ([] if args.quick else [100_000])
    s3_sizes = [100, 1_000]
    reps = args.reps or (3 if args.quick else 5)
    profile_n = 10_000

    started = time.perf_counter()
    load_start = os.getloadavg()[0]
    workdir = tempfile.mkdtemp(prefix="tpc-bench-", dir=args.workdir)
    probe = XComProbe() if "memory" in only else None
    local: list[LocalResult] = []
    profile: list[ProfileRow] = []
    s3: list[S3Result] = []
    mem: list[MemResult] = []
    try:
        info = machine_info(workdir)
        if only & {"local", "memory"}:
            log("1. local commit vs FileOutputCommitter v1" if "local" in only else
                "3. memory and record sizes")
            for n in local_sizes:
                size_dir = tempfile.mkdtemp(prefix=f"n{n:06d}-", dir=workdir)
                pool = FilePool(size_dir, n)
                if "local" in only:
                    local.append(bench_local(pool, size_dir, min(reps, 3) if n >= 100_000
                                             else reps, log))
                    if n == profile_n:
                        profile = profile_local_commit(pool, size_dir)
                if "memory" in only:
                    mem.append(bench_memory(pool, size_dir, log, probe))
                shutil.rmtree(size_dir)
            log(f"   ({time.perf_counter() - started:.0f} s so far)")
        if "s3" in only:
            log("2. S3 (moto server) parallel vs sequential promotion")
            with moto_server() as endpoint:
                s3 = bench_s3(endpoint, s3_sizes, reps, [1, 16], log)
            log(f"   ({time.perf_counter() - started:.0f} s so far)")
    finally:
        if probe is not None:
            probe.close()
        shutil.rmtree(workdir, ignore_errors=True)
    info["Load average (1/5/15 min) at end"] = load_average()
    elapsed = time.perf_counter() - started
    data = results(args, info, local, profile, profile_n, s3, mem, elapsed, load_start,
                   os.getloadavg()[0])
    plots: dict[str, str] = {}
    skipped = "--no-plots" if args.no_plots else plotting.unavailable()
    summary_block = ""
    if args.output != "-":
        out = Path(args.output)
        out.parent.mkdir(parents=True, exist_ok=True)
        Path(args.results).parent.mkdir(parents=True, exist_ok=True)
        Path(args.results).write_text(json.dumps(data, indent=1) + "\n")
        log(f"results saved to {args.results}")
        if not skipped:
            drawn = plotting.plot_core(data, out.parent / "img")
            plots = {k: os.path.relpath(v, out.parent) for k, v in drawn.items()}
            log("plots: " + ", ".join(str(v) for v in drawn.values()))
        else:
            log(f"plots skipped: {skipped}")
        summary_block = summary.render(data, summary.load("spark"))
    report = render(args, info, local, profile, profile_n, s3, mem, elapsed, summary_block,
                    plots, skipped)
    print(report)
    if args.output != "-":
        Path(args.output).write_text(report)
        log(f"written to {args.output}")
    return 0


if __name__ == "__main__":
    # SIGTERM unwinds like Ctrl-C: the moto server is stopped and the work dir removed.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    raise SystemExit(main())
