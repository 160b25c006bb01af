"""The Airflow layer's structure: sink arguments declared once, the hook owns the protocol
queries (and keeps the sensor's poke cheap), stores are asked, never sniffed from URIs.

Real parts: local files, the migrated Airflow DB, DAG runs through ``dag.test()`` (the
``tpc_it_nospark`` DAG: the protocol's tasks around a plain-Python job, no Spark).
"""

from __future__ import annotations

import ast
import json
import os
from pathlib import Path

import pytest

from airflow_tpc import Sink, SinkConfig, TxnState

from .helpers import (
    asset_events,
    count_storage_requests,
    day,
    listings_and_reads,
    published,
    states,
    xcom_value,
)

pytestmark = pytest.mark.timeout(900)

REPO = Path(__file__).resolve().parents[2]
SECRET = "wJalrXUtnFEMI-not-a-real-secret"
NOSPARK = "tpc_it_nospark"


def _stage(sink, txn, name="part-0.parquet", data=b"x" * 100):
    path = Path(txn.staging_uri.removeprefix("file://"))
    path.mkdir(parents=True, exist_ok=True)
    (path / name).write_bytes(data)


# -- one declaration of the sink arguments ---------------------------------------------------

def _all_tasks(**sink):
    from airflow_tpc.airflow import (
        AbortOperator,
        CommitOperator,
        PrecommitSensor,
        StagedSparkSubmitOperator,
    )

    return [
        StagedSparkSubmitOperator(task_id="s", application="job.py", **sink),
        PrecommitSensor(task_id="w", submit_task_id="s", **sink),
        CommitOperator(task_id="c", sensor_task_id="w", **sink),
        AbortOperator(task_id="a", submit_task_id="s", **sink),
    ]


def test_every_task_shares_the_sink_arguments_and_their_template_fields(airflow_db):
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

    from airflow_tpc.airflow import TpcBaseOperator
    from airflow_tpc.airflow.hooks.tpc import SINK_ARG_NAMES
    from airflow_tpc.airflow.operators.base import TPC_TEMPLATE_FIELDS

    submit, sensor, commit, abort = _all_tasks(target="/data/t", namespace="n",
                                               storage_conn_id="lake")
    for op in (submit, sensor, commit, abort):
        assert isinstance(op, TpcBaseOperator), type(op)
        assert set(TPC_TEMPLATE_FIELDS) <= set(op.template_fields), op.template_fields
        assert len(set(op.template_fields)) == len(op.template_fields)  # each field once
        assert {n: getattr(op.sink_args, n) for n in SINK_ARG_NAMES} == {
            "target": "/data/t", "namespace": "n", "storage_conn_id": "lake",
            "storage_options": {}, "sink_config": None, "catalog_conn_id": None,
            "ledger_uri": None, "replace_where": None, "write_mode": "replace",
            "add_columns": False}
    # each task's own fields are kept
    assert set(SparkSubmitOperator.template_fields) | {"epoch"} <= set(submit.template_fields)
    assert "submit_task_id" in sensor.template_fields
    assert "sensor_task_id" in commit.template_fields
    assert {"submit_task_id", "reason"} <= set(abort.template_fields)


def test_sink_arguments_may_come_from_default_args(airflow_db):
    """Declared once on the base, they are still filled from a DAG's default_args, and the
    commit's default outlet is the target's Asset either way."""
    from airflow.sdk import DAG

    from airflow_tpc.airflow import CommitOperator, PrecommitSensor
    from airflow_tpc.airflow.operators.tpc import target_asset

    with DAG("tpc_unit_defaults", schedule=None,
             default_args={"target": "/data/t", "namespace": "n", "storage_conn_id": "lake"}):
        commit = CommitOperator(task_id="c", sensor_task_id="w")
        sensor = PrecommitSensor(task_id="w", submit_task_id="s")
    assert commit.sink_args == sensor.sink_args
    assert (sensor.target, sensor.namespace, sensor.storage_conn_id) == ("/data/t", "n", "lake")
    assert commit.outlets == [target_asset("/data/t")]


