"""A seeded, randomized soak of airflow-tpc: many epochs, random failures, one checker.

Why: the unit suites crash each step once in isolation.  Exactly-once has to hold
for *histories* — a job that died half way, then a retry, then a zombie of the
first try waking up, then a clear of a committed epoch with new input, a commit
killed between steps and finished by someone else — on real storage, with real
Spark writing the files.  This module plays such a history, epoch after epoch,
from one seed (so any failure is replayable), and then checks the only thing a
user cares about: the target holds exactly the output of each epoch's last
committed attempt, nothing of epochs that never committed, and no leftovers.

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
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from airflow_tpc import Sink
from airflow_tpc.errors import TpcError
from airflow_tpc.faults import InjectedCrash, armed
from airflow_tpc.promote import staging_dirs
from airflow_tpc.spark import CONF_KEY, JobTransaction, build_payload, current_transaction

REPO = Path(__file__).resolve().parents[2]
NAMESPACE = "soak"

#: The fault kinds drawn per epoch.  ``recover`` is periodic, not drawn.
KINDS = ("job_failure", "sensor_timeout", "commit_crash", "manual_abort", "clear_rerun",
         "zombie")
#: Crash points a commit passes, per store (tests/core/test_crashpoints.py checks
#: these lists against the code; a point that is never passed would inject nothing).
COMMIT_CRASH_POINTS = {
    "local": ["commit.before_decision", "commit.after_decision", "promote.before_marker",
              "promote.before_swap", "promote.after_swap", "commit.before_published"],
    "s3": ["commit.before_decision", "commit.after_decision", "promote.before_copy",
           "promote.before_marker", "promote.before_cleanup", "commit.before_published"],
}
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


def tune_session(spark: Any) -> None:
    """Session-level settings the soak relies on (also when it reuses a session)."""
    spark.conf.set("spark.sql.shuffle.partitions", "2")
    spark.conf.set("spark.sql.execution.arrow.pyspark.enabled", "true")


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

    def explode(value: int) -> int:
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
    violations: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {k: (dict(v) if isinstance(v, dict) else v) for k, v in self.__dict__.items()}

    def render(self) -> str:
        lines = [f"epochs            {self.epochs} (+{self.in_flight} left in flight)",
                 "faults injected   " + ", ".join(f"{k}={v}" for k, v in self.faults.items()),
                 "commit crashes at " + (", ".join(f"{k}={v}" for k, v in
                                                   sorted(self.crash_points.items())) or "-")]
        for key in ("attempts", "reruns", "commits", "commit_retries", "aborts", "refusals",
                    "recovers", "rolled_forward", "given_up", "epochs_committed",
                    "violations"):
            lines.append(f"{key:<17} {getattr(self, key)}")
        return "\n".join(lines)


@dataclass
class EpochModel:
    """What the history says an epoch must look like: the oracle's state."""

    target: str                          # "local" or "s3"
    version: int = 0                     # current input version (bumped by clear_rerun)
    committed: tuple[int, int] | None = None   # (attempt, input version) of the last commit


@dataclass
class SoakResult:
    counts: Counts
    violations: list[str]
    model: dict[str, EpochModel]
    sinks: dict[str, Sink]
    elapsed_s: float


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
        self.counts = Counts()
        self.violations: list[str] = []
        self.model: dict[str, EpochModel] = {}
        tune_session(spark)

    # -- plumbing ---------------------------------------------------------------
    def sink(self, kind: str) -> Sink:
        """A fresh Sink, as a new process (an operator task) would build it."""
        return Sink(self.targets[kind], NAMESPACE,
                    storage_options=self.s3_options if kind == "s3" else None)

    def violation(self, msg: str) -> None:
        log.error("VIOLATION: %s", msg)
        self.violations.append(msg)

    def epoch_name(self, i: int) -> str:
        return (dt.date(2026, 1, 1) + dt.timedelta(days=i)).isoformat()

    # -- the schedule -------------------------------------------------------------
    def plan(self) -> list[tuple[str, str, list[str]]]:
        """(epoch, target kind, fault kinds) per epoch.

        Every kind appears at least once whatever the size: the first
        ``len(KINDS)`` epochs each get one kind in a seeded order; then every
        epoch draws each kind with probability ``fault_rate``.
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
            out.append((self.epoch_name(i), "s3" if i in s3_epochs else "local",
                        sorted(faults, key=KINDS.index)))
        return out

    # -- the job side ---------------------------------------------------------------
    def start_job(self, kind: str, epoch: str) -> JobTransaction:
        """Submit operator + job start: begin, pass the payload by conf, job finds it."""
        txn = self.sink(kind).begin(epoch, owner={"soak_seed": self.seed})
        self.counts.attempts += 1
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
        except (TpcError, InjectedCrash) as exc:
            self.counts.refusals += 1
            log.info("refused as it must be: %s: %s", what, exc)
            return
        except Exception as exc:  # noqa: BLE001 - Spark wraps errors of its Python workers
            text = str(exc)
            if any(w in text for w in ("Fenced", "refused", "zombie", "ABORTED", "decided")):
                self.counts.refusals += 1
                return
            self.violation(f"{what}: failed for an unexpected reason: {text[:300]}")
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
                     lambda: self.sink(kind).commit(job.txn, expected_digest=digest))

    def commit(self, kind: str, job: JobTransaction, digest: str, crash: bool) -> None:
        """The commit operator, optionally killed at a random protocol step.

        After a crash the commit task's retry converges; if the decision was
        already written, sometimes no retry comes (a lost notification) and the
        next commit on the target or recover() must finish it.
        """
        if not crash:
            result = self.sink(kind).commit(job.txn, expected_digest=digest)
            if result.outcome != "committed":
                self.violation(f"commit of {job.txn_id}: outcome {result.outcome}")
            self.counts.commits += 1
            return
        self.counts.faults["commit_crash"] += 1
        point = self.rng.choice(COMMIT_CRASH_POINTS[kind])
        self.counts.crash_points[point] = self.counts.crash_points.get(point, 0) + 1
        try:
            with armed(point):
                self.sink(kind).commit(job.txn, expected_digest=digest)
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
        result = self.sink(kind).commit(job.txn, expected_digest=digest)  # the task's retry
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
        if zombie is not None:
            self.refused(f"late commit of zombie {zombie.txn_id}",
                         lambda: self.sink(kind).commit(zombie.txn))
            # and it still writes: leftovers only, which recover must clean
            with contextlib.suppress(Exception):
                self.write(kind, zombie, self.job_output(epoch, m.version + 200))

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
            # (never when a clear+rerun is due: it needs a committed epoch to exist)
            if "clear_rerun" not in faults and self.rng.random() < self.give_up_rate:
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
        # one more epoch stays in flight (pre-committed, never committed): must be invisible
        tail = self.epoch_name(len(schedule))
        self.model[tail] = EpochModel("local")
        job = self.start_job("local", tail)
        self.run_full_job("local", job, tail, 0)
        self.counts.in_flight = 1
        self.recover_all()  # the final restore: finishes every decided commit
        self.violations.extend(check(self.spark, {k: self.sink(k) for k in self.targets},
                                     self.model, self.seed, self.s3_options))
        self.counts.epochs_committed = sum(m.committed is not None for m in self.model.values())
        self.counts.violations = len(self.violations)
        return SoakResult(self.counts, list(self.violations), self.model,
                          {k: self.sink(k) for k in self.targets}, time.monotonic() - start)


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
        bad += _check_ledger(kind, sink, model)
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
