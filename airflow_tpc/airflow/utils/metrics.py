"""Metrics of the protocol through Airflow's own ``Stats`` (StatsD, Datadog or OpenTelemetry,
as the deployment's ``[metrics]`` section configures it).

Why Airflow's Stats and not a client of our own: the deployment already chose and
configured its metrics backend (host, prefix, allow/block lists, tag handling), and every
Airflow process our code runs in (task runner, triggerer, ``dag.test``) initialises it.  A
deployment with metrics off gets Airflow's no-op logger: these calls cost nothing.

Names follow Airflow 3's convention for its own metrics: a fixed name (``airflow_tpc.
commit.files``) with the variables as *tags* (``namespace``, ``target_kind``), which
Datadog (``statsd_datadog_enabled``), OpenTelemetry (``otel_on``) and StatsD with
``statsd_influxdb_enabled`` carry.  Plain StatsD drops tags, so, as Airflow does for its
per-DAG metrics (``dagrun.duration.success.<dag_id>``) while ``[metrics] legacy_names_on``
is true (its default), each metric is also sent with the namespace at the end of its name
(``airflow_tpc.commit.files.<namespace>``, the ``target_kind`` as a tag).

A metric must never fail a task: every emission here swallows and logs its own errors.
"""

from __future__ import annotations

import datetime
import logging
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

log = logging.getLogger(__name__)

#: First segment of every metric name (the deployment's ``statsd_prefix`` goes before it).
PREFIX = "airflow_tpc"

#: Timers (milliseconds on StatsD; histograms on OpenTelemetry).
COMMIT_DURATION = f"{PREFIX}.commit.duration"
PRECOMMIT_DURATION = f"{PREFIX}.precommit.duration"
#: Counters.
COMMITS = f"{PREFIX}.commits"
COMMIT_FILES = f"{PREFIX}.commit.files"
COMMIT_BYTES = f"{PREFIX}.commit.bytes"
COMMIT_ROWS = f"{PREFIX}.commit.rows"
ABORTS = f"{PREFIX}.aborts"
EXPIRATIONS = f"{PREFIX}.expirations"
ROLL_FORWARDS = f"{PREFIX}.roll_forwards"
FENCED = f"{PREFIX}.fenced"
#: Gauges of a target's health (:class:`airflow_tpc.core.health.TargetHealth`), what an
#: on-call alert watches: attempts open, sealed, decided but unfinished; the age in
#: seconds of the oldest undecided one (alert when it nears the transaction timeout).
OPEN_ATTEMPTS = f"{PREFIX}.attempts.open"
PRECOMMITTED_ATTEMPTS = f"{PREFIX}.attempts.precommitted"
UNFINISHED_ATTEMPTS = f"{PREFIX}.attempts.unfinished"
OLDEST_UNDECIDED_AGE = f"{PREFIX}.oldest_undecided_age"

#: Longest name sent with the namespace in it (OpenTelemetry refuses names over 255
#: characters, and Airflow's ``statsd_prefix`` comes before ours).
_MAX_NAME = 200


def target_kind(target: str) -> str:
    """A label for the kind of target: its URI scheme (``file`` for a plain path, ``s3``,
    ``iceberg``).  Only a tag: nothing is decided from it."""
    scheme = urllib.parse.urlsplit(str(target)).scheme.lower() if "://" in str(target) else ""
    return scheme or "file"


def _stats() -> Any:
    from airflow.sdk.observability import stats

    return stats


def _legacy_names_on() -> bool:
    from airflow.sdk.configuration import conf

    return conf.getboolean("metrics", "legacy_names_on", fallback=True)


def _name_part(value: str) -> str:
    """``value`` as one segment of a StatsD name, the way Airflow formats its legacy names:
    characters Stats refuses become ``_`` and ``.`` becomes ``__`` (a dot would split it)."""
    normalize = _stats().normalize_name_for_stats
    return normalize(str(value).replace(".", "__"), log_warning=False)