@pytest.mark.parametrize("index", range(4), ids=["submit", "sensor", "commit", "abort"])
def test_every_task_refuses_secrets_in_storage_options(airflow_db, index):
    with pytest.raises(ValueError, match="credentials") as info:
        _all_tasks(target="s3://b/t", namespace="n",
                   storage_options={"region_name": "us-east-1", "secret": SECRET})[index]
    assert SECRET not in str(info.value)


def test_the_hook_is_built_from_the_rendered_arguments(airflow_db, monkeypatch):
    """storage_conn_id is templated like aws_conn_id; the hook follows what was rendered and
    is kept while the arguments stay the same (a poking sensor reuses one Sink)."""
    from airflow.sdk import DAG

    from airflow_tpc.airflow import PrecommitSensor

    with DAG("tpc_unit_render", schedule=None):
        sensor = PrecommitSensor(task_id="w", target="{{ params.root }}/t",
                                 namespace="{{ params.ns }}", storage_conn_id="{{ params.conn }}",
                                 submit_task_id="s",
                                 params={"root": "/data", "ns": "n1", "conn": "lake_s3"})
    sensor.render_template_fields({"params": {"root": "/data", "ns": "n1", "conn": "lake_s3"}})
    hook = sensor.tpc_hook
    assert (hook.target, hook.namespace, hook.storage_conn_id) == ("/data/t", "n1", "lake_s3")
    assert sensor.tpc_hook is hook
    sensor.namespace = "n2"  # arguments changed: never the old hook
    assert sensor.tpc_hook is not hook and sensor.tpc_hook.namespace == "n2"


def test_trigger_kwargs_are_the_sink_arguments_serialised_once(tmp_path, airflow_db):
    from airflow_tpc.airflow.hooks.tpc import SINK_ARG_NAMES, SinkArgs
    from airflow_tpc.airflow.triggers.tpc import PrecommitTrigger

    sink = Sink(str(tmp_path / "t"), "trig")
    txn = sink.begin("2026-01-01")
    trigger = PrecommitTrigger(txn=txn.to_dict(), target=sink.target, namespace="trig",
                               storage_conn_id="lake",
                               storage_options={"region_name": "eu-west-1"},
                               sink_config=SinkConfig(timeout_s=60, promotion="manifest"),
                               poll_interval=0.5)
    cls, kwargs = trigger.serialize()
    assert set(kwargs) == {"txn", *SINK_ARG_NAMES, "poll_interval", "deadline"}
    json.dumps(kwargs)  # stored in the metadata DB: a SinkConfig is serialised as its fields
    assert kwargs["sink_config"]["promotion"] == "manifest"
    again = PrecommitTrigger(**kwargs)
    assert again.serialize() == (cls, kwargs)
    assert again.sink_args == SinkArgs(sink.target, "trig", "lake", {"region_name": "eu-west-1"},
                                       kwargs["sink_config"])
    # the trigger refuses what the operators refuse: its kwargs are stored in the DB
    with pytest.raises(ValueError, match="credentials") as info:
        PrecommitTrigger(txn=txn.to_dict(), target="s3://b/t", namespace="n",
                         storage_options={"key": "AKIA", "secret": SECRET})
    assert SECRET not in str(info.value)


# -- the hook's queries: cheap on the hot path ------------------------------------------------

def _epoch_with_history(sink, epoch, stale=2):
    for _ in range(stale):
        sink.abort(sink.begin(epoch), "a failed earlier try")
    txn = sink.begin(epoch)
    _stage(sink, txn)
    return txn


def test_check_precommit_and_pointer_cost_one_listing_and_two_reads(tmp_path, airflow_db):
    from airflow_tpc.airflow.hooks.tpc import TpcHook
    from airflow_tpc.storage import LocalStorage

    sink = Sink(str(tmp_path / "t"), "cheap")
    txn = _epoch_with_history(sink, "2026-01-01")
    hook = TpcHook(sink.target, "cheap")
    # Opening the sink reads its claim once (sink.json says where staging lies): one
    # read per sink, not per check, so it is not counted below.
    assert hook.get_sink().layout.staging_root
    with count_storage_requests(LocalStorage) as waiting:
        assert hook.check_precommit(txn.to_dict()).status == "waiting"
    manifest = sink.precommit(txn)
    with count_storage_requests(LocalStorage) as ready:
        check = hook.check_precommit(txn.to_dict())
        pointer = hook.precommit_pointer(check)
    assert check.status == "ready" and pointer["digest"] == manifest.digest
    assert pointer["files"] == 1 and pointer["manifest_uri"] == sink.manifest_uri(txn)
    for counts in (waiting, ready):
        # the begin record, one ledger listing, the manifest (or its absence); describe()
        # would list the staging of each of the 3 attempts and read their records
        assert listings_and_reads(counts) == (1, 2, {}), dict(counts)
    with count_storage_requests(LocalStorage) as described:
        sink.describe("2026-01-01")
    assert listings_and_reads(described)[0] > 1  # what the check above must not become


