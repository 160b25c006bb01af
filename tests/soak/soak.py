"""A seeded, randomized soak of airflow-tpc: many epochs, random failures, one checker.

Why: the unit suites crash each step once in isolation.  Exactly-once has to hold
for *histories* — a job that died half way, then a retry, then a zombie of the
first try waking up, then a clear of a committed epoch with new input, a commit
killed between steps and finished by someone else, two runs of one epoch at the
same time from two threads — on real storage, with real Spark writing the files.
This module plays such a history, epoch after epoch, from one seed (so any
failure is replayable), and then checks the only thing a user cares about: the
target holds exactly the output of each epoch's last committed attempt, nothing
of epochs that never committed, and no leftovers.

The driver plays the Airflow roles in-process (submit operator = ``Sink.begin``
plus handing the job its payload through the Spark conf; sensor; commit and
abort operators = the ``Sink`` verbs; the CLI for manual aborts).  The job side
is real: ``current_transaction(spark)``, a PySpark aggregation, native parquet
into staging (local target) or the ``tpc`` data source (S3 through moto's
server), then ``txn.precommit()``.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import os
import random
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from airflow_tpc import Sink
from airflow_tpc.core.faults import InjectedCrash, armed
from airflow_tpc.core.promote import read_marker, staging_dirs
from airflow_tpc.core.transaction import Transaction
from airflow_tpc.errors import TpcError
from airflow_tpc.spark import CONF_KEY, JobTransaction, build_payload, current_transaction
from airflow_tpc.storage import Storage, open_storage

REPO = Path(__file__).resolve().parents[2]
NAMESPACE = "soak"

#: The fault kinds drawn per epoch.  ``recover`` is periodic, not drawn.
KINDS = ("job_failure", "sensor_timeout", "commit_crash", "manual_abort", "clear_rerun",
         "zombie", "concurrent")
#: Kinds that are not combined in one epoch (a crash point is armed process-wide, so a
#: commit crash would also hit the other run of a concurrent race).
EXCLUSIVE = (("commit_crash", "concurrent"),)
#: Crash points a commit passes, per store (tests/core/test_crashpoints.py checks
#: these lists against the code; a point that is never passed would inject nothing).
COMMIT_CRASH_POINTS = {
    "local": ["commit.before_decision", "commit.after_decision", "promote.before_marker",
              "promote.before_swap", "promote.after_swap", "commit.before_published"],
    "s3": ["commit.before_decision", "commit.after_decision", "promote.before_copy",
           "promote.before_marker", "promote.before_cleanup", "commit.before_published"],
}
#: How two runs of one epoch overlap (``concurrent``), used round-robin in a seeded order:
#: - begin_race: both runs begin at the same instant (the attempt numbers race), then
#:   both jobs start, write, seal and commit; the lower attempt is fenced (its job
#:   usually already at start: the higher attempt exists before either job starts);
#: - parallel_jobs: run 1's job has started when run 2 begins; then both Spark jobs
#:   write at the same time, and both seal and commit at the same time;
#: - commit_vs_rerun: run 1 is pre-committed; its commit races run 2 (begin, job,
#:   pre-commit, commit) from another thread, free interleaving;
#: - held: like commit_vs_rerun, but run 1's commit is held at a protocol step (a gate on
#:   a crash point) until run 2 has committed: the TOCTOU windows, every time.
RACES = ("begin_race", "parallel_jobs", "commit_vs_rerun", "held")
#: Steps where run 1's commit may be held.  Locally only steps outside the promotion
#: flock (holding it would just block run 2's promotion until the hold times out).
HOLD_POINTS = {
    "local": ["commit.before_decision", "commit.after_decision", "commit.before_published"],
    "s3": ["commit.before_decision", "commit.after_decision", "promote.before_copy",
           "promote.before_marker", "promote.before_cleanup", "commit.before_published"],
}
#: Held there, run 1's commit is decided but its output not yet visible when run 2
#: publishes: when released it must report "superseded" (else: an anomaly).
OVERTAKEN_UNSEEN = ("commit.after_decision", "promote.before_copy", "promote.before_marker")
#: The losing run of a race computes from a different (stale) input version, so its
#: rows can never be mistaken for the winner's if they leak.
STALE = 300
RACE_TIMEOUT = 300.0
COUNTRIES = ("AR", "BR", "DE", "FR", "IN", "JP", "NG", "US")
SCHEMA = "event_id long, country string, user_id long, amount long"
Row = tuple[str, int, int, int]  # (country, events, amount, users): one output row

log = logging.getLogger("airflow_tpc.soak")


# ----------------------------------------------------------------- environment
def prepare_environment() -> None:
    """Env the JVM and its Python workers must inherit: set before Spark starts."""
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    path = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if str(REPO) not in path:
        os.environ["PYTHONPATH"] = os.pathsep.join([str(REPO), *path])
    # moto accepts any keys; executors and data-source workers read them from env
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing-secret-key")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")


def make_spark() -> Any:
    """One small local Spark session: jobs are tiny, so JVM start is the real cost."""
    prepare_environment()
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").appName("airflow-tpc-soak")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.default.parallelism", "2")
             .config("spark.sql.execution.arrow.pyspark.enabled", "true")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


_TUNED = {"spark.sql.shuffle.partitions": "2", "spark.sql.execution.arrow.pyspark.enabled": "true"}


def tune_session(spark: Any) -> dict[str, str | None]:
    """Session-level settings the soak relies on (also when it reuses a session).

    Returns the previous values, for :func:`restore_session`.
    """
    saved = {k: spark.conf.get(k, None) for k in _TUNED}
    for key, value in _TUNED.items():
        spark.conf.set(key, value)
    return saved


def restore_session(spark: Any, saved: dict[str, str | None]) -> None:
    for key, value in saved.items():
        if value is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, value)


# -------------------------------------------------------------------- the data
def events(seed: int, epoch: str, version: int) -> list[tuple[int, str, int, int]]:
    """The input of one epoch at one input version: deterministic, a few hundred rows.

    A clear-and-rerun bumps the version, i.e. the upstream data changed; the
    checker recomputes from here, never from what Spark wrote.
    """
    rng = random.Random(f"{seed}/{epoch}/{version}")
    n = rng.randint(150, 400)
    return [(i, rng.choice(COUNTRIES), rng.randint(1, 60), rng.randint(1, 1000))
            for i in range(n)]


def expected_rows(seed: int, epoch: str, version: int) -> Counter[Row]:
    """The aggregation the job does, in plain Python: the oracle."""
    agg: dict[str, list[Any]] = {}
    for _, country, user, amount in events(seed, epoch, version):
        a = agg.setdefault(country, [0, 0, set()])
        a[0] += 1
        a[1] += amount
        a[2].add(user)
    return Counter((c, n, s, len(u)) for c, (n, s, u) in agg.items())


def aggregate(spark: Any, rows: list[tuple[int, str, int, int]]) -> Any:
    """The job's computation: events -> per-country counts, sums, distinct users."""
    from pyspark.sql import functions as F

    df = spark.createDataFrame(rows, SCHEMA)
    return (df.groupBy("country")
            .agg(F.count("*").alias("events"), F.sum("amount").alias("amount"),
                 F.countDistinct("user_id").alias("users")))