class TpcMetrics:
    """The metrics of one sink (one namespace on one target), tagged once.

    :param namespace: the pipeline's namespace (tag ``namespace``; also the name suffix
        for plain StatsD while ``legacy_names_on``).
    :param target: the target URI (tag ``target_kind``: its scheme).
    """

    def __init__(self, namespace: str, target: str) -> None:
        self.namespace = namespace
        self.tags = {"namespace": namespace, "target_kind": target_kind(target)}

    def _names(self, stat: str) -> list[tuple[str, dict[str, str]]]:
        names = [(stat, self.tags)]
        if _legacy_names_on():
            named = f"{stat}.{_name_part(self.namespace)}"
            if len(named) <= _MAX_NAME:
                names.append((named, {"target_kind": self.tags["target_kind"]}))
        return names

    def incr(self, stat: str, count: int = 1) -> None:
        """Add ``count`` to counter ``stat``; never raises."""
        try:
            stats = _stats()
            for name, tags in self._names(stat):
                stats.incr(name, count=int(count), tags=tags)
        except Exception as exc:  # a metric must never fail a task
            log.warning("Could not emit metric %s: %s", stat, exc)

    def timing(self, stat: str, seconds: float) -> None:
        """Record ``seconds`` in timer ``stat`` (milliseconds on StatsD); never raises."""
        try:
            stats = _stats()
            delta = datetime.timedelta(seconds=max(0.0, float(seconds)))
            for name, tags in self._names(stat):
                stats.timing(name, delta, tags=tags)
        except Exception as exc:  # a metric must never fail a task
            log.warning("Could not emit metric %s: %s", stat, exc)

    def gauge(self, stat: str, value: float) -> None:
        """Set gauge ``stat`` to ``value``; never raises."""
        try:
            stats = _stats()
            for name, tags in self._names(stat):
                stats.gauge(name, float(value), tags=tags)
        except Exception as exc:  # a metric must never fail a task
            log.warning("Could not emit metric %s: %s", stat, exc)

    def health(self, health: Any) -> None:
        """The target's health gauges (a :class:`~airflow_tpc.core.health.TargetHealth`)."""
        self.gauge(OPEN_ATTEMPTS, health.open)
        self.gauge(PRECOMMITTED_ATTEMPTS, health.precommitted)
        self.gauge(UNFINISHED_ATTEMPTS, health.unfinished)
        self.gauge(OLDEST_UNDECIDED_AGE, health.oldest_undecided_age_s)

    # -- what the hook observed ------------------------------------------------------------

    def committed(self, seconds: float, files: int, size: int, rows: int | None) -> None:
        """An epoch became visible through this call (committed, or rolled forward after a
        try that decided and died): once per commit, never for a no-op rerun."""
        self.timing(COMMIT_DURATION, seconds)
        self.incr(COMMITS)
        self.incr(COMMIT_FILES, files)
        self.incr(COMMIT_BYTES, size)
        if rows is not None:
            self.incr(COMMIT_ROWS, rows)


# -- health gauges at the end of the tasks that touch a ledger ---------------------------


def metrics_on() -> bool:
    """Whether the deployment sends metrics at all (``[metrics]`` StatsD, Datadog or
    OpenTelemetry on): the health gauges cost a ``describe`` of the target, not paid for
    a no-op logger."""
    from airflow.sdk.configuration import conf

    return any(conf.getboolean("metrics", key, fallback=False)
               for key in ("statsd_on", "statsd_datadog_enabled", "otel_on"))


def emit_health(hooks: Any) -> None:
    """Each hook's target health gauges (:meth:`TpcHook.emit_health`), sent by a task that
    just touched that target's ledger (sensor end, commit, abort): so the gauges follow
    every target a DAG writes — a table through its catalog connection, as the task
    opened it — with no monitoring schedule to set up.  Never raises; costs one
    ``describe`` per target, and nothing while metrics are off."""
    try:
        if not metrics_on():
            return
    except Exception as exc:  # a metric must never fail a task
        log.warning("Could not read the [metrics] configuration: %s", exc)
        return
    for hook in hooks:
        try:
            hook.emit_health()
        except Exception as exc:  # a metric must never fail a task
            log.warning("Could not emit the health gauges of %s: %s",
                        getattr(hook, "target", hook), exc)


@contextmanager
def health_at_end(*hooks: Any) -> Iterator[None]:
    """Send the targets' health gauges when the block ends, however it ends (a refused
    commit leaves an attempt undecided: exactly what the gauges are for)."""
    try:
        yield
    finally:
        emit_health(hooks)
