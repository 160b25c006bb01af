"""Metrics through Airflow's own Stats, received by a real StatsD UDP listener.

One subprocess (Airflow configures Stats from ``[metrics]`` when it starts) runs the
``tpc_it_metrics`` DAG through ``dag.test`` in several scenarios, with StatsD pointed at a
UDP socket this test binds on 127.0.0.1 (a random port).  Between scenarios the driver
sends a marker through the same Stats client, so each packet is attributed to the
scenario that emitted it.  ``statsd_influxdb_enabled`` makes the tags visible in the
packets (plain StatsD drops them).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from collections import defaultdict
from pathlib import Path

import pytest

from airflow_tpc import Sink, TxnState

pytestmark = pytest.mark.timeout(900)

HERE = Path(__file__).resolve().parent
NS = "tpc_it_metrics"
P = "airflow.airflow_tpc."  # statsd_prefix + our prefix

DRIVER = r"""
import json, sys
from datetime import datetime, timezone
sys.path.insert(0, {here!r})
from airflow.dag_processing.dagbag import DagBag
from airflow.sdk.observability import stats
from airflow_tpc.core import faults
import helpers

bag = DagBag(dag_folder={dags!r})
dag = bag.get_dag("tpc_it_metrics")
out = {{}}

def run(name, day, conf, crash=None):
    stats.incr("tpc_marker." + name)
    when = datetime.fromisoformat(day).replace(tzinfo=timezone.utc)
    if crash:
        with faults.armed(crash):
            dr = dag.test(logical_date=when, run_conf=conf)
    else:
        dr = dag.test(logical_date=when, run_conf=conf)
    out[name] = {{"run_id": dr.run_id, "states": helpers.states(dr)}}
    return dr

committed = run("commit", "2026-07-01", {{"epoch": "2026-07-01"}})
stats.incr("tpc_marker.rerun")
dr = helpers.rerun_tasks(dag, committed.run_id, ["commit"])
out["rerun"] = {{"states": helpers.states(dr)}}
run("abort", "2026-07-02", {{"epoch": "2026-07-02", "fail": 1}})
run("fence", "2026-07-03", {{"epoch": "2026-07-03", "fence": 1}})
run("expire", "2026-07-04", {{"epoch": "2026-07-04", "expire": 1}})
crashed = run("crash", "2026-07-05", {{"epoch": "2026-07-05"}}, crash="commit.after_decision")
stats.incr("tpc_marker.roll")
dr = helpers.rerun_tasks(dag, crashed.run_id, ["commit"])
out["roll"] = {{"states": helpers.states(dr)}}

group_dag = bag.get_dag("tpc_it_metrics_group")
for name, conf in (("group_commit", {{"epoch": "2026-07-01"}}),
                   ("group_abort", {{"epoch": "2026-07-02", "fail": 1}})):
    stats.incr("tpc_marker." + name)
    dr = group_dag.test(logical_date=datetime.fromisoformat(conf["epoch"]).replace(
        tzinfo=timezone.utc), run_conf=conf)
    out[name] = {{"run_id": dr.run_id, "states": helpers.states(dr)}}

# Health gauges: one attempt sealed and waiting (07-06), one decided whose commit died
# before promoting (07-07), beside the fenced zombie's open attempt of 07-03.
import os
from airflow_tpc import Sink
from airflow_tpc.airflow.hooks.tpc import TpcHook
target = os.path.join(os.environ["TPC_IT_ROOT"], "metrics_target")
sink = Sink(target, "tpc_it_metrics")
for day in ("2026-07-06", "2026-07-07"):
    txn = sink.begin(day, owner={{"dag_id": "health", "run_id": day}})
    sink.storage.put(sink.storage.join(sink.layout.staging(day, txn.attempt), "p.parquet"),
                     b"h" * 10)
    sink.precommit(txn)
try:
    with faults.armed("commit.after_decision"):
        sink.commit(txn)
except faults.InjectedCrash:
    pass