def _failing_udf() -> Any:
    """A UDF that kills its Spark task: a real task failure, not a driver-side raise.

    Nested so cloudpickle ships it by value (workers need not import this module).
    """
    from pyspark.sql import functions as F

    def explode(value):  # no type hints: with them pyspark guesses a UDF kind, and warns
        raise RuntimeError(f"soak: injected task failure at value {value}")

    return F.udf(explode, "long")


# --------------------------------------------------------------------- results
@dataclass
class Counts:
    """What the soak did and found; printed at the end."""

    epochs: int = 0
    in_flight: int = 0
    faults: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    crash_points: dict[str, int] = field(default_factory=dict)
    races: dict[str, int] = field(default_factory=dict)
    race_losers: dict[str, int] = field(default_factory=dict)
    attempts: int = 0
    reruns: int = 0
    commits: int = 0
    commit_retries: int = 0
    aborts: int = 0
    refusals: int = 0
    recovers: int = 0
    rolled_forward: int = 0
    given_up: int = 0
    epochs_committed: int = 0
    anomalies: int = 0
    violations: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {k: (dict(v) if isinstance(v, dict) else v) for k, v in self.__dict__.items()}

    def render(self) -> str:
        lines = [f"epochs            {self.epochs} (+{self.in_flight} attempts left in flight)",
                 "faults injected   " + ", ".join(f"{k}={v}" for k, v in self.faults.items()),
                 "commit crashes at " + (", ".join(f"{k}={v}" for k, v in
                                                   sorted(self.crash_points.items())) or "-"),
                 "races             " + (", ".join(f"{k}={v}" for k, v in
                                                   sorted(self.races.items())) or "-"),
                 "race losers       " + (", ".join(f"{k}={v}" for k, v in
                                                   sorted(self.race_losers.items())) or "-")]
        for key in ("attempts", "reruns", "commits", "commit_retries", "aborts", "refusals",
                    "recovers", "rolled_forward", "given_up", "epochs_committed",
                    "anomalies", "violations"):
            lines.append(f"{key:<17} {getattr(self, key)}")
        return "\n".join(lines)


@dataclass
class EpochModel:
    """What the history says an epoch must look like: the oracle's state."""

    target: str                          # "local" or "s3"
    version: int = 0                     # current input version (bumped by clear_rerun)
    committed: tuple[int, int] | None = None   # (attempt, input version) of the last commit


@dataclass
class RunOutcome:
    """How one of two concurrent runs of an epoch ended."""

    name: str
    attempt: int | None = None
    outcome: str = ""                    # CommitResult.outcome when the commit returned
    error: BaseException | None = None   # what refused or failed it otherwise


def is_refusal(exc: BaseException) -> bool:
    """A refusal by the protocol (fencing, decided, conflict), also when Spark wraps it."""
    if isinstance(exc, (TpcError, InjectedCrash)):
        return True
    text = str(exc)
    return any(w in text for w in ("Fenced", "refused", "zombie", "ABORTED", "decided"))


@dataclass
class SoakResult:
    counts: Counts
    violations: list[str]
    model: dict[str, EpochModel]
    sinks: dict[str, Sink]
    elapsed_s: float
    anomalies: list[str] = field(default_factory=list)