def test_check_precommit_failure_signals(tmp_path, airflow_db):
    from airflow_tpc.airflow.hooks.tpc import TpcHook

    sink = Sink(str(tmp_path / "t"), "signals")
    hook = TpcHook(sink.target, "signals")
    aborted = sink.begin("2026-01-01")
    sink.abort(aborted, "job failed")
    check = hook.check_precommit(aborted.to_dict())
    assert check.status == "failed" and "ABORTED" in check.message
    fenced = sink.begin("2026-01-02")
    sink.begin("2026-01-02")
    check = hook.check_precommit(fenced.to_dict())
    assert check.status == "failed" and "fenced" in check.message
    # committed (a cleared sensor after the commit): ready, pointer from the decision
    txn = sink.begin("2026-01-03")
    _stage(sink, txn)
    manifest = sink.precommit(txn)
    sink.commit(txn, expected_digest=manifest.digest)
    check = hook.check_precommit(txn.to_dict())
    assert check.status == "ready" and "COMMITTED" in check.message
    assert hook.precommit_pointer(check)["digest"] == manifest.digest


def test_nospark_run_ready_poke_is_cheap_commit_publishes(dagbag, data_root):
    """A real DAG run: the sensor's one "ready" poke on an epoch with two failed earlier
    attempts makes one listing and three reads (counted on the real local store): the
    claim (a poke opens a fresh sink, which reads where staging lies), the begin record
    and the manifest — the same with any number of earlier attempts.  The pointer it
    pushes is what commit publishes, once."""
    from airflow_tpc.airflow.operators.tpc import target_asset

    target = os.path.join(data_root, "nospark_target")
    dag = dagbag.get_dag(NOSPARK)
    uri = target_asset(target).uri
    before = len(asset_events(uri))
    dr = dag.test(logical_date=day("2026-07-01"), run_conf={"epoch": "2026-07-01", "stale": 2})
    assert dr.state == "success", states(dr)
    counts = xcom_value(NOSPARK, dr.run_id, "wait_precommit", "storage_requests")
    assert listings_and_reads(counts) == (1, 3, {}), counts
    pointer = xcom_value(NOSPARK, dr.run_id, "wait_precommit", "return_value")
    assert pointer["txn_id"] == f"{NOSPARK}/2026-07-01/3"
    sink = Sink(target, NOSPARK)
    info = {i.attempt: i for i in sink.describe("2026-07-01")}
    assert info[3].state is TxnState.COMMITTED and info[3].published
    assert [info[a].state for a in (1, 2)] == [TxnState.ABORTED] * 2
    # (the target is shared with other modules' runs of this DAG: other epochs may be there)
    assert published(target)["2026-07-01"] == ["part-0.parquet"]
    assert len(asset_events(uri)) == before + 1
    assert states(dr)["abort"] == "skipped"


def test_nospark_run_failed_job_aborts_only_this_runs_attempts(dagbag, data_root):
    """The abort task (through TpcHook.abort_run) aborts every attempt this run began —
    the one in XCom and the earlier tries it left open — and never another run's."""
    target = os.path.join(data_root, "nospark_target")
    dag = dagbag.get_dag(NOSPARK)
    dr = dag.test(logical_date=day("2026-07-02"),
                  run_conf={"epoch": "2026-07-02", "foreign": True, "open": 1, "fail": True})
    st = states(dr)  # (no "committed" leaf in this DAG: the run's state says nothing)
    assert st["submit"] == "failed" and st["abort"] == "success", st
    sink = Sink(target, NOSPARK)
    info = {i.attempt: i for i in sink.describe("2026-07-02")}
    assert info[1].state is TxnState.OPEN  # another run's: not ours to abort
    assert [info[a].state for a in (2, 3)] == [TxnState.ABORTED] * 2
    assert info[3].staging_files == 0
    result = xcom_value(NOSPARK, dr.run_id, "abort", "return_value")
    assert result == {"aborted": [f"{NOSPARK}/2026-07-02/2", f"{NOSPARK}/2026-07-02/3"],
                      "committed": []}
    assert "2026-07-02" not in published(target)


