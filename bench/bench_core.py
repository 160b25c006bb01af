"""Benchmarks of the airflow-tpc transaction core (local disk and S3 through moto).

Run from the repository root::

    .venv/bin/python bench/bench_core.py            # full run (~10 min on 2 busy cores)
    .venv/bin/python bench/bench_core.py --quick    # a few minutes

Four benchmarks, each reported as medians over repetitions, with every ratio
computed from timings taken in the same run, interleaved (numbers from
different machines or runs are never compared):

1. local commit of one epoch vs Hadoop's real ``FileOutputCommitter``
   (``commitJob`` of algorithm v1, and v2 for reference), run through py4j from
   pyspark's own jars on the same files;
2. flat in history: the same commit on a target with 500 past epochs (some
   with aborted attempts) vs on a fresh target;
3. S3 (moto server behind ``tests/faults/proxy.py`` adding real-S3-like latency
   to every request): copy promotion with parallel vs sequential copies, and
   ``promotion="manifest"``, with the requests each commit makes;
4. memory (tracemalloc peak), record sizes and the XCom pointer the
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
import io
import json
import logging
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
import plotting  # noqa: E402  (bench/plotting.py)
import summary  # noqa: E402  (bench/summary.py)
import tables_report  # noqa: E402  (bench/tables_report.py)

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUTPUT = ROOT / "docs" / "benchmarks.md"
RESULTS = ROOT / "bench" / "results" / "core.json"
NAMESPACE = "bench"
EPOCH = "2026-01-01"
S3_CREDS = {"key": "testing", "secret": "testing-secret-key", "region_name": "us-east-1"}
_BLOCK = os.urandom(4096)
XCOM_MARK = "XCOM-PROBE "  # reply lines of bench/xcom_probe.py
#: For moto's own API on 127.0.0.1: never through an HTTP proxy from the environment.
_LOCAL_HTTP = urllib.request.build_opener(urllib.request.ProxyHandler({}))
#: Names of the published marker and the decision record (found by name, so that the
#: benchmark does not import the core's internal layout).
MARKER_NAME = "_tpc_published.json"
DECISION_PREFIX = "decision"


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


def paired(num: list[float], den: list[float]) -> float:
    """Median over repetitions of num/den, both measured in the same repetition."""
    return median([a / b for a, b in zip(num, den, strict=False) if b > 0])


def fmt_s(seconds: float) -> str:
    """A duration for a table: ms below 1 s."""
    if seconds != seconds:  # NaN
        return "n/a"
    return f"{seconds * 1000:.1f} ms" if seconds < 1 else f"{seconds:,.2f} s"


def fmt_x(x: float) -> str:
    """A ratio: 3 significant digits below 1 (0.0123x), two decimals above."""
    if x != x:
        return "n/a"
    return f"{x:.3g}x" if x < 1 else f"{x:,.2f}x"


def ratios(num: list[float], den: list[float]) -> str:
    """Ratio of the medians, and the paired ratio: the median of per-repetition ratios.

    Both sides of a pair ran in the same repetition, so the paired ratio cancels
    slow drifts in machine load.
    """
    if not num or not den:
        return "n/a"
    return f"{fmt_x(median(num) / median(den))} (paired {fmt_x(paired(num, den))})"


def fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    return f"{n:,.1f} GiB"  # pragma: no cover


def spread(values: list[float]) -> str:
    """min-max of the repetitions, for the reader to judge the noise."""
    return f"{fmt_s(min(values))} – {fmt_s(max(values))}" if values else ""


def rotated(variants: list[str], rep: int) -> list[str]:
    """The variants in the order of repetition ``rep``: who goes first rotates."""
    k = rep % len(variants)
    return variants[k:] + variants[:k]


def local_path(uri: str) -> str:
    return uri[len("file://"):] if uri.startswith("file://") else uri


def write_local_files(directory: str, n: int, start: int = 0) -> None:
    """What Spark tasks leave behind: ``n`` small files (no fsync, as Spark's writers)."""
    os.makedirs(directory, exist_ok=True)
    for i in range(start, start + n):
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
        self.names = {file_name(i) for i in range(n)}
        write_local_files(self.path, n)

    def move_to(self, dest: str) -> None:
        """Put the files at ``dest`` (an absent or empty directory)."""
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        os.rename(self.path, dest)

    def take_back(self, src: str) -> None:
        """Recover the files from ``src``, dropping whatever else is there (markers, _SUCCESS)."""
        with os.scandir(src) as entries:
            for e in entries:
                if e.name not in self.names:
                    if e.is_dir(follow_symlinks=False):
                        shutil.rmtree(e.path)
                    else:
                        os.unlink(e.path)
        os.rename(src, self.path)
        left = len(os.listdir(self.path))
        if left != self.n:
            raise RuntimeError(f"file pool holds {left} files, expected {self.n}")


def tpc_config(variant: str, **kw: Any) -> SinkConfig:
    """``SinkConfig`` of a tpc variant: "default" (no arguments) or a verify mode."""
    return SinkConfig(**kw) if variant == "default" else SinkConfig(verify=variant, **kw)


def tpc_variants() -> list[str]:
    """"default", then each explicit verify mode the core accepts that is not the default."""
    default = getattr(SinkConfig(), "verify", None)
    out = ["default"]
    for mode in ("size", "checksum"):
        if mode == default:
            continue
        try:
            SinkConfig(verify=mode)
        except Exception:  # noqa: BLE001 - a mode the reshaped core no longer has
            continue
        out.append(mode)
    return out


def variant_label(variant: str) -> str:
    if variant == "default":
        return f"default settings (verify=\"{getattr(SinkConfig(), 'verify', '?')}\")"
    return f"verify=\"{variant}\""


@contextlib.contextmanager
def tpc_staged(pool: FilePool, target: str, variant: str, epoch: str = EPOCH,
               sink: Sink | None = None) -> Iterator[tuple[Sink, Transaction]]:
    """A sink (new unless given), ``begin()`` done and the pool's files in staging.

    After the caller's commit, the published files go back to the pool.
    """
    sink = sink or Sink(target, NAMESPACE, config=tpc_config(variant))
    txn = sink.begin(epoch)
    staging = local_path(txn.staging_uri)
    with contextlib.suppress(FileNotFoundError):
        os.rmdir(staging)  # begin may create it empty
    pool.move_to(staging)
    flush_page_cache_writes()
    yield sink, txn
    published = local_path(sink.output_uri(epoch))
    pool.take_back(published if os.path.isdir(published) and
                   any(n in pool.names for n in os.listdir(published)) else staging)


def run_tpc(pool: FilePool, base: str, variant: str) -> tuple[float, float]:
    """Seconds of ``precommit()`` and of ``commit()`` alone, for one epoch on a new target."""
    with tpc_staged(pool, os.path.join(base, f"tpc_{variant}"), variant) as (sink, txn):
        t_pre, _ = timed(lambda: sink.precommit(txn))
        flush_page_cache_writes()  # precommit's reads may have dirtied atimes
        t_commit, result = timed(lambda: sink.commit(txn))
        if result.outcome != "committed":
            raise RuntimeError(f"commit outcome {result.outcome}")
    return t_pre, t_commit


# ----------------------------------------- 1. local vs Hadoop's FileOutputCommitter
class HadoopCommitter:
    """Hadoop's real ``FileOutputCommitter``, from pyspark's own jars, driven through py4j.

    A local SparkSession (``local[1]``, no UI) is started on first use and only
    its JVM is used: a ``JobContextImpl`` and a ``TaskAttemptContextImpl`` with
    a real ``JobID``/``TaskAttemptID``, then ``setupJob``, ``setupTask``, the
    files laid into the task attempt's work path (as a Spark task's writer
    leaves them), ``commitTask`` and ``commitJob``, each timed from Python
    around one py4j call.
    """

    def __init__(self) -> None:
        self.spark: Any = None
        self.jobs = 0
        self.version = "unknown"

    def start(self) -> None:
        if self.spark is not None:
            return
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        from pyspark.sql import SparkSession

        self.spark = (SparkSession.builder.master("local[1]").appName("bench-core-hadoop")
                      .config("spark.ui.enabled", "false")
                      .config("spark.ui.showConsoleProgress", "false").getOrCreate())
        self.spark.sparkContext.setLogLevel("ERROR")
        jvm = self.spark._jvm
        self.version = str(jvm.org.apache.hadoop.util.VersionInfo.getVersion())

    def stop(self) -> None:
        if self.spark is not None:
            self.spark.stop()
            self.spark = None

    def run(self, pool: FilePool, base: str, algorithm: int) -> tuple[float, float]:
        """Commit the pool's files as one task's output; (seconds of commitTask, of commitJob)."""
        self.start()
        jvm = self.spark._jvm
        mr = jvm.org.apache.hadoop.mapreduce
        out = os.path.join(base, f"v{algorithm}_output")
        uri = "file://" + out
        conf = jvm.org.apache.hadoop.conf.Configuration(
            self.spark.sparkContext._jsc.hadoopConfiguration())
        conf.set("mapreduce.output.fileoutputformat.outputdir", uri)
        conf.setInt("mapreduce.fileoutputcommitter.algorithm.version", algorithm)
        self.jobs += 1
        job_id = mr.JobID("tpcbench", self.jobs)
        attempt = mr.TaskAttemptID(mr.TaskID(job_id, mr.TaskType.MAP, 0), 0)
        job_ctx = mr.task.JobContextImpl(conf, job_id)
        task_ctx = mr.task.TaskAttemptContextImpl(conf, attempt)
        committer = mr.lib.output.FileOutputCommitter(jvm.org.apache.hadoop.fs.Path(uri),
                                                      task_ctx)
        committer.setupJob(job_ctx)
        committer.setupTask(task_ctx)
        work = committer.getWorkPath().toUri().getPath()
        with contextlib.suppress(FileNotFoundError):
            os.rmdir(work)
        pool.move_to(work)
        flush_page_cache_writes()
        t_task, _ = timed(lambda: committer.commitTask(task_ctx))
        t_job, _ = timed(lambda: committer.commitJob(job_ctx))
        if not os.path.exists(os.path.join(out, "_SUCCESS")):
            raise RuntimeError("FileOutputCommitter wrote no _SUCCESS")
        pool.take_back(out)
        return t_task, t_job


@dataclass
class LocalResult:
    n: int
    reps: int
    #: "v1" / "v2" -> seconds of commitTask and of commitJob, one per repetition.
    task_commit: dict[str, list[float]] = field(default_factory=dict)
    job_commit: dict[str, list[float]] = field(default_factory=dict)
    #: tpc variant ("default", "size", "checksum") -> seconds, one per repetition.
    precommit: dict[str, list[float]] = field(default_factory=dict)
    commit: dict[str, list[float]] = field(default_factory=dict)


def bench_local(pool: FilePool, workdir: str, reps: int, hadoop: HadoopCommitter,
                with_v2: bool, log: Callable[[str], None]) -> LocalResult:
    """Benchmark 1: one epoch's commit on a local disk, tpc vs Hadoop's committer."""
    n = pool.n
    tpc = tpc_variants()
    hadoop_variants = ["v1", "v2"] if with_v2 else ["v1"]
    res = LocalResult(n, reps, {v: [] for v in hadoop_variants},
                      {v: [] for v in hadoop_variants}, {v: [] for v in tpc},
                      {v: [] for v in tpc})
    for rep in range(reps):
        for variant in rotated(hadoop_variants + tpc, rep):
            base = tempfile.mkdtemp(prefix=f"local-{n}-{rep}-{variant}-", dir=workdir)
            if variant in hadoop_variants:
                t_task, t_job = hadoop.run(pool, base, int(variant[1]))
                res.task_commit[variant].append(t_task)
                res.job_commit[variant].append(t_job)
            else:
                t_pre, t_commit = run_tpc(pool, base, variant)
                res.precommit[variant].append(t_pre)
                res.commit[variant].append(t_commit)
            shutil.rmtree(base)
        log(f"  local n={n:>6} rep {rep + 1}/{reps}: v1 commitJob "
            f"{fmt_s(res.job_commit['v1'][-1])}, "
            + (f"v2 commitTask+Job {fmt_s(res.task_commit['v2'][-1] + res.job_commit['v2'][-1])}"
               ", " if with_v2 else "")
            + ", ".join(f"tpc {v} {fmt_s(res.commit[v][-1])}" for v in tpc))
    return res


ProfileRow = tuple[str, int, float, float]


def profile_local_commit(pool: FilePool, workdir: str, top: int = 10) -> list[ProfileRow]:
    """cProfile of one local commit (default settings): top functions by own time.

    Returns (function, calls, own seconds, cumulative seconds); times are inflated
    by the profiler, so only their shares matter.
    """
    base = tempfile.mkdtemp(prefix="profile-", dir=workdir)
    prof = cProfile.Profile()
    with tpc_staged(pool, os.path.join(base, "tpc"), "default") as (sink, txn):
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


# ------------------------------------------------------ 2. flat in history
def history_epoch(i: int) -> str:
    return (_dt.date(2024, 1, 1) + _dt.timedelta(days=i)).isoformat()


def build_history(target: str, epochs: int, log: Callable[[str], None]) -> dict[str, int]:
    """A target with ``epochs`` committed epochs of 2 files each, default settings.

    Every 10th epoch (from the 4th) first has an attempt aborted after its
    pre-commit, every 10th (from the 8th) an attempt aborted before it; the epoch is
    then committed by a later attempt. Returns counts for the report.
    """
    # The aborts of pre-committed attempts log a WARNING each (a loud discard): expected here.
    logging.getLogger("airflow_tpc").setLevel(logging.ERROR)
    sink = Sink(target, NAMESPACE, config=SinkConfig())
    counts = {"epochs": epochs, "attempts_aborted_after_precommit": 0,
              "attempts_aborted_before_precommit": 0, "files_per_epoch": 2}
    started = time.perf_counter()
    for i in range(epochs):
        epoch = history_epoch(i)
        if i % 10 in (3, 7):
            txn = sink.begin(epoch)
            write_local_files(local_path(txn.staging_uri), 2, start=i * 10)
            if i % 10 == 3:
                sink.precommit(txn)
                counts["attempts_aborted_after_precommit"] += 1
            else:
                counts["attempts_aborted_before_precommit"] += 1
            sink.abort(txn, "bench: aborted attempt in the history")
        txn = sink.begin(epoch)
        write_local_files(local_path(txn.staging_uri), 2, start=i * 10)
        sink.precommit(txn)
        if sink.commit(txn).outcome != "committed":
            raise RuntimeError(f"history epoch {epoch} did not commit")
        if (i + 1) % 100 == 0:
            log(f"  history: {i + 1}/{epochs} epochs ({time.perf_counter() - started:.0f} s)")
    counts["build_s"] = round(time.perf_counter() - started, 1)
    return counts


@dataclass
class HistoryResult:
    n: int
    reps: int
    epochs: int
    fresh: list[float] = field(default_factory=list)
    history: list[float] = field(default_factory=list)


def bench_history(pool: FilePool, workdir: str, history_target: str, epochs: int, reps: int,
                  log: Callable[[str], None]) -> HistoryResult:
    """Benchmark 2: one commit on the history target vs on a fresh target (interleaved)."""
    res = HistoryResult(pool.n, reps, epochs)
    hist_sink = Sink(history_target, NAMESPACE, config=SinkConfig())
    for rep in range(reps):
        for variant in rotated(["fresh", "history"], rep):
            if variant == "fresh":
                base = tempfile.mkdtemp(prefix=f"fresh-{pool.n}-{rep}-", dir=workdir)
                ctx = tpc_staged(pool, os.path.join(base, "tpc"), "default")
            else:  # a new epoch after the history's (one more each repetition)
                base = None
                ctx = tpc_staged(pool, history_target, "default",
                                 epoch=f"2026-{pool.n % 12 + 1:02d}-{rep + 1:02d}",
                                 sink=hist_sink)
            with ctx as (sink, txn):
                sink.precommit(txn)
                flush_page_cache_writes()
                t, result = timed(lambda s=sink, x=txn: s.commit(x))
                if result.outcome != "committed":
                    raise RuntimeError(f"commit outcome {result.outcome}")
            (res.fresh if variant == "fresh" else res.history).append(t)
            if base:
                shutil.rmtree(base)
        log(f"  history n={pool.n:>5} rep {rep + 1}/{reps}: fresh {fmt_s(res.fresh[-1])}, "
            f"{epochs} past epochs {fmt_s(res.history[-1])}")
    return res


# ------------------------------------------------------------- 3. S3 through moto
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


class LatencyProxy:
    """``bench/s3_proxy.py`` (the fault proxy, latency only) in a process of its own."""

    def __init__(self, upstream: str, latency_ms: tuple[float, float]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name("s3_proxy.py")), upstream,
             str(latency_ms[0]), str(latency_ms[1])],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("PROXY "):
            self.close()
            raise RuntimeError("bench/s3_proxy.py did not start")
        self.endpoint = line.split()[1]

    def requests(self) -> dict[str, int]:
        """Requests per S3 operation since the previous call."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("stats\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line.startswith("STATS "):
            raise RuntimeError("bench/s3_proxy.py stopped answering")
        return dict(json.loads(line[len("STATS "):]))

    def close(self) -> None:
        if self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


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


#: The S3 variants: name -> SinkConfig keyword arguments.
S3_MODES: dict[str, dict[str, Any]] = {
    "copy, default workers": {},
    "copy, copy_workers=1": {"copy_workers": 1},
    "manifest": {"promotion": "manifest"},
}
#: The same as the first mode through a proxy adding no latency: what moto alone allows.
S3_FLOOR = "copy, default workers, no added latency"


@dataclass
class S3Result:
    n: int
    reps: int
    latency_ms: list[float]
    default_workers: int
    precommit: dict[str, list[float]] = field(default_factory=dict)
    commit: dict[str, list[float]] = field(default_factory=dict)
    #: mode -> per repetition, requests per S3 operation made by the commit / the precommit.
    commit_requests: dict[str, list[dict[str, int]]] = field(default_factory=dict)
    precommit_requests: dict[str, list[dict[str, int]]] = field(default_factory=dict)


def bench_s3(moto: str, proxy: LatencyProxy, floor: LatencyProxy, n: int, reps: int,
             latency_ms: tuple[float, float], log: Callable[[str], None]) -> S3Result:
    """Benchmark 3: one epoch's commit on S3 behind latency, in each promotion mode.

    Files are staged straight into moto (not through the proxy); the sink talks to
    moto only through the proxy, so every request it makes waits the added latency
    and is counted.
    """
    client = s3_client(moto)
    modes = [*S3_MODES, S3_FLOOR]
    res = S3Result(n, reps, list(latency_ms), SinkConfig().copy_workers,
                   {m: [] for m in modes}, {m: [] for m in modes}, {m: [] for m in modes},
                   {m: [] for m in modes})
    for rep in range(reps):
        for mode in rotated(modes, rep):
            moto_reset(moto)
            bucket = f"bench-{n}-{rep}-{modes.index(mode)}"
            client.create_bucket(Bucket=bucket)
            via = floor if mode == S3_FLOOR else proxy
            sink = Sink(f"s3://{bucket}/tables/events", NAMESPACE,
                        storage_options={"endpoint_url": via.endpoint, **S3_CREDS},
                        config=SinkConfig(**S3_MODES.get(mode, {})))
            txn = sink.begin(EPOCH)
            prefix = txn.staging_uri.split("://", 1)[1].split("/", 1)[1].rstrip("/")
            with ThreadPoolExecutor(8) as pool:
                list(pool.map(lambda i, p=prefix, b=bucket: client.put_object(
                    Bucket=b, Key=f"{p}/{file_name(i)}", Body=_BLOCK[: file_size(i)]),
                    range(n)))
            via.requests()
            t_pre, _ = timed(lambda s=sink, t=txn: s.precommit(t))
            res.precommit_requests[mode].append(via.requests())
            t_commit, result = timed(lambda s=sink, t=txn: s.commit(t))
            res.commit_requests[mode].append(via.requests())
            if result.outcome != "committed":
                raise RuntimeError(f"S3 commit of {n} files ({mode}): {result.outcome}")
            res.precommit[mode].append(t_pre)
            res.commit[mode].append(t_commit)
        log(f"  s3 n={n:>5} rep {rep + 1}/{reps}: " + ", ".join(
            f"{m} {fmt_s(res.commit[m][-1])} ({sum(res.commit_requests[m][-1].values())} req)"
            for m in modes))
    moto_reset(moto)
    return res


# ---------------------------------------------------------- 4. memory and sizes
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
                env={**os.environ, "PYTHONPATH": os.pathsep.join(  # an export wins, as here
                    [*filter(None, [os.environ.get("PYTHONPATH")]), str(ROOT)])})
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


def find_record(root: str, epoch: str, prefix: str) -> str | None:
    """The largest file named ``prefix*`` whose path names ``epoch=<epoch>``, under ``root``."""
    best: tuple[int, str] | None = None
    for dirpath, _dirs, files in os.walk(root):
        if f"epoch={epoch}" not in dirpath:
            continue
        for name in files:
            if name.startswith(prefix):
                path = os.path.join(dirpath, name)
                size = os.path.getsize(path)
                if best is None or size > best[0]:
                    best = (size, path)
    return best[1] if best else None


def bench_memory(pool: FilePool, workdir: str, log: Callable[[str], None],
                 probe: XComProbe | None = None) -> MemResult:
    """Benchmark 4: tracemalloc peak of precommit/commit, record sizes, the XCom pointer."""
    base = tempfile.mkdtemp(prefix=f"mem-{pool.n:06d}-", dir=workdir)
    target = os.path.join(base, "tpc")
    with tpc_staged(pool, target, "default") as (sink, txn):
        tracemalloc.start()
        try:
            tracemalloc.reset_peak()
            sink.precommit(txn)
            pre_peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        manifest_bytes = os.path.getsize(local_path(sink.manifest_uri(txn)))
        # Between pre-commit and commit, as in the DAG: the sensor validates and pushes.
        xcom = probe.pointer(target, txn) if probe else {"error": "not measured"}
        tracemalloc.start()
        try:
            tracemalloc.reset_peak()
            sink.commit(txn)
            commit_peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        decision = find_record(os.path.join(target, "_tpc"), EPOCH, DECISION_PREFIX)
        marker = os.path.join(local_path(sink.output_uri(EPOCH)), MARKER_NAME)
        res = MemResult(pool.n, sum(file_size(i) for i in range(pool.n)), manifest_bytes,
                        os.path.getsize(decision) if decision else -1,
                        os.path.getsize(marker) if os.path.exists(marker) else -1,
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
        commit = code_origin(commit)
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


def code_origin(commit: str) -> str:
    """``commit``, unless ``airflow_tpc`` was imported from outside this checkout.

    To measure a commit while the working tree has other changes, put an export
    of it first on PYTHONPATH (``git archive HEAD airflow_tpc | tar -x -C DIR``)
    and say so in ``TPC_BENCH_CODE``; the report then names HEAD and that export.
    """
    import airflow_tpc

    where = Path(airflow_tpc.__file__).resolve().parent
    if where.is_relative_to(ROOT):
        return commit
    head = commit.split(" ")[0]
    origin = os.environ.get("TPC_BENCH_CODE") or f"airflow_tpc imported from {where}"
    return f"{head} ({origin})"


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


def render(args: argparse.Namespace, data: dict[str, Any], local: list[LocalResult],
           profile: list[ProfileRow], profile_n: int, history: list[HistoryResult],
           s3: list[S3Result], mem: list[MemResult], summary_block: str = "",
           plots: dict[str, str] | None = None, plots_skipped: str | None = None) -> str:
    """The markdown report."""
    plots = plots or {}
    info = data["info"]
    out = ["# Benchmarks", "",
           "Generated by `scripts/bench.sh` (which runs `bench/bench_core.py` for this page "
           "and `bench/bench_spark.py` for [bench-spark.md](bench-spark.md)); do not edit "
           "by hand, run it again (see `bench/README.md`).", ""]
    if summary_block:
        out += [summary_block, ""]
    out += ["## The transaction core", "",
            f"Command: `{data['command']}` ({data['mode']} mode, "
            f"{data['elapsed_s']:.0f} s wall). The Spark end-to-end benchmark is in "
            "[bench-spark.md](bench-spark.md).", "",
            "| Machine | |", "|---|---|"]
    out += [f"| {k} | {v} |" for k, v in info.items() if k != "cores"]
    loads = [data["load_start"], data["load_end"]]
    if max(loads) > (os.cpu_count() or 1):
        out += ["", f"**Note:** the machine was busy with other work during this run (1-minute "
                f"load average {loads[0]:.1f} at start, {loads[1]:.1f} at end, on "
                f"{os.cpu_count()} cores): absolute times are inflated and noisy; the ratios, "
                "taken from interleaved repetitions, are the more reliable figures."]
    out += ["", "Every figure is a median over the repetitions of one run, and every ratio "
            "divides two timings of the same run: first the ratio of the medians, then the "
            "*paired* ratio, the median over repetitions of the ratio of the two timings "
            "taken in the same repetition (which cancels slow drifts in machine load). The "
            "variants of a benchmark are interleaved and the order rotates every repetition. "
            "Staged files are small (1-4 KiB, deterministic sizes), created once per size and "
            "moved from run to run with one directory rename (so every run sees them equally "
            "cached). They are written without fsync (as Spark's writers do) and flushed "
            "with `sync` before anything is timed, so no timed fsync pays for them. Nothing "
            "here is asserted: these are measurements, not tests.", ""]

    if local:
        tpc = list(local[0].commit)
        hadoop = data.get("hadoop_version", "?")
        out += ["## 1. Local disk: commit of one epoch vs Hadoop's FileOutputCommitter", "",
                f"The baseline is Spark's real committer: Hadoop {hadoop}'s "
                "`org.apache.hadoop.mapreduce.lib.output.FileOutputCommitter` from pyspark's "
                "own jars, driven through py4j in a local SparkSession's JVM with a real "
                "`JobContextImpl` / `TaskAttemptContextImpl` (`JobID`, `TaskAttemptID`): "
                "`setupJob`, `setupTask`, the files laid in the task attempt's work path (as a "
                "task's writer leaves them, one task holding all the files), `commitTask`, "
                "then `commitJob`, each timed around its one py4j call.", "",
                "- **v1 commitJob**: algorithm version 1 (Spark's default). `commitTask` "
                "renamed the attempt folder to `_temporary/0/task_*` (one rename); "
                "`commitJob` lists the committed task folders, merges each file into the "
                "output folder (`mergePaths`: a status check and a rename per file through "
                "Hadoop's checksummed `LocalFileSystem`), deletes `_temporary` and writes "
                "`_SUCCESS`. **The baseline of every ratio.** Files written by Spark would "
                "also have `.crc` side files that the rename moves too; these have none, "
                "which favours v1.",
                "- **v2 commitTask + commitJob** (reference): algorithm version 2 moves the "
                "files into the output folder at `commitTask` (file by file; output is visible "
                "before the job commits, so v2 is not atomic) and `commitJob` only cleans up.",
                "- **tpc commit**: `sink.commit(txn)` alone (begin, staging and "
                "`sink.precommit(txn)` done before), on a new target, with "
                + ", ".join(variant_label(v) for v in tpc) + ".",
                "- **ratio** = tpc commit / v1 commitJob (below 1x the tpc commit is faster).",
                ""]
        rows = []
        for r in local:
            row = [f"{r.n:,}", str(r.reps), fmt_s(median(r.job_commit["v1"])),
                   fmt_s(median([a + b for a, b in zip(r.task_commit["v2"], r.job_commit["v2"],
                                                       strict=True)]))
                   if "v2" in r.job_commit else "not run"]
            row.append(fmt_s(median(r.precommit["default"])))
            for v in tpc:
                row += [fmt_s(median(r.commit[v])), ratios(r.commit[v], r.job_commit["v1"])]
            rows.append(row)
        header = ["files", "reps", "v1 commitJob", "v2 commitTask + commitJob",
                  "tpc precommit (default)"]
        for v in tpc:
            header += [f"tpc commit ({v})", f"ratio tpc ({v}) / v1"]
        out += [table(header, rows), ""]
        out += ["Per-file cost (median / files) and spread (min – max over the repetitions):",
                ""]
        rows = [[f"{r.n:,}", f"{median(r.job_commit['v1']) / r.n * 1e6:,.1f} µs",
                 spread(r.job_commit["v1"]),
                 *[c for v in tpc for c in (f"{median(r.commit[v]) / r.n * 1e6:,.2f} µs",
                                            spread(r.commit[v]))]] for r in local]
        out += [table(["files", "v1 commitJob / file", "v1 spread",
                       *[c for v in tpc for c in (f"tpc ({v}) / file", f"tpc ({v}) spread")]],
                      rows), ""]
        out += image(plots, "local", "Local commit time vs files: Hadoop FileOutputCommitter "
                     "v1 commitJob (and v2) vs the tpc commit, log-log; and the paired ratio "
                     "tpc/v1", plots_skipped)
    if profile:
        total = sum(p[2] for p in profile)
        out += [f"### Where a local commit spends its time ({profile_n:,} files, default "
                "settings)", "",
                "cProfile of one `commit()`, top functions by own time (the profiler inflates "
                "times; compare shares, not values).", ""]
        rows = [[f"`{label}`", f"{calls:,}", f"{own * 1000:,.0f} ms",
                 f"{cum * 1000:,.0f} ms"] for label, calls, own, cum in profile]
        out += [table(["function", "calls", "own time", "cumulative"], rows), "",
                f"(These {len(profile)} functions: {total * 1000:,.0f} ms of own time.)", ""]

    if history:
        h = data.get("history_target") or {}
        out += ["## 2. Flat in history: one commit on a target with past epochs vs a fresh one",
                "",
                f"A target is first given {h.get('epochs', '?')} committed epochs "
                f"({h.get('files_per_epoch', '?')} files each; "
                f"{h.get('attempts_aborted_after_precommit', '?')} of them also have an attempt "
                "aborted after its pre-commit and "
                f"{h.get('attempts_aborted_before_precommit', '?')} one aborted before it), "
                f"built in {h.get('build_s', '?')} s, default settings. Then, interleaved, the "
                "same commit (a new epoch of the same files, `sink.commit(txn)` alone) on that "
                "target and on a new, empty target. Each repetition adds one epoch to the "
                "history. **ratio** = with history / fresh (1x: the history costs nothing). "
                "A commit lists only its own epoch's ledger and the pending index "
                "(docs/PROTOCOL.md §5.8); the first commit on the fresh target also builds "
                "that index (a listing of its empty ledger and one more write), so a ratio "
                "below 1 means the history costs nothing, not that it speeds a commit up.",
                ""]
        rows = [[f"{r.n:,}", str(r.reps), str(r.epochs), fmt_s(median(r.fresh)),
                 fmt_s(median(r.history)), ratios(r.history, r.fresh), spread(r.fresh),
                 spread(r.history)] for r in history]
        out += [table(["files in the commit", "reps", "past epochs", "fresh target",
                       "target with history", "ratio history / fresh", "fresh spread",
                       "history spread"], rows), ""]

    if s3:
        out += ["## 3. S3 behind real-S3-like latency: copy promotion, parallel vs sequential, "
                "and manifest promotion", ""]
        for r in s3:
            lo, hi = r.latency_ms
            modes = list(r.commit)
            out += [f"moto's server runs as a separate process on 127.0.0.1; the sink reaches "
                    f"it only through `tests/faults/proxy.py` (run by `bench/s3_proxy.py` in "
                    f"a process of its own) which delays **every request by {lo:g}-{hi:g} ms** "
                    "(uniform), like a request to real S3, and counts the requests. The "
                    f"{r.n:,} files (1-4 KiB) are staged straight into moto, then "
                    "`sink.precommit(txn)` and `sink.commit(txn)` are timed; default "
                    "verification. Modes: **copy, default workers** = `SinkConfig()` "
                    f"(`copy_workers={r.default_workers}` server-side copies in parallel); "
                    "**copy, copy_workers=1** = the same copies one after the other; "
                    "**manifest** = `SinkConfig(promotion=\"manifest\")`, which publishes the "
                    "list of staged files and copies nothing; **copy, default workers, no "
                    "added latency** = the first mode through a second proxy that adds "
                    "nothing: what moto's server alone allows on this machine (it serves "
                    "every request from one Python process, a few ms of CPU each). When the "
                    "parallel commit behind latency takes about as long as this floor, the "
                    "emulator's CPU, not the latency, bounds it.", ""]
            base = modes[0]
            rows = []
            for m in modes:
                reqs = r.commit_requests[m][-1] if r.commit_requests[m] else {}
                pre = r.precommit_requests[m][-1] if r.precommit_requests[m] else {}
                rows.append([m, str(r.reps), fmt_s(median(r.precommit[m])),
                             str(sum(pre.values())), fmt_s(median(r.commit[m])),
                             ratios(r.commit[m], r.commit[base]) if m != base else "1x",
                             str(sum(reqs.values())),
                             ", ".join(f"{op} {c}" for op, c in sorted(
                                 reqs.items(), key=lambda kv: -kv[1])),
                             spread(r.commit[m])])
            out += [table(["mode", "reps", "precommit", "requests", "commit",
                           f"commit / commit ({base})", "requests per commit",
                           "by operation", "commit spread"], rows), ""]
            seq = "copy, copy_workers=1"
            if seq in r.commit:
                out += [f"**Parallel vs sequential copies** ({r.n:,} files): commit with "
                        f"copy_workers=1 / with {r.default_workers}: "
                        f"{ratios(r.commit[seq], r.commit[base])}.", ""]
        out += image(plots, "s3", "S3 commit time behind latency per promotion mode, and "
                     "requests per commit", plots_skipped)

    if mem:
        out += ["## 4. Memory, record and XCom sizes vs files (local store, default settings)",
                "",
                "tracemalloc peak of the Python heap during one `precommit()` and one "
                "`commit()` (allocations by Python code only; the peak is above what was "
                "already allocated when the call began); the size of the sealed manifest, of "
                "the decision record (the commit point) and of the published marker readers "
                "read.",
                "",
                "**XCom pointer** is what `PrecommitSensor` pushes as its XCom "
                "(`len(json.dumps(pointer))`), from the real code path: "
                "`PrecommitSensor._pointer` called on the pre-committed transaction, between "
                "`precommit()` and `commit()` as in the DAG, in a separate Python process "
                "(`bench/xcom_probe.py`) so that Airflow's import weighs on none of the "
                "timings here. **sensor validation** is the time of that call.", ""]
        rows = []
        for m in mem:
            rows.append([f"{m.n:,}", fmt_bytes(m.staged_bytes), fmt_bytes(m.manifest_bytes),
                         f"{m.manifest_bytes / m.n:,.0f} B",
                         fmt_bytes(m.decision_bytes) if m.decision_bytes >= 0 else "not found",
                         fmt_bytes(m.marker_bytes) if m.marker_bytes >= 0 else "not found",
                         f"{m.xcom_bytes:,} B" if m.xcom_bytes is not None else "n/a",
                         fmt_s(m.pointer_s) if m.pointer_s is not None else "n/a",
                         fmt_bytes(m.precommit_peak), fmt_bytes(m.commit_peak),
                         f"{m.commit_peak / m.n / 1024:,.2f} KiB"])
        out += [table(["files", "data staged", "manifest", "manifest / file",
                       "decision record", "published marker", "XCom pointer",
                       "sensor validation", "precommit peak", "commit peak",
                       "commit peak / file"], rows), ""]
        errors = sorted({m.xcom_error for m in mem if m.xcom_error})
        if errors:
            out += ["XCom pointer not measured: " + "; ".join(errors), ""]
        sample = next((m for m in reversed(mem) if m.xcom_pointer), None)
        if sample is not None:
            out += [f"The pointer at {sample.n:,} files (its `manifest_uri` names the "
                    "target's path, here a temporary directory):", "", "```json",
                    json.dumps(sample.xcom_pointer, indent=1), "```", ""]
        out += image(plots, "memory", "Manifest, decision record, published marker and XCom "
                     "pointer sizes vs files; precommit and commit heap peaks vs files",
                     plots_skipped)
    return "\n".join(out).rstrip() + "\n"


# ----------------------------------------------------------------------- main
def command_line(args: argparse.Namespace) -> str:
    """The command as a reader would type it (defaults left out)."""
    cmd = ".venv/bin/python bench/bench_core.py" + (" --quick" if args.quick else "") \
        + (" --smoke" if args.smoke else "")
    if args.reps:
        cmd += f" --reps {args.reps}"
    for o in args.only or []:
        cmd += f" --only {o}"
    if tuple(args.latency_ms) != (50.0, 100.0):
        cmd += f" --latency-ms {args.latency_ms[0]:g} {args.latency_ms[1]:g}"
    return cmd


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="smaller sizes and fewer repetitions (a few minutes on 2 cores)")
    parser.add_argument("--smoke", action="store_true",
                        help="tiny sizes, one repetition: proves the benchmark runs (the test "
                        "suite does this); its figures mean nothing")
    parser.add_argument("--output", default=str(DEFAULT_OUTPUT),
                        help="markdown file to write (default: docs/benchmarks.md); '-' for none")
    parser.add_argument("--workdir", default=None,
                        help="where to stage files (default: a temp dir, removed at the end)")
    parser.add_argument("--only", choices=["local", "history", "s3", "memory"],
                        action="append", help="run only these benchmarks (repeatable)")
    parser.add_argument("--reps", type=int, default=None,
                        help="repetitions per case (default 3 quick, 5 full; at most 3 for "
                        "100,000 files and for S3)")
    parser.add_argument("--latency-ms", type=float, nargs=2, default=[50.0, 100.0],
                        metavar=("MIN", "MAX"),
                        help="latency the proxy adds to every S3 request (default 50 100)")
    parser.add_argument("--results", default=str(RESULTS),
                        help="JSON of every measurement (default: bench/results/core.json); "
                        "written with the markdown")
    parser.add_argument("--no-plots", action="store_true",
                        help="tables only (plots also skip themselves without matplotlib)")
    args = parser.parse_args(argv)
    only = set(args.only or ["local", "history", "s3", "memory"])

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    local_sizes = [1_000, 10_000] if args.quick else [1_000, 10_000, 100_000]
    v2_max = 1_000 if args.quick else 10_000
    reps = args.reps or (3 if args.quick else 5)
    history_epochs = 200 if args.quick else 500
    history_sizes = [100, 1_000]
    s3_n = 200 if args.quick else 1_000
    s3_reps = args.reps or (2 if args.quick else 3)
    profile_n = 10_000
    if args.smoke:
        local_sizes, v2_max, reps, history_epochs = [200], 200, 1, 5
        history_sizes, s3_n, s3_reps, profile_n = [10], 10, 1, 200
    latency = (args.latency_ms[0], args.latency_ms[1])

    started = time.perf_counter()
    load_start = os.getloadavg()[0]
    workdir = tempfile.mkdtemp(prefix="tpc-bench-", dir=args.workdir)
    probe = XComProbe() if "memory" in only else None
    hadoop = HadoopCommitter()
    local: list[LocalResult] = []
    profile: list[ProfileRow] = []
    history: list[HistoryResult] = []
    history_info: dict[str, Any] = {}
    s3: list[S3Result] = []
    mem: list[MemResult] = []
    try:
        info = machine_info(workdir)
        if only & {"local", "memory"}:
            if "local" in only:
                log("1. local commit vs Hadoop FileOutputCommitter (starting the JVM)")
                hadoop.start()
                log(f"   Hadoop {hadoop.version} ({time.perf_counter() - started:.0f} s)")
            for n in local_sizes:
                size_dir = tempfile.mkdtemp(prefix=f"n{n:06d}-", dir=workdir)
                pool = FilePool(size_dir, n)
                if "local" in only:
                    local.append(bench_local(pool, size_dir, min(reps, 3) if n >= 100_000
                                             else reps, hadoop, n <= v2_max, log))
                    if n == profile_n:
                        profile = profile_local_commit(pool, size_dir)
                if "memory" in only:
                    mem.append(bench_memory(pool, size_dir, log, probe))
                shutil.rmtree(size_dir)
            hadoop.stop()
            log(f"   ({time.perf_counter() - started:.0f} s so far)")
        if "history" in only:
            log(f"2. flat in history: building a target with {history_epochs} epochs")
            hist_dir = tempfile.mkdtemp(prefix="history-", dir=workdir)
            target = os.path.join(hist_dir, "target")
            history_info = build_history(target, history_epochs, log)
            for n in history_sizes:
                pool = FilePool(tempfile.mkdtemp(prefix=f"hpool-{n}-", dir=workdir), n)
                history.append(bench_history(pool, workdir, target, history_epochs, reps, log))
            shutil.rmtree(hist_dir)
            log(f"   ({time.perf_counter() - started:.0f} s so far)")
        if "s3" in only:
            log(f"3. S3 behind {latency[0]:g}-{latency[1]:g} ms a request: promotion modes")
            with moto_server() as endpoint:
                proxy = LatencyProxy(endpoint, latency)
                floor = LatencyProxy(endpoint, (0.0, 0.0))
                try:
                    s3 = [bench_s3(endpoint, proxy, floor, s3_n, min(s3_reps, 3), latency,
                                   log)]
                finally:
                    proxy.close()
                    floor.close()
            log(f"   ({time.perf_counter() - started:.0f} s so far)")
    finally:
        hadoop.stop()
        if probe is not None:
            probe.close()
        shutil.rmtree(workdir, ignore_errors=True)
    info["Load average (1/5/15 min) at end"] = load_average()
    elapsed = time.perf_counter() - started
    data = {
        "schema": 2, "command": command_line(args),
        "mode": "smoke" if args.smoke else "quick" if args.quick else "full",
        "elapsed_s": elapsed, "load_start": round(load_start, 2),
        "load_end": round(os.getloadavg()[0], 2),
        "info": {**info, "cores": os.cpu_count()},
        "hadoop_version": hadoop.version,
        "local": [dataclasses.asdict(r) for r in local],
        "profile": {"n": profile_n, "rows": [list(p) for p in profile]},
        "history_target": history_info,
        "history": [dataclasses.asdict(r) for r in history],
        "s3": [dataclasses.asdict(r) for r in s3],
        "memory": [dataclasses.asdict(m) for m in mem],
    }
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
    report = render(args, data, local, profile, profile_n, history, s3, mem, summary_block,
                    plots, skipped)
    print(report)
    if args.output != "-":
        report = tables_report.keep_block(Path(args.output), report)  # bench_tables.py's
        Path(args.output).write_text(report)
        log(f"written to {args.output}")
    return 0


if __name__ == "__main__":
    # SIGTERM unwinds like Ctrl-C: the moto server is stopped and the work dir removed.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    raise SystemExit(main())