# ---------------------------------------------------------------------- driver
class Soak:
    """Plays a seeded history of epochs with random failures against real parts.

    ``s3_options``/``s3_target`` enable the S3 target; ``s3_share`` of the epochs
    (at least one per run) then go there, the rest to the local target.
    """

    def __init__(self, spark: Any, workdir: str | os.PathLike[str], *, epochs: int, seed: int,
                 s3_target: str | None = None, s3_options: dict[str, Any] | None = None,
                 s3_share: float = 0.25, recover_every: int = 4, fault_rate: float = 0.18,
                 give_up_rate: float = 0.1, echo: Callable[[str], None] | None = None) -> None:
        self.spark = spark
        self.seed = seed
        self.n_epochs = epochs
        self.rng = random.Random(seed)
        self.s3_options = s3_options
        self.s3_share = s3_share if s3_target else 0.0
        self.recover_every = recover_every
        self.fault_rate = fault_rate
        self.give_up_rate = give_up_rate
        self.echo = echo or (lambda _msg: None)
        self.targets = {"local": str(Path(workdir).resolve() / "target")}
        if s3_target:
            self.targets["s3"] = s3_target
        self._stores: dict[str, Storage] = {}
        self.counts = Counts()
        self.violations: list[str] = []
        self.anomalies: list[str] = []
        self.model: dict[str, EpochModel] = {}
        self._lock = threading.Lock()       # the session conf and the counts, across threads
        # round-robin in a seeded order: every kind of race, and every hold step of a
        # store, early on
        shuffle = random.Random(f"races/{seed}").shuffle
        self._races = list(RACES)
        shuffle(self._races)
        self._holds = {k: list(v) for k, v in HOLD_POINTS.items()}
        for points in self._holds.values():
            shuffle(points)
        self._held = Counter[str]()
        self._saved_conf = tune_session(spark)

    def close(self) -> None:
        """Give the (possibly shared) Spark session its settings back."""
        restore_session(self.spark, self._saved_conf)

    # -- plumbing ---------------------------------------------------------------
    def sink(self, kind: str) -> Sink:
        """A fresh Sink, as a new process (an operator task) would build it.

        Only the store client is shared (a boto3 client costs ~0.5 s to build, and
        holds no state of the protocol); every Sink starts without memory.
        """
        if kind not in self._stores:
            self._stores[kind] = open_storage(
                self.targets[kind], self.s3_options if kind == "s3" else None)[0]
        return Sink(self.targets[kind], NAMESPACE, storage=self._stores[kind])

    def commit_txn(self, kind: str, txn: Transaction, digest: str | None = None) -> Any:
        """The commit operator's call; counts epochs it rolled forward on the way
        (decided earlier, never promoted: a lost notification)."""
        result = self.sink(kind).commit(txn, expected_digest=digest)
        with self._lock:
            self.counts.rolled_forward += len(result.rolled_forward)
        return result

    def _committed(self, kind: str, epoch: str, attempt: int) -> bool:
        return any(i.attempt == attempt and i.state.value == "COMMITTED"
                   for i in self.sink(kind).describe(epoch))

    def anomaly(self, msg: str) -> None:
        """Wrong, but not a loss of exactly-once (the checker would not see it)."""
        log.warning("ANOMALY: %s", msg)
        with self._lock:
            self.anomalies.append(msg)
            self.counts.anomalies += 1

    def violation(self, msg: str) -> None:
        log.error("VIOLATION: %s", msg)
        self.violations.append(msg)

    def epoch_name(self, i: int) -> str:
        return (dt.date(2026, 1, 1) + dt.timedelta(days=i)).isoformat()

    # -- the schedule -------------------------------------------------------------
    def plan(self) -> list[tuple[str, str, list[str]]]:
        """(epoch, target kind, fault kinds) per epoch.

        Every kind appears at least once whatever the size: the first
        ``len(KINDS)`` epochs each get one kind in a seeded order; besides, every
        epoch draws each kind with probability ``fault_rate`` (the pairs in
        ``EXCLUSIVE`` never together: one of them is dropped).
        """
        rng = random.Random(f"plan/{self.seed}")
        forced = list(KINDS)
        rng.shuffle(forced)
        out = []
        s3_epochs: set[int] = set()
        if "s3" in self.targets:
            n_s3 = max(1, round(self.s3_share * self.n_epochs))
            s3_epochs = set(rng.sample(range(self.n_epochs), min(n_s3, self.n_epochs)))
        for i in range(self.n_epochs):
            faults = [k for k in KINDS if rng.random() < self.fault_rate]
            if i < len(forced) and forced[i] not in faults:
                faults.append(forced[i])
            for pair in EXCLUSIVE:
                if all(k in faults for k in pair):
                    keep = forced[i] if i < len(forced) and forced[i] in pair else rng.choice(pair)
                    faults = [k for k in faults if k not in pair or k == keep]
            out.append((self.epoch_name(i), "s3" if i in s3_epochs else "local",
                        sorted(faults, key=KINDS.index)))
        return out

    # -- the job side ---------------------------------------------------------------
    def start_job(self, kind: str, epoch: str, run: str | None = None) -> JobTransaction:
        """Submit operator + job start: begin, pass the payload by conf, job finds it."""
        return self.job_for(kind, self.begin(kind, epoch, run))

    def begin(self, kind: str, epoch: str, run: str | None = None) -> Transaction:
        """The submit operator's begin (thread-safe: concurrent runs race here for real)."""
        owner: dict[str, Any] = {"soak_seed": self.seed}
        if run:
            owner["run"] = run
        txn = self.sink(kind).begin(epoch, owner=owner)
        with self._lock:
            self.counts.attempts += 1
        return txn

    def job_for(self, kind: str, txn: Transaction) -> JobTransaction:
        """The job starting: it finds its transaction in the Spark conf.

        The conf is the session's, so concurrent runs hand over one at a time; the job
        itself (``current_transaction`` checks the ledger) may already be fenced.
        """
        with self._lock:
            self.spark.conf.set(CONF_KEY, build_payload(
                txn, storage_options=self.s3_options if kind == "s3" else None))
            try:
                return current_transaction(self.spark)
            finally:
                self.spark.conf.unset(CONF_KEY)

    def write(self, kind: str, job: JobTransaction, df: Any, *, fail: bool = False) -> None:
        """Write ``df`` into the job's staging; ``fail`` makes a Spark task die mid-write."""
        from pyspark.sql import functions as F

        if fail:
            df = df.withColumn("events", _failing_udf()(F.col("events")))
        if kind == "local":
            df.write.mode("append").parquet(job.output_uri)
        else:
            from airflow_tpc.spark import write_tpc

            write_tpc(df, job, precommit=False)

    def job_output(self, epoch: str, version: int) -> Any:
        return aggregate(self.spark, events(self.seed, epoch, version))

    def halves(self, df: Any) -> tuple[Any, Any]:
        from pyspark.sql import functions as F

        first = F.col("country").isin(list(COUNTRIES[:4]))
        return df.filter(first), df.filter(~first)

    def run_full_job(self, kind: str, job: JobTransaction, epoch: str, version: int) -> str:
        """A healthy job: compute, write, pre-commit; returns the manifest digest."""
        self.write(kind, job, self.job_output(epoch, version))
        manifest = job.precommit()
        assert manifest is not None
        return manifest.digest

    # -- attempts with faults -----------------------------------------------------------
    def refused(self, what: str, fn: Callable[[], Any]) -> None:
        """``fn`` must be refused (fencing/decided); if it succeeds, that is a violation."""
        try:
            fn()
        except Exception as exc:  # noqa: BLE001 - Spark wraps errors of its Python workers
            if is_refusal(exc):
                self.counts.refusals += 1
                log.info("refused as it must be: %s: %s", what, exc)
                return
            self.violation(f"{what}: failed for an unexpected reason: {str(exc)[:300]}")
            return
        self.violation(f"{what} was NOT refused")

    def job_failure(self, kind: str, epoch: str, version: int) -> None:
        """A Spark job dies mid-write: half its output staged, then a task fails."""
        self.counts.faults["job_failure"] += 1
        job = self.start_job(kind, epoch)
        first, second = self.halves(self.job_output(epoch, version))
        self.write(kind, job, first)
        try:
            self.write(kind, job, second, fail=True)
        except Exception as exc:  # noqa: BLE001 - a Py4J/Python exception from Spark
            log.info("job of %s failed as injected: %s", job.txn_id, str(exc)[:120])
        else:
            self.violation(f"{job.txn_id}: the injected task failure did not fail the job")
        if self.rng.random() < 0.5:
            # AbortOperator (trigger rule one_failed); otherwise the retry's fencing does it
            self.sink(kind).abort(job.txn, "spark job failed")
            self.counts.aborts += 1

    def sensor_timeout(self, kind: str, epoch: str, version: int) -> None:
        """The job hangs before pre-commit; the sensor times out, the run aborts it."""
        self.counts.faults["sensor_timeout"] += 1
        job = self.start_job(kind, epoch)
        self.write(kind, job, self.job_output(epoch, version))
        self.sink(kind).abort(job.txn, "sensor timed out waiting for the pre-commit")
        self.counts.aborts += 1
        # the hung job wakes up and tries to seal: the abort decision refuses it
        self.refused(f"late pre-commit of timed-out {job.txn_id}", job.precommit)

    def manual_abort(self, kind: str, epoch: str, version: int) -> None:
        """An operator aborts an in-flight (pre-committed) attempt with the CLI."""
        from airflow_tpc.cli import main as cli_main

        self.counts.faults["manual_abort"] += 1
        job = self.start_job(kind, epoch)
        digest = self.run_full_job(kind, job, epoch, version)
        argv = ["abort", self.targets[kind], "--epoch", epoch, "--reason", "soak: manual"]
        if kind == "s3" and self.s3_options:
            argv += ["--endpoint-url", self.s3_options["endpoint_url"]]
        with contextlib.redirect_stdout(open(os.devnull, "w")):  # noqa: SIM115
            rc = cli_main(argv)
        if rc != 0:
            self.violation(f"CLI abort of {job.txn_id} returned {rc}")
        self.counts.aborts += 1
        # the commit task still runs (the abort raced it): it must be refused
        self.refused(f"commit of manually aborted {job.txn_id}",
                     lambda: self.commit_txn(kind, job.txn, digest))

    def commit(self, kind: str, job: JobTransaction, digest: str, crash: bool) -> None:
        """The commit operator, optionally killed at a random protocol step.

        After a crash the commit task's retry converges; if the decision was
        already written, sometimes no retry comes (a lost notification) and the
        next commit on the target or recover() must finish it.
        """
        if not crash:
            result = self.commit_txn(kind, job.txn, digest)
            if result.outcome != "committed":
                self.violation(f"commit of {job.txn_id}: outcome {result.outcome}")
            self.counts.commits += 1
            return
        self.counts.faults["commit_crash"] += 1
        point = self.rng.choice(COMMIT_CRASH_POINTS[kind])
        self.counts.crash_points[point] = self.counts.crash_points.get(point, 0) + 1
        try:
            with armed(point):
                self.commit_txn(kind, job.txn, digest)
        except InjectedCrash:
            pass
        else:
            self.violation(f"crash point {point} was not passed by the commit of {job.txn_id}")
        decided = point != "commit.before_decision"
        if decided and self.rng.random() < 0.35:
            self.counts.commits += 1
            log.info("%s: decided at the crash, left for a later commit/recover", job.txn_id)
            return
        self.counts.commit_retries += 1
        result = self.commit_txn(kind, job.txn, digest)  # the task's retry
        want = "already_committed" if decided else "committed"
        if result.outcome != want:
            self.violation(f"retried commit of {job.txn_id} after a crash at {point}: "
                           f"outcome {result.outcome}, expected {want}")
        self.counts.commits += 1

    def good_attempt(self, kind: str, epoch: str, *, crash: bool = False,
                     zombie: JobTransaction | None = None) -> None:
        """An attempt that succeeds; a zombie of a lower attempt interferes on the way."""
        m = self.model[epoch]
        job = self.start_job(kind, epoch)
        if zombie is not None:
            # the lower attempt keeps writing after the higher one began, then seals late
            with contextlib.suppress(Exception):  # a refusing writer is fine too
                self.write(kind, zombie, self.job_output(epoch, m.version + 100))
            self.refused(f"pre-commit of zombie {zombie.txn_id}", zombie.precommit)
        digest = self.run_full_job(kind, job, epoch, m.version)
        self.commit(kind, job, digest, crash)
        m.committed = (job.attempt, m.version)
        self.zombie_wakes_late(kind, epoch, zombie)

    def zombie_wakes_late(self, kind: str, epoch: str, zombie: JobTransaction | None) -> None:
        """After the epoch committed: the zombie's commit is refused; its writes linger."""
        if zombie is None:
            return
        self.refused(f"late commit of zombie {zombie.txn_id}",
                     lambda: self.commit_txn(kind, zombie.txn))
        # and it still writes: leftovers only, which recover must clean
        with contextlib.suppress(Exception):
            self.write(kind, zombie, self.job_output(epoch, self.model[epoch].version + 200))

    def start_zombie(self, kind: str, epoch: str) -> JobTransaction:
        """Two runs of the same epoch: the first one's job will be the zombie."""
        self.counts.faults["zombie"] += 1
        m = self.model[epoch]
        zombie = self.start_job(kind, epoch)
        first, _ = self.halves(self.job_output(epoch, m.version + 100))
        self.write(kind, zombie, first)
        if self.rng.random() < 0.4:
            zombie.precommit()  # sealed before the second run began: still never committed
        return zombie

    def clear_rerun(self, current: str) -> None:
        """Clear an already committed epoch and rerun it with CHANGED input."""
        done = [e for e, m in self.model.items() if m.committed is not None]
        if not done:
            return
        self.counts.faults["clear_rerun"] += 1
        epoch = self.rng.choice(done)
        m = self.model[epoch]
        m.version += 1
        self.counts.reruns += 1
        self.echo(f"  clear+rerun {epoch} ({m.target}) with input version {m.version}"
                  f" (during {current})")
        self.good_attempt(m.target, epoch)

    # -- two runs of one epoch at the same time --------------------------------------------
    def concurrent(self, kind: str, epoch: str) -> None:
        """Two runs of ``epoch`` overlap for real, from two threads of this process.

        Spark takes jobs from several threads of one session, so both runs' jobs write
        at the same time; the ledger and the stores see two committers.  The schedule
        (which race, which step a commit is held at) comes from the seed; the thread
        interleaving may vary, the outcome may not: the higher attempt is published
        with its own input, the lower one is refused (fenced) or, if its commit was
        decided before the higher attempt began, superseded — never visible.
        """
        self.counts.faults["concurrent"] += 1
        m = self.model[epoch]
        race = self._races[(self.counts.faults["concurrent"] - 1) % len(self._races)]
        point = None
        if race == "held":
            point = self._holds[kind][self._held[kind] % len(self._holds[kind])]
            self._held[kind] += 1
        label = f"held@{point}" if point else race
        self.counts.races[label] = self.counts.races.get(label, 0) + 1
        self.echo(f"  concurrent runs of {epoch}: {label}")
        if race == "begin_race":
            low, high = self._begin_race(kind, epoch, m.version)
        elif race == "parallel_jobs":
            low, high = self._parallel_jobs(kind, epoch, m.version)
        else:
            low, high = self._commit_race(kind, epoch, m.version, point)
        self.counts.reruns += 1
        self._judge_race(kind, epoch, label, low, high)
        if point in OVERTAKEN_UNSEEN and low.outcome == "committed":
            self.anomaly(f"{epoch} {label}: attempt {low.attempt}'s commit was overtaken after "
                         f"its decision (attempt {high.attempt} published first) but reported "
                         "'committed', not 'superseded'")

    def _both(self, first: Callable[[], RunOutcome], second: Callable[[], RunOutcome]
              ) -> tuple[RunOutcome, RunOutcome]:
        """Run two runs in two threads; an exception escaping a run is its outcome."""
        def guarded(fn: Callable[[], RunOutcome], name: str) -> RunOutcome:
            try:
                return fn()
            except BaseException as exc:  # noqa: BLE001 - judged by the caller
                return RunOutcome(name, error=exc)

        with ThreadPoolExecutor(2, thread_name_prefix="soak-run") as pool:
            a = pool.submit(guarded, first, "run1")
            b = pool.submit(guarded, second, "run2")
            return a.result(), b.result()

    def _begin_race(self, kind: str, epoch: str, version: int
                    ) -> tuple[RunOutcome, RunOutcome]:
        """Both runs begin at once and write at once; the lower attempt must be fenced."""
        go = threading.Barrier(2, timeout=RACE_TIMEOUT)
        begun = threading.Barrier(2, timeout=RACE_TIMEOUT)
        attempts: dict[str, int] = {}

        def run(name: str) -> RunOutcome:
            out = RunOutcome(name)
            try:
                go.wait()
                txn = self.begin(kind, epoch, run=name)
            except BaseException:
                begun.abort()
                raise
            out.attempt = attempts[name] = txn.attempt
            job = None
            try:
                job = self.job_for(kind, txn)     # may already be fenced: fails at start
            except Exception as exc:  # noqa: BLE001
                out.error = exc
            begun.wait()                          # both attempts exist from here on
            if job is None:
                return out
            top = max(attempts.values())
            try:
                # data chosen by rank, so the expected target is the same on every replay
                digest = self.run_full_job(kind, job, epoch,
                                           version if job.attempt == top else version + STALE)
                out.outcome = self.commit_txn(kind, job.txn, digest).outcome
            except Exception as exc:  # noqa: BLE001
                out.error = exc
            return out

        a, b = self._both(lambda: run("run1"), lambda: run("run2"))
        return (a, b) if (a.attempt or 0) < (b.attempt or 0) else (b, a)

    def _parallel_jobs(self, kind: str, epoch: str, version: int
                       ) -> tuple[RunOutcome, RunOutcome]:
        """Both jobs are live and write at once; then both seal and commit at once.

        Run 1 is a job still running when run 2 (a retry, a manual run) begins: its
        staging is written while run 2's is, and run 2's commit aborts it and removes
        its staging while it may still be writing.
        """
        first = self.start_job(kind, epoch, run="run1")
        second = self.start_job(kind, epoch, run="run2")
        go = threading.Barrier(2, timeout=RACE_TIMEOUT)

        def run(name: str, job: JobTransaction, data_version: int) -> RunOutcome:
            out = RunOutcome(name, job.attempt)
            try:
                go.wait()
                digest = self.run_full_job(kind, job, epoch, data_version)
                out.outcome = self.commit_txn(kind, job.txn, digest).outcome
            except Exception as exc:  # noqa: BLE001
                out.error = exc
            return out

        return self._both(lambda: run("run1", first, version + STALE),
                          lambda: run("run2", second, version))

    def _commit_race(self, kind: str, epoch: str, version: int, point: str | None
                     ) -> tuple[RunOutcome, RunOutcome]:
        """Run 1 (pre-committed) commits while run 2 runs its whole attempt.

        With ``point``, run 1's commit stops at that step until run 2 has committed.
        """
        first = self.start_job(kind, epoch, run="run1")
        digest1 = self.run_full_job(kind, first, epoch, version + STALE)
        reached, release = threading.Event(), threading.Event()
        holder: list[threading.Thread] = []

        def gate(_name: str) -> None:
            if holder and threading.current_thread() is holder[0]:
                reached.set()
                if not release.wait(RACE_TIMEOUT):
                    log.error("held commit of %s was never released", first.txn_id)

        def run1() -> RunOutcome:
            holder.append(threading.current_thread())
            out = RunOutcome("run1", first.attempt)
            try:
                out.outcome = self.commit_txn(kind, first.txn, digest1).outcome
            except Exception as exc:  # noqa: BLE001
                out.error = exc
            finally:
                reached.set()
            return out

        def run2() -> RunOutcome:
            out = RunOutcome("run2")
            try:
                if point:
                    reached.wait(RACE_TIMEOUT)
                job = self.start_job(kind, epoch, run="run2")
                out.attempt = job.attempt
                digest = self.run_full_job(kind, job, epoch, version)
                out.outcome = self.commit_txn(kind, job.txn, digest).outcome
            except Exception as exc:  # noqa: BLE001
                out.error = exc
            finally:
                release.set()
            return out

        with armed(point, gate) if point else contextlib.nullcontext():
            low, high = self._both(run1, run2)
        return low, high

    def _judge_race(self, kind: str, epoch: str, label: str, low: RunOutcome,
                    high: RunOutcome) -> None:
        """The higher attempt must have committed; the lower one must not have won."""
        m = self.model[epoch]
        if low.attempt is None or high.attempt is None or low.attempt >= high.attempt:
            self.violation(f"{epoch} {label}: attempts {low.attempt}/{high.attempt} of the two "
                           f"runs are not two distinct numbers ({low.error or high.error})")
            return
        if high.error is not None and self._committed(kind, epoch, high.attempt):
            # Past the commit point the call failed (seen: removing the fenced run's
            # staging while its job still writes there).  Not an exactly-once violation
            # — the decision stands and readers see the epoch — but the commit task
            # fails; its retry must converge.
            self.anomaly(f"{epoch} {label}: the commit of attempt {high.attempt} raised after "
                         f"its decision: {type(high.error).__name__}: {str(high.error)[:200]}")
            try:
                sink = self.sink(kind)
                high.outcome = self.commit_txn(kind, sink.transaction(epoch, high.attempt)).outcome
                high.error = None
                self.counts.commit_retries += 1
            except Exception as exc:  # noqa: BLE001
                high.error = exc
            if high.outcome == "already_committed":
                high.outcome = "committed"
        if high.error is not None or high.outcome != "committed":
            self.violation(f"{epoch} {label}: the higher attempt {high.attempt} did not commit: "
                           f"{high.outcome or type(high.error).__name__}: "
                           f"{str(high.error)[:300]}")
            # what the commit task's retry would do; the checker judges the result
            with contextlib.suppress(Exception):
                sink = self.sink(kind)
                if sink.commit(sink.transaction(epoch, high.attempt)).outcome in (
                        "committed", "already_committed"):
                    m.committed = (high.attempt, m.version)
            return
        m.committed = (high.attempt, m.version)
        self.counts.commits += 1
        if low.error is not None:
            verdict = "refused" if is_refusal(low.error) else "failed"
            if verdict == "failed":
                # a loser may also just crash (e.g. its staging removed under its job)
                log.warning("%s %s: lower attempt %d failed: %s", epoch, label, low.attempt,
                            str(low.error)[:300])
        elif low.outcome in ("committed", "already_committed", "superseded"):
            verdict = "superseded"   # decided before the higher attempt began: legal
            self.counts.commits += 1
        else:
            verdict = f"unexpected:{low.outcome}"
            self.violation(f"{epoch} {label}: lower attempt {low.attempt} ended {low.outcome!r}")
        self.counts.race_losers[verdict] = self.counts.race_losers.get(verdict, 0) + 1
        if verdict == "refused":
            self.counts.refusals += 1
        self.echo(f"    attempt {high.attempt} committed; attempt {low.attempt}: {verdict}")

    # -- one epoch ----------------------------------------------------------------------
    def run_epoch(self, epoch: str, kind: str, faults: list[str]) -> None:
        self.counts.epochs += 1
        m = self.model.setdefault(epoch, EpochModel(kind))
        self.echo(f"epoch {epoch} on {kind}: {', '.join(faults) or 'clean'}")
        failed_first = False
        zombie = self.start_zombie(kind, epoch) if "zombie" in faults else None
        if "job_failure" in faults:
            self.job_failure(kind, epoch, m.version)
            failed_first = True
        if "sensor_timeout" in faults:
            self.sensor_timeout(kind, epoch, m.version)
            failed_first = True
        if "manual_abort" in faults:
            self.manual_abort(kind, epoch, m.version)
            failed_first = True
        if failed_first:
            # (never when a later step of this epoch is drawn: it would not be injected)
            if not {"clear_rerun", "commit_crash", "concurrent"} & set(faults) \
                    and self.rng.random() < self.give_up_rate:
                # the DAG run fails for good: whatever is open is aborted, nothing published
                self.counts.given_up += 1
                latest = self.sink(kind).latest_transaction(epoch)
                if latest is not None:
                    with contextlib.suppress(TpcError):
                        self.sink(kind).abort(latest, "run failed")
                        self.counts.aborts += 1
                if zombie is not None:
                    self.refused(f"pre-commit of zombie {zombie.txn_id}", zombie.precommit)
                self.clear_rerun_if(faults, epoch)
                return
            self.counts.reruns += 1
        if "concurrent" in faults:
            self.concurrent(kind, epoch)
            self.zombie_wakes_late(kind, epoch, zombie)
        else:
            self.good_attempt(kind, epoch, crash="commit_crash" in faults, zombie=zombie)
        self.clear_rerun_if(faults, epoch)

    def clear_rerun_if(self, faults: list[str], epoch: str) -> None:
        if "clear_rerun" in faults:
            self.clear_rerun(epoch)

    def recover_all(self) -> None:
        for kind in self.targets:
            report = self.sink(kind).recover()
            self.counts.rolled_forward += len(report.rolled_forward)
        self.counts.recovers += 1

    def leave_in_flight(self, n: int) -> None:
        """Work that is pre-committed but never committed, so it must stay invisible.

        One new epoch (local); and per target, a rerun of a committed epoch with new
        input, sealed and awaiting its commit: readers must still see the old output.
        """
        tail = self.epoch_name(n)
        self.model[tail] = EpochModel("local")
        self.run_full_job("local", self.start_job("local", tail), tail, 0)
        self.counts.in_flight += 1
        for kind in self.targets:
            done = sorted(e for e, m in self.model.items()
                          if m.target == kind and m.committed is not None)
            if done:
                epoch = self.rng.choice(done)
                job = self.start_job(kind, epoch)
                self.run_full_job(kind, job, epoch, self.model[epoch].version + 1)
                self.counts.in_flight += 1
                self.echo(f"in flight: {job.txn_id} ({kind}), pre-committed, not committed")

    # -- the whole run ----------------------------------------------------------------
    def run(self) -> SoakResult:
        start = time.monotonic()
        schedule = self.plan()
        for i, (epoch, kind, faults) in enumerate(schedule):
            try:
                self.run_epoch(epoch, kind, faults)
            except Exception as exc:  # noqa: BLE001 - surfaced as a violation, run goes on
                log.exception("epoch %s crashed the driver", epoch)
                self.violation(f"epoch {epoch}: unexpected {type(exc).__name__}: {exc}")
            if (i + 1) % self.recover_every == 0:
                self.recover_all()
        self.leave_in_flight(len(schedule))
        self.recover_all()  # the final restore: finishes every decided commit
        self.violations.extend(check(self.spark, {k: self.sink(k) for k in self.targets},
                                     self.model, self.seed, self.s3_options))
        self.counts.epochs_committed = sum(m.committed is not None for m in self.model.values())
        self.counts.violations = len(self.violations)
        self.close()
        return SoakResult(self.counts, list(self.violations), self.model,
                          {k: self.sink(k) for k in self.targets}, time.monotonic() - start,
                          list(self.anomalies))