stats.incr("tpc_marker.health")
out["health"] = TpcHook(target, "tpc_it_metrics").emit_health()
# An abort from the run page (the UI layer's own abort, as its route calls it).
from airflow_tpc.airflow.ui import runs as ui_runs
stats.incr("tpc_marker.ui_abort")
txn = sink.begin("2026-07-08", owner={{"dag_id": "health", "run_id": "ui"}})
sink.storage.put(sink.storage.join(sink.layout.staging("2026-07-08", txn.attempt),
                                   "p.parquet"), b"u" * 10)
sink.precommit(txn)
[info] = sink.describe("2026-07-08")
found = ui_runs.Found("tpc_it_metrics", "ui", "submit", sink, info)
out["ui_abort"] = ui_runs.abort(found, "admin", "api")["outcome"]
# An Iceberg table on the SQL catalog: gauges from its sensor's and commit's ends.
stats.incr("tpc_marker.iceberg")
dr = bag.get_dag("tpc_it_metrics_iceberg").test(
    logical_date=datetime(2026, 7, 9, tzinfo=timezone.utc), run_conf={{"epoch": "2026-07-09"}})
out["iceberg"] = {{"states": helpers.states(dr)}}
# A group's Abort from its page (the UI layer's group abort, as its route calls it).
from airflow_tpc import Group
from airflow_tpc.airflow.ui import groups as ui_groups
root = os.environ["TPC_IT_ROOT"]
group = Group({{n: Sink(os.path.join(root, f"metrics_group_{{n}}"), "tpc_it_metrics_group")
               for n in ("events", "daily")}},
              os.path.join(root, "_tpc_groups", "tpc_it_metrics_group"))
gtxn = group.begin("2026-07-10", owner={{"dag_id": "health", "run_id": "ui-group"}})
stats.incr("tpc_marker.ui_group_abort")
out["ui_group_abort"] = ui_groups.abort(ui_groups.FoundGroup(
    "tpc_it_metrics_group", "ui-group", "submit", group, gtxn), "admin", "ui")["outcome"]
stats.incr("tpc_marker.end")
print("RESULT " + json.dumps(out))
"""


class StatsdListener:
    """A StatsD server as far as the test needs one: a UDP socket on 127.0.0.1 that keeps
    every line it receives (a packet may hold several, newline-separated)."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 * 1024 * 1024)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.lines: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                data = self.sock.recv(65535)
            except TimeoutError:
                continue
            self.lines.extend(line for line in data.decode().split("\n") if line)

    def close(self) -> list[str]:
        self._stop.set()
        self._thread.join(10)
        self.sock.close()
        return self.lines


def parse(line: str) -> tuple[str, dict[str, str], float, str]:
    """``name[,k=v...]:value|type`` (influxdb tag style) -> (name, tags, value, type)."""
    head, _, rest = line.rpartition(":")
    value, _, kind = rest.partition("|")
    name, *pairs = head.split(",")
    return name, dict(p.split("=", 1) for p in pairs), float(value), kind.split("|")[0]


def by_scenario(lines: list[str]) -> dict[str, list[tuple[str, dict[str, str], float, str]]]:
    out: dict[str, list] = defaultdict(list)
    current = "start"
    for line in lines:
        name, tags, value, kind = parse(line)
        if name.startswith("airflow.tpc_marker."):
            current = name.removeprefix("airflow.tpc_marker.")
        elif name.startswith(P):
            out[current].append((name.removeprefix(P), tags, value, kind))
    return out


def totals(packets, kind: str = "c") -> dict[tuple[str, tuple], float]:
    """Sum of each (name, tags) counter, or the list of timer values."""
    out: dict = defaultdict(float)
    for name, tags, value, k in packets:
        if k == kind:
            out[(name, tuple(sorted(tags.items())))] += value
    return dict(out)


TAGS = (("namespace", NS), ("target_kind", "file"))
LEGACY = (("target_kind", "file"),)


def counters(packets) -> dict[str, float]:
    """Counter totals by name, each checked to come twice: tagged, and with the
    namespace in its name (``legacy_names_on``) tagged with the target kind only."""
    tagged = {n: v for (n, t), v in totals(packets).items() if t == TAGS}
    named = {n.removesuffix(f".{NS}"): v for (n, t), v in totals(packets).items()
             if t == LEGACY and n.endswith(f".{NS}")}
    assert tagged == named, (tagged, named)
    return tagged


