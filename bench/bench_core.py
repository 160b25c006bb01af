"""The transaction core on a local disk: commit vs its floor and vs Hadoop's committer.

    .venv/bin/python bench/bench_core.py [--quick | --smoke] [--reps N]
        [--only local history memory] [--results bench/results/core.json] [--output -]

1. **Local commit** of one epoch (1k / 10k files; 100k in the full run), interleaved per
   repetition, order rotating: *floor* = one ``os.scandir`` + ``DirEntry.stat`` pass over
   the staged files (what any commit that checks each file must do); *tpc* =
   ``sink.commit(txn, expected_digest=...)`` alone, as CommitOperator calls it with the
   digest its sensor validated (begin, staging, precommit done untimed) on a target that
   committed one epoch before, default settings and each other ``verify`` mode, and
   the default on a fresh target (its first commit); *v1* = Hadoop's real
   ``FileOutputCommitter.commitJob`` (algorithm 1, Spark's default) from pyspark's jars
   through py4j on the same files; *v2* for reference up to 10k files. Ratios: tpc /
   floor and tpc / v1, paired per rep. A cProfile of one 10k-file commit says where the time goes.
2. **Flat in history**: the same commit on a target with 500 past epochs (some with
   aborted attempts) vs on a fresh target (the issue's measure) and on a target with
   one epoch (no first-commit set-up), interleaved.
3. **Memory and sizes**: the commit runs in a fresh child process that measures its
   resident set (``/proc/self/status``: VmRSS before the commit, VmHWM after it with the
   high-water mark reset just before, so the peak is the commit's own); tracemalloc
   peaks of ``precommit()`` and, in another child, of the same commit; the sizes of the
   manifest, the decision record, the published marker and the XCom pointer
   ``PrecommitSensor`` pushes (measured in a child that imports Airflow, never imported
   here).

Results go to ``bench/results/core.json``; ``bench/report.py`` writes docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import datetime as _dt
import gc
import json
import logging
import os
import pstats
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import tracemalloc
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness as h  # noqa: E402
import report  # noqa: E402

from airflow_tpc import Sink, SinkConfig, Transaction  # noqa: E402

NAMESPACE, EPOCH = "bench", "2026-01-01"
_BLOCK = os.urandom(4096)
MARKER_NAME, DECISION_PREFIX = "_tpc_published.json", "decision"
FIRST = "tpc first commit"  # the commit on a fresh target (the others: its second epoch)


def file_name(i: int) -> str:
    return f"part-{i:06d}-{uuid.UUID(int=i).hex[:8]}.c000.snappy.parquet"


def file_size(i: int) -> int:
    """Deterministic small-file size, 1-4 KiB."""
    return 1024 + (i * 797) % 3073


def write_files(directory: str, n: int, start: int = 0) -> None:
    """What Spark tasks leave behind: n small files, no fsync."""
    os.makedirs(directory, exist_ok=True)
    for i in range(start, start + n):
        with open(os.path.join(directory, file_name(i)), "wb") as fh:
            fh.write(_BLOCK[: file_size(i)])


def local(uri: str) -> str:
    return uri.removeprefix("file://")


class FilePool:
    """n files written once, then moved from run to run with one directory rename each
    way (writing 100k files costs more than any commit; every run sees them equally
    cached). ``os.sync`` runs before each timed call, so no timed fsync pays for them."""

    def __init__(self, base: str, n: int) -> None:
        self.n, self.path = n, os.path.join(base, "pool")
        self.names = {file_name(i) for i in range(n)}
        write_files(self.path, n)

    def move_to(self, dest: str) -> None:
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            os.rmdir(dest)  # begin() may have made it empty
        os.rename(self.path, dest)
        os.sync()

    def take_back(self, src: str) -> None:
        with os.scandir(src) as entries:
            for e in entries:
                if e.name not in self.names:
                    (shutil.rmtree if e.is_dir(follow_symlinks=False) else os.unlink)(e.path)
        os.rename(src, self.path)
        if len(os.listdir(self.path)) != self.n:
            raise RuntimeError("the file pool lost files")


def floor_pass(path: str) -> int:
    """One os.scandir + stat pass: the floor of any commit that checks each file."""
    n = 0
    with os.scandir(path) as entries:
        for e in entries:
            e.stat()
            n += 1
    return n


def tpc_variants() -> list[str]:
    """"tpc" (default settings), then each other verify mode the core accepts."""
    out = ["tpc"]
    for m in ("size", "checksum", "fingerprint"):
        if m != SinkConfig().verify:
            with contextlib.suppress(Exception):
                SinkConfig(verify=m)
                out.append(f"tpc verify={m}")
    return out


def config_of(variant: str) -> SinkConfig:
    return SinkConfig(verify=variant.split("=")[1]) if "=" in variant else SinkConfig()


@contextlib.contextmanager
def staged(pool: FilePool, target: str, variant: str = "tpc", epoch: str = EPOCH,
           sink: Sink | None = None) -> Iterator[tuple[Sink, Transaction]]:
    """begin(), the pool's files in staging, precommit() done; afterwards the files go
    back to the pool."""
    sink = sink or Sink(target, NAMESPACE, config=config_of(variant))
    txn = sink.begin(epoch)
    pool.move_to(local(txn.staging_uri))
    sink.precommit(txn)
    os.sync()
    yield sink, txn
    out = local(sink.output_uri(epoch))
    pool.take_back(out if os.path.isdir(out) and any(n in pool.names for n in os.listdir(out))
                   else local(txn.staging_uri))


def seasoned(target: str, variant: str = "tpc") -> str:
    """``target`` after one committed epoch of one file (untimed), as a target is from
    its second epoch on: its first commit also made its lock file, pending index and
    ledger folders, a one-off cost the "tpc first commit" variant measures."""
    sink = Sink(target, NAMESPACE, config=config_of(variant))
    txn = sink.begin("2025-12-31")
    write_files(local(txn.staging_uri), 1)
    sink.precommit(txn)
    if sink.commit(txn).outcome != "committed":
        raise RuntimeError("the seasoning epoch did not commit")
    return target


def sealed_digest(sink: Sink, txn: Transaction) -> str:
    """The manifest's digest, as the sensor's pointer hands it to CommitOperator."""
    manifest = sink.read_manifest(txn)
    assert manifest is not None
    return manifest.digest


def commit(sink: Sink, txn: Transaction, digest: str | None = None) -> float:
    """``sink.commit`` as CommitOperator calls it: with the digest its sensor validated
    (read here, untimed, when not given)."""
    digest = digest or sealed_digest(sink, txn)
    t, result = h.timed(lambda: sink.commit(txn, expected_digest=digest))
    if result.outcome != "committed":
        raise RuntimeError(f"commit outcome {result.outcome}")
    return t


class Hadoop:
    """Hadoop's real FileOutputCommitter from pyspark's jars, through py4j (a local
    SparkSession's JVM): real JobContextImpl / TaskAttemptContextImpl, setupJob,
    setupTask, the files laid in the task attempt's work path, commitTask, and
    commitJob timed alone."""

    def __init__(self) -> None:
        from pyspark.sql import SparkSession

        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        self.spark = (SparkSession.builder.master("local[1]").appName("bench-core")
                      .config("spark.ui.enabled", "false").getOrCreate())
        self.spark.sparkContext.setLogLevel("ERROR")
        self.jvm, self.jobs = self.spark._jvm, 0
        self.version = str(self.jvm.org.apache.hadoop.util.VersionInfo.getVersion())

    def run(self, pool: FilePool, base: str, algorithm: int) -> float:
        """Seconds of commitJob (v2: commitTask + commitJob, as v2 moves at commitTask)."""
        mr = self.jvm.org.apache.hadoop.mapreduce
        out = os.path.join(base, "output")
        conf = self.jvm.org.apache.hadoop.conf.Configuration(
            self.spark.sparkContext._jsc.hadoopConfiguration())
        conf.set("mapreduce.output.fileoutputformat.outputdir", "file://" + out)
        conf.setInt("mapreduce.fileoutputcommitter.algorithm.version", algorithm)
        self.jobs += 1
        job_id = mr.JobID("tpcbench", self.jobs)
        job = mr.task.JobContextImpl(conf, job_id)
        task = mr.task.TaskAttemptContextImpl(
            conf, mr.TaskAttemptID(mr.TaskID(job_id, mr.TaskType.MAP, 0), 0))
        committer = mr.lib.output.FileOutputCommitter(
            self.jvm.org.apache.hadoop.fs.Path("file://" + out), task)
        committer.setupJob(job)
        committer.setupTask(task)
        pool.move_to(committer.getWorkPath().toUri().getPath())
        t_task, _ = h.timed(lambda: committer.commitTask(task))
        t_job, _ = h.timed(lambda: committer.commitJob(job))
        if not os.path.exists(os.path.join(out, "_SUCCESS")):
            raise RuntimeError("FileOutputCommitter wrote no _SUCCESS")
        pool.take_back(out)
        return t_job + (t_task if algorithm == 2 else 0.0)

    def stop(self) -> None:
        self.spark.stop()


# ------------------------------------------------------------------ 1. local commit
def bench_local(pool: FilePool, work: str, reps: int, hadoop: Hadoop | None,
                with_v2: bool) -> dict[str, Any]:
    variants = ["floor", *tpc_variants(), FIRST, *(["v1"] if hadoop else []),
                *(["v2"] if hadoop and with_v2 else [])]

    def run(v: str, rep: int) -> float:
        base = tempfile.mkdtemp(prefix=f"{v.replace(' ', '_')}-", dir=work)
        try:
            if v == "floor":
                os.sync()
                t, count = h.timed(lambda: floor_pass(pool.path))
                assert count == pool.n
                return t
            if v in ("v1", "v2"):
                assert hadoop is not None
                return hadoop.run(pool, base, int(v[1]))
            target = os.path.join(base, "t")
            with staged(pool, target if v == FIRST else seasoned(target, v), v) as (sink, txn):
                return commit(sink, txn)
        finally:
            shutil.rmtree(base)

    def progress(rep: int, out: dict[str, list[float]]) -> None:
        h.log(f"  local n={pool.n:>6} rep {rep + 1}/{reps}: "
              + ", ".join(f"{v} {h.fmt_s(t[-1])}" for v, t in out.items()))

    return {"n": pool.n, "reps": reps, "times": h.interleave(variants, reps, run, progress)}


def profile_commit(pool: FilePool, work: str, top: int = 10) -> list[list[Any]]:
    """cProfile of one default commit: the top functions by own time."""
    base = tempfile.mkdtemp(prefix="profile-", dir=work)
    prof = cProfile.Profile()
    with staged(pool, seasoned(os.path.join(base, "t"))) as (sink, txn):
        digest = sealed_digest(sink, txn)
        prof.runcall(sink.commit, txn, expected_digest=digest)
    shutil.rmtree(base)
    rows = []
    for (file, line, func), (_cc, calls, own, cum, _) in \
            pstats.Stats(prof).stats.items():  # type: ignore[attr-defined]
        where = os.path.relpath(file, h.ROOT) if file.startswith(str(h.ROOT)) else \
            os.path.basename(file)
        rows.append([f"{func} ({where}:{line})" if file != "~" else func, calls, own, cum])
    return sorted(rows, key=lambda r: -r[2])[:top]


# ------------------------------------------------------------------ 2. history
def build_history(target: str, epochs: int) -> dict[str, Any]:
    """epochs committed epochs of 2 files; every 10th (from the 4th) also has an attempt
    aborted after its precommit, every 10th (from the 8th) one aborted before it."""
    logging.getLogger("airflow_tpc").setLevel(logging.ERROR)  # the aborts warn loudly
    sink = Sink(target, NAMESPACE)
    started = time.perf_counter()
    for i in range(epochs):
        epoch = (_dt.date(2024, 1, 1) + _dt.timedelta(days=i)).isoformat()
        if i % 10 in (3, 7):
            txn = sink.begin(epoch)
            write_files(local(txn.staging_uri), 2, start=i * 10)
            if i % 10 == 3:
                sink.precommit(txn)
            sink.abort(txn, "bench: aborted attempt")
        txn = sink.begin(epoch)
        write_files(local(txn.staging_uri), 2, start=i * 10)
        sink.precommit(txn)
        if sink.commit(txn).outcome != "committed":
            raise RuntimeError(f"history epoch {epoch} did not commit")
    return {"epochs": epochs, "files_per_epoch": 2,
            "aborted_after_precommit": sum(i % 10 == 3 for i in range(epochs)),
            "aborted_before_precommit": sum(i % 10 == 7 for i in range(epochs)),
            "build_s": round(time.perf_counter() - started, 1)}


def bench_history(pool: FilePool, work: str, target: str, reps: int) -> dict[str, Any]:
    hist = Sink(target, NAMESPACE)

    def run(v: str, rep: int) -> float:
        if v == "history":  # one more epoch after the history's each repetition
            with staged(pool, target, epoch=f"2026-{pool.n % 12 + 1:02d}-{rep + 1:02d}",
                        sink=hist) as (sink, txn):
                return commit(sink, txn)
        base = tempfile.mkdtemp(prefix=f"{v}-", dir=work)
        other = os.path.join(base, "t")
        with staged(pool, other if v == "fresh" else seasoned(other)) as (sink, txn):
            t = commit(sink, txn)
        shutil.rmtree(base)
        return t

    times = h.interleave(["fresh", "one_epoch", "history"], reps, run)
    h.log(f"  history n={pool.n}: fresh {h.fmt_s(h.median(times['fresh']))}, one epoch "
          f"{h.fmt_s(h.median(times['one_epoch']))}, history "
          f"{h.fmt_s(h.median(times['history']))}")
    return {"n": pool.n, "reps": reps, **times}


# ------------------------------------------------------------------ 3. memory and sizes
def _status_kib(field: str) -> int:
    with open("/proc/self/status") as fh:
        return next(int(ln.split()[1]) for ln in fh if ln.startswith(field + ":"))


def child_commit(doc: dict[str, Any]) -> dict[str, Any]:
    """In a fresh process: the commit's resident memory (baseline, high-water mark), or
    with ``trace``, its tracemalloc peak (Python allocations only; slower, so apart)."""
    sink = Sink(doc["target"], NAMESPACE)
    txn = sink.transaction(doc["epoch"], doc["attempt"])
    digest = sealed_digest(sink, txn)
    gc.collect()
    if doc.get("trace"):
        tracemalloc.start()
        t = commit(sink, txn, digest)
        return {"heap_peak": tracemalloc.get_traced_memory()[1], "seconds": t}
    base = _status_kib("VmRSS") * 1024
    try:  # reset the high-water mark to the current RSS (Linux >= 4.0)
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        method = "VmHWM after the commit, reset just before it (clear_refs 5)"
    except OSError:
        method = "ru_maxrss after the commit (the child's high-water mark since its start)"
    t = commit(sink, txn, digest)
    peak = (_status_kib("VmHWM") * 1024 if method.startswith("VmHWM") else
            resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
    return {"rss_base": base, "rss_peak": peak, "added": peak - base, "method": method,
            "seconds": t}


def commit_in_child(target: str, epoch: str, attempt: int, trace: bool = False
                    ) -> dict[str, Any]:
    os.sync()
    child = _child("commit", json.dumps({"target": target, "epoch": epoch,
                                         "attempt": attempt, "trace": trace}))
    out, _ = child.communicate()
    if child.returncode:
        raise RuntimeError(f"the commit child failed ({child.returncode})")
    return dict(json.loads(out.strip().splitlines()[-1]))


def child_xcom() -> int:
    """Airflow's side: PrecommitSensor._pointer for each pre-committed txn given on
    stdin (one JSON a line); replies ``XCOM {...}``. Airflow is imported only here."""
    os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="tpc-bench-airflow-"))
    os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
    try:
        from airflow_tpc.airflow.sensors.tpc import PrecommitSensor
    except Exception as exc:  # noqa: BLE001 - Airflow missing: every answer says so
        sensor_error = f"cannot import the Airflow provider: {exc}"
    else:
        sensor_error = ""
    for line in sys.stdin:
        try:
            if sensor_error:
                raise RuntimeError(sensor_error)
            req = json.loads(line)
            sensor = PrecommitSensor(task_id="wait", target=req["target"], namespace=NAMESPACE,
                                     submit_task_id="submit")
            t, pointer = h.timed(lambda s=sensor, r=req: s._pointer(
                s.tpc_hook.check_precommit(r["txn"])))
            out = {"pointer": pointer, "json_bytes": len(json.dumps(pointer)), "seconds": t}
        except Exception as exc:  # noqa: BLE001
            out = {"error": f"{type(exc).__name__}: {exc}"}
        print("XCOM " + json.dumps(out), flush=True)
    return 0


def _child(*args: str, stdin: Any = None) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        filter(None, [os.environ.get("PYTHONPATH"), str(h.ROOT)]))}
    return subprocess.Popen([sys.executable, __file__, "--child", *args], env=env, text=True,
                            stdin=stdin, stdout=subprocess.PIPE)


def find_record(root: str, prefix: str) -> int:
    """Size of the largest file named prefix* under root's epoch folder, or -1."""
    sizes = [os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(root)
             if f"epoch={EPOCH}" in d for f in fs if f.startswith(prefix)]
    return max(sizes, default=-1)


def bench_memory(pool: FilePool, work: str, xcom: subprocess.Popen[str] | None
                 ) -> dict[str, Any]:
    target = os.path.join(tempfile.mkdtemp(prefix="mem-", dir=work), "t")
    sink = Sink(target, NAMESPACE)
    txn = sink.begin(EPOCH)
    pool.move_to(local(txn.staging_uri))
    tracemalloc.start()
    sink.precommit(txn)
    pre_peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    res: dict[str, Any] = {"n": pool.n, "precommit_peak": pre_peak,
                           "staged_bytes": sum(file_size(i) for i in range(pool.n)),
                           "manifest_bytes": os.path.getsize(local(sink.manifest_uri(txn)))}
    if xcom is not None:  # between precommit and commit, as in the DAG
        assert xcom.stdin is not None and xcom.stdout is not None
        xcom.stdin.write(json.dumps({"target": target, "txn": {
            **txn.to_dict(), "storage_conn_id": None, "storage_options": {}}}) + "\n")
        xcom.stdin.flush()
        line = next((ln for ln in xcom.stdout if ln.startswith("XCOM ")), "XCOM {}")
        res["xcom"] = json.loads(line[5:])
    res["commit"] = commit_in_child(target, EPOCH, txn.attempt)
    res["decision_bytes"] = find_record(os.path.join(target, "_tpc"), DECISION_PREFIX)
    marker = os.path.join(local(sink.output_uri(EPOCH)), MARKER_NAME)
    res["marker_bytes"] = os.path.getsize(marker) if os.path.exists(marker) else -1
    pool.take_back(local(sink.output_uri(EPOCH)))
    txn = sink.begin("2026-01-02")  # the same files again, for the commit's heap peak
    pool.move_to(local(txn.staging_uri))
    sink.precommit(txn)
    res["commit"]["heap_peak"] = commit_in_child(target, txn.epoch, txn.attempt,
                                                 trace=True)["heap_peak"]
    pool.take_back(local(sink.output_uri(txn.epoch)))
    shutil.rmtree(os.path.dirname(target))
    c = res["commit"]
    h.log(f"  memory n={pool.n:>6}: commit RSS {h.fmt_b(c['rss_base'])} + "
          f"{h.fmt_b(c['added'])}, heap peak {h.fmt_b(c['heap_peak'])}, decision "
          f"{res['decision_bytes']} B")
    return res


# ------------------------------------------------------------------ main
def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        if argv[1] == "xcom":
            return child_xcom()
        print(json.dumps(child_commit(json.loads(argv[2]))), flush=True)
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    h.add_common_args(parser, "core.json")
    parser.add_argument("--only", nargs="+", choices=["local", "history", "memory"],
                        default=["local", "history", "memory"])
    parser.add_argument("--workdir", default=None, help="where staged files go")
    args = parser.parse_args(argv)
    sizes = [1_000, 10_000] if args.quick else [1_000, 10_000, 100_000]
    reps, epochs, hist_sizes, v2_max, profile_n = args.reps or (3 if args.quick else 5), \
        200 if args.quick else 500, [100, 1_000], 10_000, 10_000
    if args.smoke:
        sizes, reps, epochs, hist_sizes, v2_max, profile_n = [50], 1, 3, [10], 50, 50
    data = h.run_info("bench/bench_core.py " + " ".join(argv), h.mode(args))
    data.update(local=[], history=[], memory=[], profile={})
    work = tempfile.mkdtemp(prefix="tpc-bench-", dir=args.workdir)
    hadoop = xcom = None
    try:
        if "local" in args.only:
            h.log("1. local commit: floor, tpc, Hadoop v1 (starting the JVM)")
            hadoop = Hadoop()
            data["hadoop"] = hadoop.version
        if "memory" in args.only:
            xcom = _child("xcom", stdin=subprocess.PIPE)
        for n in sizes if {"local", "memory"} & set(args.only) else []:
            size_dir = tempfile.mkdtemp(prefix=f"n{n}-", dir=work)
            pool = FilePool(size_dir, n)
            if "local" in args.only:
                # every size gets all reps (at 100k three spread too far for a median);
                # up to 10k twice as many: they are cheap, and tens of ms spread widely
                data["local"].append(bench_local(pool, size_dir, reps * (1 + (n <= 10_000)),
                                                 hadoop, n <= v2_max))
                if n == profile_n:
                    data["profile"] = {"n": n, "rows": profile_commit(pool, size_dir)}
            if "memory" in args.only:
                data["memory"].append(bench_memory(pool, size_dir, xcom))
            shutil.rmtree(size_dir)
        if hadoop:
            hadoop.stop()
            hadoop = None
        if "history" in args.only:
            h.log(f"2. flat in history: a target with {epochs} epochs")
            target = os.path.join(work, "history")
            data["history_target"] = build_history(target, epochs)
            for n in hist_sizes:
                pool = FilePool(tempfile.mkdtemp(prefix=f"h{n}-", dir=work), n)
                # A few ms a commit: more repetitions than the rest, or noise decides.
                data["history"].append(bench_history(pool, work, target,
                                                     reps if args.smoke else max(reps, 15)))
    finally:
        if hadoop:
            hadoop.stop()
        if xcom is not None and xcom.stdin is not None:
            xcom.stdin.close()
            xcom.wait(timeout=60)
        shutil.rmtree(work, ignore_errors=True)
    h.save(data, args.results)
    report.publish("core", data, args.output)
    return 0


if __name__ == "__main__":
    h.on_sigterm()
    raise SystemExit(main())