# --------------------------------------------------------------------- checker
def _rows_by_epoch(df: Any) -> dict[str, Counter[Row]]:
    out: dict[str, Counter[Row]] = {}
    for r in df.select("country", "events", "amount", "users",
                       df["epoch"].cast("string").alias("epoch")).collect():
        out.setdefault(r["epoch"], Counter())[(r["country"], int(r["events"]),
                                               int(r["amount"]), int(r["users"]))] += 1
    return out


def _compare(what: str, got: dict[str, Counter[Row]], want: dict[str, Counter[Row]]
             ) -> list[str]:
    bad = []
    for epoch in sorted(set(got) - set(want)):
        bad.append(f"{what}: epoch {epoch} is visible but never committed "
                   f"({sum(got[epoch].values())} rows)")
    for epoch in sorted(set(want) - set(got)):
        bad.append(f"{what}: committed epoch {epoch} is missing")
    for epoch in sorted(set(got) & set(want)):
        if got[epoch] != want[epoch]:
            extra = sum((got[epoch] - want[epoch]).values())
            missing = sum((want[epoch] - got[epoch]).values())
            bad.append(f"{what}: epoch {epoch} differs from its last committed attempt: "
                       f"{extra} unexpected row(s), {missing} missing row(s)")
    return bad


def check(spark: Any, sinks: dict[str, Sink], model: dict[str, EpochModel], seed: int,
          s3_options: dict[str, Any] | None = None) -> list[str]:
    """Every way the target could disagree with the history; [] when exactly-once held.

    Run after a final recover.  Checks, per target: the read-committed rows of each
    epoch == the oracle's rows of its last committed attempt's input version (as a
    multiset: a duplicated file doubles rows); a plain ``spark.read.parquet`` of a
    local target agrees; the ledger names the same winning attempt, published;
    no staging survives a finished (decided, promoted or aborted) transaction.
    """
    from airflow_tpc.spark import read_committed

    bad: list[str] = []
    for kind, sink in sinks.items():
        want = {e: expected_rows(seed, e, m.committed[1]) for e, m in model.items()
                if m.target == kind and m.committed is not None}
        opts = None
        if kind == "s3" and s3_options:
            opts = {k: s3_options[k] for k in ("endpoint_url", "region_name") if k in s3_options}
        try:
            got = _rows_by_epoch(read_committed(spark, sink.target, storage_options=opts))
            bad += _compare(f"{kind} read_committed", got, want)
        except Exception as exc:  # noqa: BLE001 - a broken target is a finding, not a crash
            bad.append(f"{kind} read_committed failed: {type(exc).__name__}: {str(exc)[:300]}")
        try:
            files = sink.committed_files()
            if set(files) != set(want):
                bad.append(f"{kind} committed_files epochs {sorted(files)} != committed "
                           f"{sorted(want)}")
        except Exception as exc:  # noqa: BLE001
            bad.append(f"{kind} committed_files failed: {exc}")
        if kind == "local":
            bad += _check_plain_local(spark, sink, want)
        bad += _check_published_folders(kind, sink)
        bad += _check_ledger(kind, sink, model)
    return bad