ICEBERG_DIR = os.path.join(os.environ.get("TPC_IT_ROOT", "/tmp/tpc-it"), "metrics_iceberg")


@pytest.fixture(scope="module")
def emitted(airflow_db):
    listener = StatsdListener()
    os.makedirs(os.path.join(ICEBERG_DIR, "warehouse"), exist_ok=True)
    env = {**os.environ,
           "AIRFLOW_CONN_TPC_IT_METRICS_CATALOG": json.dumps({
               "conn_type": "iceberg_catalog", "host": f"sqlite:///{ICEBERG_DIR}/catalog.db",
               "schema": f"file://{ICEBERG_DIR}/warehouse", "extra": {"type": "sql"}}),
           "AIRFLOW__METRICS__STATSD_ON": "True",
           "AIRFLOW__METRICS__STATSD_HOST": "127.0.0.1",
           "AIRFLOW__METRICS__STATSD_PORT": str(listener.port),
           "AIRFLOW__METRICS__STATSD_PREFIX": "airflow",
           "AIRFLOW__METRICS__STATSD_INFLUXDB_ENABLED": "True",
           "AIRFLOW__METRICS__LEGACY_NAMES_ON": "True"}
    script = DRIVER.format(here=str(HERE), dags=str(HERE / "dags"))
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=840)
    lines = listener.close()
    result = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and result, proc.stdout[-3000:] + proc.stderr[-5000:]
    return json.loads(result[-1].removeprefix("RESULT ")), by_scenario(lines)


def _committed(epoch: str):
    [info] = [i for i in Sink(os.path.join(os.environ["TPC_IT_ROOT"], "metrics_target"),
                              NS).describe(epoch) if i.state is TxnState.COMMITTED]
    return info


def test_a_commit_emits_the_manifest_totals_and_its_durations(emitted):
    runs, packets = emitted
    assert runs["commit"]["states"]["commit"] == "success", runs["commit"]
    info = _committed("2026-07-01")
    assert (info.files, info.bytes, info.rows) == (2, 350, 42)
    got = counters(packets["commit"])
    assert got == {"commits": 1, "commit.files": 2, "commit.bytes": 350, "commit.rows": 42}
    timers = {n: v for n, t, v, k in packets["commit"] if k == "ms" and t == dict(TAGS)}
    assert set(timers) == {"commit.duration", "precommit.duration"}
    assert all(0 <= v < 600_000 for v in timers.values()), timers


GROUP_NS = "tpc_it_metrics_group"


def test_a_group_commit_counts_each_member_once_and_an_abort_each_member(emitted):
    runs, packets = emitted
    assert runs["group_commit"]["states"]["commit"] == "success", runs["group_commit"]
    tagged = totals(packets["group_commit"])
    group_tags = (("namespace", GROUP_NS), ("target_kind", "file"))
    got = {n: v for (n, t), v in tagged.items() if t == group_tags}
    # Two members, each as a single commit of its two files (350 bytes, 42 rows).
    assert got == {"commits": 2, "commit.files": 4, "commit.bytes": 700,
                   "commit.rows": 84}, tagged
    assert runs["group_abort"]["states"]["abort"] == "success", runs["group_abort"]
    aborted = {n: v for (n, t), v in totals(packets["group_abort"]).items() if t == group_tags}
    assert aborted == {"aborts": 2}, aborted


def test_a_rerun_after_the_commit_emits_no_second_commit(emitted):
    runs, packets = emitted
    assert runs["rerun"]["states"]["commit"] == "success", runs["rerun"]
    assert counters(packets["rerun"]) == {}
    assert not [p for p in packets["rerun"] if p[0].startswith("commit")]


def test_an_abort_increments_aborts(emitted):
    runs, packets = emitted
    assert runs["abort"]["states"]["abort"] == "success", runs["abort"]
    assert counters(packets["abort"]) == {"aborts": 1}


def test_an_abort_from_the_run_page_increments_aborts(emitted):
    runs, packets = emitted
    assert runs["ui_abort"] == "aborted", runs
    assert counters(packets["ui_abort"]) == {"aborts": 1}


