"""What every benchmark shares: timing, interleaving, paired ratios, servers, results.

- statistics: :func:`median`, :func:`paired` (median over repetitions of the ratio of
  two timings of the same repetition), :func:`rotated` (who goes first rotates each
  repetition), :func:`timed`;
- formatting for the report: :func:`fmt_s`, :func:`fmt_x` (within 5 % of 1 is
  *parity*), :func:`fmt_b`, :func:`table` (Markdown), :func:`verdict`;
- servers: moto's S3 (:func:`moto_server`), SeaweedFS (:func:`seaweed`, started as the
  tests start it: ``tests/seaweed.py``), Azurite (:func:`azurite`: ``tests/azurite.py``)
  and the latency proxy (:class:`Proxy`:
  ``tests/faults/proxy.py`` in a process of its own, adding latency to every request and
  counting requests per operation; ``python bench/harness.py proxy UPSTREAM MIN MAX``);
- the run's context (:func:`run_info`: machine, load, the commit measured) and
  :func:`save` of a results JSON, from which ``bench/report.py`` writes the documents.

Nothing here asserts on a time: benchmarks measure and report.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import io
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
#: A ratio within this of 1 is reported as parity.
PARITY = 0.05
#: Of the results JSON; older results are not read (run the benchmark again).
SCHEMA = 3
#: The object-store variants timed only up to SLOW_MAX files (bench_s3.py, its report).
SEQ, FLOOR = "copy, copy_workers=1", "copy, no added latency"
#: The sequential copies take ~75 ms a file behind the latency.
SLOW_MAX = 1_000
MOTO_CREDS = {"key": "testing", "secret": "testing-secret-key", "region_name": "us-east-1"}
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ------------------------------------------------------------------ statistics
def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def median(values: Any) -> float:
    values = list(values)
    return statistics.median(values) if values else float("nan")


def paired(num: list[float], den: list[float]) -> float:
    """Median over repetitions of num/den, both timed in the same repetition."""
    return median(a / b for a, b in zip(num, den, strict=False) if b > 0)


def rotated(variants: list[str], rep: int) -> list[str]:
    """The variants in repetition ``rep``'s order: each goes first in turn."""
    k = rep % len(variants)
    return variants[k:] + variants[:k]


def interleave(variants: list[str], reps: int, run: Callable[[str, int], Any],
               after_rep: Callable[[int, dict[str, list[Any]]], None] | None = None
               ) -> dict[str, list[Any]]:
    """``run(variant, rep)`` for every variant of every repetition, order rotating."""
    out: dict[str, list[Any]] = {v: [] for v in variants}
    for rep in range(reps):
        for v in rotated(variants, rep):
            out[v].append(run(v, rep))
        if after_rep:
            after_rep(rep, out)
    return out


# ------------------------------------------------------------------ formatting
def fmt_s(seconds: float) -> str:
    if seconds != seconds:
        return "n/a"
    return f"{seconds * 1000:.1f} ms" if seconds < 1 else f"{seconds:,.2f} s"


def fmt_x(x: float) -> str:
    """A ratio; within 5 % of 1 it is parity."""
    if x != x:
        return "n/a"
    if abs(x - 1) <= PARITY:
        return f"{x:.2f}x (parity)"
    return f"{x:.3g}x" if x < 1 else f"{x:,.2f}x"


def fmt_b(n: float) -> str:
    for unit in ("B", "KiB", "MiB"):
        if abs(n) < 1024:
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    return f"{n:,.2f} GiB"


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    """A Markdown table; columns whose first cell is a short figure align right."""
    first = rows[0] if rows else header
    return ["| " + " | ".join(header) + " |",
            "|" + "|".join("---:" if c[:1].isdigit() and len(c) < 24 else "---"
                           for c in first) + "|",
            *("| " + " | ".join(r) + " |" for r in rows), ""]


def verdict(ok: bool | None) -> str:
    return "not measured" if ok is None else "**met**" if ok else "**not met**"


# ------------------------------------------------------------------ servers
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _stop(proc: subprocess.Popen[Any]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@contextlib.contextmanager
def moto_server() -> Iterator[str]:
    """moto's S3 server as a separate process on 127.0.0.1 (~2x faster than threaded)."""
    exe = Path(sys.executable).with_name("moto_server")
    port = free_port()
    proc = subprocess.Popen([str(exe) if exe.exists() else "moto_server", "-H", "127.0.0.1",
                             "-p", str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with _NO_PROXY.open(f"{endpoint}/moto-api/", timeout=1):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"moto_server did not start on {port}") from None
                time.sleep(0.1)
        yield endpoint
    finally:
        _stop(proc)


def moto_reset(endpoint: str) -> None:
    """Drop every bucket of moto, so each run starts from the same state."""
    req = urllib.request.Request(f"{endpoint}/moto-api/reset", method="POST")
    with _NO_PROXY.open(req, timeout=30):
        pass


@contextlib.contextmanager
def seaweed() -> Iterator[Any]:
    """SeaweedFS (``weed mini``: S3 and an Iceberg REST catalog), as the tests start it."""
    sys.path.insert(0, str(ROOT))
    from tests import seaweed as sw

    with tempfile.TemporaryDirectory(prefix="bench-seaweed-") as work:
        server = sw.start(Path(work))
        try:
            yield server
        finally:
            server.stop()


@contextlib.contextmanager
def azurite() -> Iterator[Any]:
    """Azurite's Blob service (``azurite-blob``), as the tests start it (``tests/azurite.py``:
    ``.tools/azurite``, a free port of 127.0.0.1, its data in a temporary folder)."""
    sys.path.insert(0, str(ROOT))
    from tests import azurite as az

    with tempfile.TemporaryDirectory(prefix="bench-azurite-") as work:
        server = az.start(Path(work))
        try:
            yield server
        finally:
            server.stop()


def s3_client(endpoint: str, key: str, secret: str) -> Any:
    import boto3
    from botocore.config import Config

    return boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=key,
                        aws_secret_access_key=secret, region_name="us-east-1",
                        config=Config(max_pool_connections=16))


def put_many(client: Any, staging_uri: str, bodies: list[bytes], n: int) -> None:
    """Stage n files straight into the store (not through a proxy), as a job would."""
    bucket, prefix = staging_uri.split("://", 1)[1].split("/", 1)
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda i: client.put_object(
            Bucket=bucket, Key=f"{prefix.rstrip('/')}/part-{i:06d}.parquet",
            Body=bodies[i % len(bodies)]), range(n)))