def is_hidden(relpath: str) -> bool:
    """Hidden from Hadoop/Spark readers: a path component starting with ``_`` or ``.``."""
    return any(part.startswith(("_", ".")) for part in relpath.split("/"))


def _check_published_folders(kind: str, sink: Sink) -> list[str]:
    """What a plain lister of ``<target>/epoch=*/`` finds == what the markers list.

    On S3 this is the plain reader's view (``ListObjectsV2``), which read_committed
    never looks at: a stray, missing or resized file, or an epoch folder with
    visible files but no published marker, is found here.
    """
    storage, layout = sink.storage, sink.layout
    bad: list[str] = []
    for name in sorted(storage.list_dirs(layout.root)):
        if not name.startswith("epoch="):
            continue
        epoch = name[len("epoch="):]
        folder = layout.published_dir(epoch)
        prefix = folder.rstrip("/") + "/"
        found = {o.path[len(prefix):]: o.size for o in storage.list(folder)}
        visible = {p: size for p, size in found.items() if not is_hidden(p)}
        try:
            marker = read_marker(layout, epoch)
        except TpcError as exc:
            bad.append(f"{kind} target: epoch {epoch}: {exc}")
            continue
        if marker is None:
            if visible:
                bad.append(f"{kind} target: epoch {epoch} has {len(visible)} visible file(s) "
                           "but no published marker: uncommitted data visible to plain "
                           f"readers (e.g. {sorted(visible)[0]})")
            continue
        listed = {}
        for entry in marker["files"]:
            path = entry["path"]
            if "://" not in path and path.startswith(name + "/"):  # "manifest" mode: elsewhere
                listed[path[len(name) + 1:]] = entry["size"]
        stray = sorted(set(visible) - set(listed))
        missing = sorted(set(listed) - set(found))
        resized = sorted(p for p in set(listed) & set(found) if listed[p] != found[p])
        if stray:
            bad.append(f"{kind} target: epoch {epoch} has {len(stray)} stray file(s) its "
                       f"marker (attempt {marker['attempt']}) does not list: {stray[:3]}")
        if missing:
            bad.append(f"{kind} target: epoch {epoch} is missing {len(missing)} file(s) its "
                       f"marker (attempt {marker['attempt']}) lists: {missing[:3]}")
        if resized:
            bad.append(f"{kind} target: epoch {epoch} has {len(resized)} file(s) whose size "
                       f"differs from its marker: {resized[:3]}")
    return bad