def test_a_fenced_zombie_increments_fenced(emitted):
    runs, packets = emitted
    states = runs["fence"]["states"]
    assert states["wait_precommit"] == "failed" and states["abort"] == "success", states
    assert counters(packets["fence"]) == {"fenced": 1, "aborts": 1}


def test_an_expired_attempt_increments_expirations(emitted):
    runs, packets = emitted
    states = runs["expire"]["states"]
    assert states["wait_precommit"] == "failed", states
    assert counters(packets["expire"]) == {"expirations": 1, "aborts": 1}


def test_a_roll_forward_counts_the_commit_once(emitted):
    runs, packets = emitted
    assert runs["crash"]["states"]["commit"] == "failed", runs["crash"]
    assert runs["roll"]["states"]["commit"] == "success", runs["roll"]
    assert counters(packets["crash"]) == {}  # decided, died before publishing: nothing yet
    info = _committed("2026-07-05")
    assert info.published
    assert counters(packets["roll"]) == {"roll_forwards": 1, "commits": 1, "commit.files": 2,
                                         "commit.bytes": 350, "commit.rows": 42}


class _Backend:
    """A Stats backend (the interface Airflow's StatsD/Datadog/OTel loggers implement) that
    records calls, or fails every one of them."""

    def __init__(self, fail: bool) -> None:
        self.fail = fail
        self.calls: list[tuple[str, str, dict]] = []

    def _call(self, kind: str, stat: str, tags: dict | None) -> None:
        if self.fail:
            raise OSError("the metrics backend is down")
        self.calls.append((kind, stat, dict(tags or {})))

    def incr(self, stat, count=1, rate=1, *, tags=None):
        self._call("incr", stat, tags)

    def timing(self, stat, dt, *, tags=None):
        self._call("timing", stat, tags)


@pytest.fixture()
def stats_backend(airflow_db):
    from airflow.sdk.observability import stats
    from airflow.sdk.observability.metrics import stats_utils

    def use(backend: _Backend) -> _Backend:
        stats.initialize(factory=lambda: backend, export_legacy_names=False)
        return backend

    yield use
    from airflow.sdk.configuration import conf

    stats.initialize(factory=stats_utils.get_stats_factory(),
                     export_legacy_names=conf.getboolean("metrics", "legacy_names_on"))


def _commit_through_hook(target: str, namespace: str) -> dict:
    from airflow_tpc.airflow.hooks.tpc import TpcHook

    hook = TpcHook(target, namespace)
    sink = hook.get_sink()
    txn = sink.begin("2026-08-01")
    staging = Path(txn.staging_uri.removeprefix("file://"))
    staging.mkdir(parents=True)
    (staging / "part-0.parquet").write_bytes(b"x" * 10)
    sink.precommit(txn)
    check = hook.check_precommit(txn.to_dict())
    outcome = hook.commit_pointer(hook.precommit_pointer(check))
    return {"outcome": outcome.result.outcome}


def test_a_failing_metrics_backend_never_fails_a_commit(stats_backend, tmp_path, caplog):
    backend = stats_backend(_Backend(fail=True))
    assert _commit_through_hook(str(tmp_path / "t"), "ns") == {"outcome": "committed"}
    assert backend.calls == []
    assert "Could not emit metric airflow_tpc.commit.duration" in caplog.text


def test_a_namespace_becomes_one_name_segment(stats_backend, tmp_path):
    backend = stats_backend(_Backend(fail=False))
    _commit_through_hook(str(tmp_path / "t"), "sales.eu daily")
    names = {stat for kind, stat, tags in backend.calls if kind == "incr"}
    assert "airflow_tpc.commit.files.sales__eu_daily" in names, names
    tagged = [tags for kind, stat, tags in backend.calls if stat == "airflow_tpc.commit.files"]
    assert tagged == [{"namespace": "sales.eu daily", "target_kind": "file"}]