def parquet_bodies(epoch: str, distinct: int = 16) -> list[bytes]:
    """Small Parquet files of the events schema (id, value, epoch), 20-35 rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = []
    for k in range(distinct):
        ids = list(range(k * 100, k * 100 + 20 + k))
        buf = io.BytesIO()
        pq.write_table(pa.table({"id": pa.array(ids, pa.int64()),
                                 "value": pa.array([f"v{i}" for i in ids]),
                                 "epoch": pa.array([epoch] * len(ids))}), buf)
        out.append(buf.getvalue())
    return out


class Proxy:
    """``tests/faults/proxy.py`` adding a uniform latency to every request, in a process
    of its own (its relaying never competes for the benchmark's GIL); counts requests."""

    def __init__(self, upstream: str, latency_ms: tuple[float, float]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "proxy", upstream, *map(str, latency_ms)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline() if self.proc.stdout else ""
        if not line.startswith("PROXY "):
            self.close()
            raise RuntimeError("the latency proxy did not start")
        self.endpoint = line.split()[1]

    def requests(self) -> dict[str, int]:
        """Requests per operation since the previous call."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("stats\n")
        self.proc.stdin.flush()
        return dict(json.loads(self.proc.stdout.readline().removeprefix("STATS ")))

    def close(self) -> None:
        with contextlib.suppress(OSError):
            if self.proc.stdin:
                self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            _stop(self.proc)


def _proxy_main(upstream: str, lo_ms: str, hi_ms: str) -> int:
    sys.path.insert(0, str(ROOT))
    from tests.faults.proxy import FaultPlan, FaultProxy

    lo, hi = float(lo_ms) / 1000, float(hi_ms) / 1000
    with FaultProxy(upstream, FaultPlan(latency_rate=1.0 if hi > 0 else 0.0,
                                        latency_s=(lo, hi)), seed=10) as proxy:
        print(f"PROXY {proxy.endpoint}", flush=True)
        for line in sys.stdin:
            if line.strip() == "stats":
                counts = {str(op): n for op, n in proxy.stats.requests.items()}
                proxy.reset_stats()
                print("STATS " + json.dumps(counts, sort_keys=True), flush=True)
    return 0


# ------------------------------------------------------------------ the run
def load_average() -> float:
    return round(os.getloadavg()[0], 2)


def code_measured() -> str:
    """HEAD, flagged when ``airflow_tpc/`` has uncommitted changes, or the export on
    PYTHONPATH that was imported instead (``TPC_BENCH_CODE`` says which)."""
    try:
        git = ["git", "-C", str(ROOT)]
        head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run([*git, "status", "--porcelain", "--", "airflow_tpc"],
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    import airflow_tpc

    where = Path(airflow_tpc.__file__).resolve().parent
    if not where.is_relative_to(ROOT):
        return f"{head} ({os.environ.get('TPC_BENCH_CODE') or f'airflow_tpc from {where}'})"
    return head + (" + uncommitted changes in airflow_tpc/" if dirty else "")


def run_info(command: str, mode: str) -> dict[str, Any]:
    """What a reader needs to judge the figures, taken at the start of a run."""
    cpu = platform.machine()
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as fh:
        cpu = next((ln.split(":", 1)[1].strip() for ln in fh if ln.startswith("model name")),
                   cpu)
    return {"schema": SCHEMA, "command": command, "mode": mode, "code": code_measured(),
            "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": f"{cpu}, {os.cpu_count()} cores, {platform.system()} "
                       f"{platform.release()}, Python {platform.python_version()}",
            "cores": os.cpu_count(), "load_start": load_average(),
            "_started": time.perf_counter()}


def save(data: dict[str, Any], path: str | Path, quiet: bool = False) -> None:
    """Close the run (elapsed time, load at end) and write its results JSON."""
    data["elapsed_s"] = round(time.perf_counter() - data.pop("_started"), 1)
    data["load_end"] = load_average()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(data, indent=1) + "\n")
    if not quiet:
        log(f"results saved to {path}")


def add_common_args(parser: Any, results: str) -> None:
    parser.add_argument("--quick", action="store_true", help="smaller sizes, fewer reps")
    parser.add_argument("--smoke", action="store_true",
                        help="tiny sizes, one rep: proves it runs (the test suite); its "
                        "figures mean nothing")
    parser.add_argument("--reps", type=int, default=None)
    parser.add_argument("--results", default=str(RESULTS / results), help="results JSON")
    parser.add_argument("--output", default=None,
                        help="document to write (default the one under docs/; '-' prints)")


def mode(args: Any) -> str:
    return "smoke" if args.smoke else "quick" if args.quick else "full"


def on_sigterm() -> None:
    """SIGTERM unwinds like Ctrl-C: servers stop, work dirs go."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))


def rmtree(path: str | Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["proxy"]:
        raise SystemExit(_proxy_main(*sys.argv[2:5]))
    raise SystemExit("usage: python bench/harness.py proxy UPSTREAM MIN_MS MAX_MS")