# -- stores are asked, not sniffed --------------------------------------------------------

def test_credentials_go_only_to_stores_that_take_them(airflow_db, monkeypatch):
    from airflow_tpc.airflow.hooks.tpc import TpcHook

    monkeypatch.setenv("AIRFLOW_CONN_TPC_HOOK_LAKE", json.dumps(
        {"conn_type": "generic", "login": "AKIAEXAMPLE", "password": SECRET}))
    for target in ("s3://b/t", "S3://b/t", "s3a://b/t"):  # every spelling S3Storage reads
        opts = TpcHook(target, "n", storage_conn_id="tpc_hook_lake").storage_options()
        assert opts is not None and opts["secret"] == SECRET, target
    for target in ("/data/t", "file:///data/t"):
        assert TpcHook(target, "n", storage_conn_id="tpc_hook_lake").storage_options() is None


def test_links_and_lineage_names_come_from_the_store_class():
    from airflow.sdk.definitions.connection import Connection

    from airflow_tpc.airflow.hooks.tpc import TpcHook
    from airflow_tpc.airflow.links.tpc import manifest_url
    from airflow_tpc.airflow.utils.lineage import identity

    def _lineage_name(target: str, catalog: dict | None = None) -> tuple[str, str]:
        conn = None if catalog is None else Connection(
            conn_id="cat", conn_type="iceberg_catalog", extra=json.dumps(catalog))
        return identity(TpcHook(target, "ns", catalog_conn_id="cat" if conn else None,
                                catalog_connection=conn))

    assert manifest_url("s3a://b/k/_tpc_manifest.json") == \
        "https://b.s3.amazonaws.com/k/_tpc_manifest.json"
    assert manifest_url("s3://b/k/m.json") == "https://b.s3.amazonaws.com/k/m.json"
    assert manifest_url("file:///data/t/m.json") == "file:///data/t/m.json"
    assert _lineage_name("s3a://lake/daily/") == ("s3://lake", "daily")
    assert _lineage_name("s3://lake/daily") == ("s3://lake", "daily")
    assert _lineage_name("/data/daily") == ("file", "/data/daily")
    assert _lineage_name("file:///data/daily") == ("file", "/data/daily")
    # A Delta table by its location; an Iceberg table by its catalog's warehouse (a REST
    # warehouse *name* after the catalog's URI, whose credentials never appear).
    assert _lineage_name("delta+s3://lake/tables/t") == ("s3://lake", "tables/t")
    assert _lineage_name("iceberg://prod/a.b.t", {"type": "sql", "uri": "sqlite:////c.db",
                                                  "warehouse": "s3://wh/root/"}) \
        == ("s3://wh/root", "a.b.t")
    assert _lineage_name("iceberg://prod/a.t", {"type": "rest", "warehouse": "main",
                                                "uri": "https://u:pw@cat.example:8181/api?x=1"}) \
        == ("https://cat.example:8181/api/main", "a.t")


def _docstring_nodes(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                ids.add(id(body[0].value))
    return ids


def test_no_uri_scheme_literals_in_the_airflow_layer():
    """Store differences are asked of the store class (storage_class(uri)); a scheme in a
    string literal outside docstrings is a URI being sniffed."""
    found = []
    for path in sorted((REPO / "airflow_tpc" / "airflow").glob("*.py")):
        tree = ast.parse(path.read_text())
        docs = _docstring_nodes(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                    and id(node) not in docs \
                    and any(s in node.value.lower() for s in ("s3://", "s3a://", "s3:", "gs://")):
                found.append(f"{path.name}:{node.lineno}: {node.value!r}")
    assert not found, found