def test_the_stats_import_is_not_deprecated():
    """``airflow.stats`` is a deprecated shim in Airflow 3.3; the SDK path is not: a
    fresh interpreter with deprecation warnings as errors imports it and emits."""
    code = ("import warnings; warnings.simplefilter('error')\n"
            "from airflow_tpc.airflow.utils.metrics import COMMITS, TpcMetrics, _stats\n"
            "_stats()\n"
            "TpcMetrics('ns', 's3://b/t').incr(COMMITS)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Could not emit" not in proc.stderr


def test_health_gauges_name_what_an_alert_watches(emitted):
    """The admin DAG's status (TpcHook.emit_health) sends the target's health as gauges:
    attempts open (the fenced zombie's), sealed (07-06), decided but unfinished (07-07's
    commit died before promoting) and the oldest undecided attempt's age."""
    runs, packets = emitted
    health = runs["health"]
    assert (health["open"], health["precommitted"], health["unfinished"]) == (1, 1, 1), health
    assert health["oldest_undecided_age_s"] > 0
    gauges = [(n, t, v) for n, t, v, k in packets["health"] if k == "g"]
    tagged = {n: v for n, t, v in gauges if t == dict(TAGS)}
    named = {n.removesuffix(f".{NS}"): v for n, t, v in gauges
             if t == dict(LEGACY) and n.endswith(f".{NS}")}
    assert tagged == named, (tagged, named)
    assert tagged == {"attempts.open": 1, "attempts.precommitted": 1,
                      "attempts.unfinished": 1,
                      "oldest_undecided_age": pytest.approx(health["oldest_undecided_age_s"],
                                                            abs=0.01)}, tagged


GAUGES = ("attempts.open", "attempts.precommitted", "attempts.unfinished",
          "oldest_undecided_age")


def _gauges(packets, tags: tuple) -> list[tuple[str, float]]:
    """The gauges of one (namespace, target kind), in the order they arrived."""
    return [(n, v) for n, t, v, k in packets if k == "g" and t == dict(tags)]


def _last(gauges: list[tuple[str, float]]) -> dict[str, float]:
    return {n: v for n, v in gauges}


def test_the_tasks_that_touch_the_ledger_send_the_targets_health(emitted):
    """No monitoring schedule: the sensor's end sends the sealed attempt (precommitted 1),
    the commit's end the target settled (every gauge 0); the abort task's end, the
    aborted attempt gone (nothing undecided, nothing unfinished)."""
    runs, packets = emitted
    sent = _gauges(packets["commit"], TAGS)
    assert ("attempts.precommitted", 1) in sent, sent
    assert _last(sent) == dict.fromkeys(GAUGES, 0), sent
    aborted = _gauges(packets["abort"], TAGS)
    assert _last(aborted) == dict.fromkeys(GAUGES, 0), aborted


def test_an_iceberg_table_gets_its_gauges_through_its_catalog_connection(emitted):
    """The table is opened through the ``iceberg_catalog`` connection the tasks name:
    its gauges (target kind ``iceberg``) from the sensor's end and the commit's."""
    runs, packets = emitted
    assert runs["iceberg"]["states"]["commit"] == "success", runs["iceberg"]
    sent = _gauges(packets["iceberg"], (("namespace", NS), ("target_kind", "iceberg")))
    assert ("attempts.precommitted", 1) in sent, sent
    assert _last(sent) == dict.fromkeys(GAUGES, 0), sent
    legacy = [(n, v) for n, t, v, k in packets["iceberg"]
              if k == "g" and t == {"target_kind": "iceberg"}]
    assert {n.removesuffix(f".{NS}") for n, _ in legacy} == set(GAUGES), legacy


def test_a_group_sends_each_members_gauges_and_its_ui_abort_counts_each(emitted):
    runs, packets = emitted
    group_tags = (("namespace", GROUP_NS), ("target_kind", "file"))
    sent = _gauges(packets["group_commit"], group_tags)
    # the sensor's end and the commit's, each for both members
    assert len([n for n, _ in sent if n == "attempts.open"]) == 4, sent
    assert _last(sent) == dict.fromkeys(GAUGES, 0), sent
    assert runs["ui_group_abort"] == "aborted", runs
    counted = {n: v for (n, t), v in totals(packets["ui_group_abort"]).items()
               if t == group_tags}
    assert counted == {"aborts": 2}, counted