def _check_plain_local(spark: Any, sink: Sink, want: dict[str, Counter[Row]]) -> list[str]:
    """What a reader that knows nothing of airflow-tpc sees: must be the same."""
    path = sink.target[len("file://"):] if sink.target.startswith("file://") else sink.target
    has_data = any(p.name.startswith("epoch=") for p in Path(path).glob("epoch=*"))
    if not has_data:
        return [] if not want else ["local plain read: no epoch folders, but epochs committed"]
    try:
        got = _rows_by_epoch(spark.read.parquet(path))
    except Exception as exc:  # noqa: BLE001
        return [f"local plain read failed: {type(exc).__name__}: {str(exc)[:300]}"]
    return _compare("local plain read", got, want)


def _check_ledger(kind: str, sink: Sink, model: dict[str, EpochModel]) -> list[str]:
    bad = []
    infos = sink.describe()
    known = {(i.epoch, i.attempt) for i in infos}
    winners: dict[str, int] = {}
    for info in infos:
        state = info.state.value
        if state == "COMMITTED" and not info.superseded:
            winners[info.epoch] = info.attempt
            if not info.published:
                bad.append(f"{kind} ledger: {info.txn_id} is committed but not promoted "
                           "after the final recover")
        finished = state in ("ABORTED", "EXPIRED") or (
            state == "COMMITTED" and (info.published or info.superseded))
        if finished and info.staging_files:
            bad.append(f"{kind} staging: {info.staging_files} file(s) left by finished "
                       f"{info.txn_id} ({state})")
    for epoch, attempts in staging_dirs(sink.layout).items():
        for attempt in attempts:
            if (epoch, attempt) not in known:
                bad.append(f"{kind} staging: epoch {epoch} attempt {attempt} has staging "
                           "but no ledger record")
    for epoch, m in model.items():
        if m.target != kind:
            continue
        want = m.committed[0] if m.committed else None
        if winners.get(epoch) != want:
            bad.append(f"{kind} ledger: epoch {epoch} winner is attempt {winners.get(epoch)}, "
                       f"the history says {want}")
    return bad


# --------------------------------------------------------------------- helpers
@contextlib.contextmanager
def moto_s3() -> Iterator[tuple[str, dict[str, Any]]]:
    """(s3 target, storage options) on a fresh bucket of moto's server on 127.0.0.1."""
    import uuid

    import boto3
    from moto.server import ThreadedMotoServer

    prepare_environment()
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        options = {"endpoint_url": f"http://{host}:{port}",
                   "key": os.environ["AWS_ACCESS_KEY_ID"],
                   "secret": os.environ["AWS_SECRET_ACCESS_KEY"], "region_name": "us-east-1"}
        bucket = f"soak-{uuid.uuid4().hex[:10]}"
        boto3.client("s3", endpoint_url=options["endpoint_url"],
                     aws_access_key_id=options["key"], aws_secret_access_key=options["secret"],
                     region_name="us-east-1").create_bucket(Bucket=bucket)
        yield f"s3://{bucket}/soak/events", options
    finally:
        server.stop()
