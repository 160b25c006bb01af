"""OpenLineage of aborts and failed commits, as Airflow's own listener emits them for the
protocol's tasks and as the UI plugin emits them for its aborts (the provider's file
transport: tests/airflow/conftest.py; DAGs: tests/airflow/dags/tpc_it_lineage.py).

Every abort names the dataset it concerns: the abort task always (also when the job's
own task had already aborted its attempt), with every attempt it aborted; a refused
commit's FAIL event names its target; an abort from the run page or the API (no task,
so no listener) sends an ABORT event naming the target and the attempt.
"""

from __future__ import annotations

import pytest

from airflow_tpc import Group, Sink, TxnState
from airflow_tpc.tables import open_sink

from .dags.tpc_it_lineage import NAMESPACE, TARGETS
from .helpers import states
from .test_openlineage import PROPS, _events, _expected_identity, _validate_facet

pytestmark = pytest.mark.timeout(900)

FOLDER = TARGETS["folder"][0]


def _abort_outputs(dag_id: str, epoch: str, event_type: str = "COMPLETE") -> list[dict]:
    """The outputs of the abort task's ``event_type`` event of the run of ``epoch``."""
    found = [e for e in _events(dag_id, "abort") if e["eventType"] == event_type
             and e["run"]["facets"]["airflow"]["dagRun"]["conf"].get("epoch") == epoch]
    [event] = found
    return event["outputs"]


def test_an_abort_names_every_attempt_it_aborted(dagbag):
    """Two attempts of the run (an earlier try's, left open, and the last): both aborted,
    both named; the facet's attempt is the highest."""
    dag_id, epoch = "tpc_it_lineage_folder", "2026-09-05"
    dr = dagbag.get_dag(dag_id).test(run_conf={"epoch": epoch, "fail": True, "earlier": 1})
    assert states(dr)["abort"] == "success", states(dr)
    infos = Sink(FOLDER, NAMESPACE).describe(epoch)
    assert [(i.attempt, i.state) for i in infos] == [(1, TxnState.ABORTED),
                                                     (2, TxnState.ABORTED)]
    [out] = _abort_outputs(dag_id, epoch)
    assert (out["namespace"], out["name"]) == _expected_identity("folder")
    tpc = out["facets"]["airflowTpc"]
    _validate_facet(tpc)
    assert (tpc["attempt"], tpc["txnId"], tpc["outcome"]) == (2, infos[1].txn_id, "aborted")
    assert tpc["abortedAttempts"] == [{"attempt": i.attempt, "txnId": i.txn_id}
                                      for i in infos]


def test_an_abort_with_nothing_left_to_abort_still_names_the_dataset(dagbag):
    """The job's task aborted its own attempt (as StagedSparkSubmitOperator does when the
    job fails): the abort task aborts nothing, and its event still names the target."""
    dag_id, epoch = "tpc_it_lineage_folder", "2026-09-06"
    dr = dagbag.get_dag(dag_id).test(run_conf={"epoch": epoch, "fail": True,
                                               "self_abort": True})
    assert states(dr)["abort"] == "success", states(dr)
    [info] = Sink(FOLDER, NAMESPACE).describe(epoch)
    assert info.state is TxnState.ABORTED
    [out] = _abort_outputs(dag_id, epoch)
    assert (out["namespace"], out["name"]) == _expected_identity("folder")
    assert "airflowTpc" not in out["facets"]  # this abort aborted nothing


def test_a_refused_commit_fails_naming_its_target_and_the_abort_names_the_attempt(dagbag):
    dag_id, epoch = "tpc_it_lineage_tamper", "2026-09-07"
    dr = dagbag.get_dag(dag_id).test(run_conf={"epoch": epoch})
    assert (states(dr)["commit"], states(dr)["abort"]) == ("failed", "success"), states(dr)
    target = TARGETS["tamper"][0]
    [fail] = [e for e in _events(dag_id, "commit") if e["eventType"] == "FAIL"]
    assert [(o["namespace"], o["name"]) for o in fail["outputs"]] == [("file", target)]
    [info] = Sink(target, NAMESPACE).describe(epoch)
    assert info.state is TxnState.ABORTED
    [out] = _abort_outputs(dag_id, epoch)
    assert (out["namespace"], out["name"]) == ("file", target)
    assert out["facets"]["airflowTpc"]["txnId"] == info.txn_id
    assert out["facets"]["airflowTpc"]["abortedAttempts"] == [
        {"attempt": 1, "txnId": info.txn_id}]


def _ui_events(dag_id: str, task_id: str) -> list[dict]:
    return [e for e in _events(dag_id, task_id) if e["eventType"] == "ABORT"]


def test_an_abort_from_the_run_page_or_api_emits_an_abort_event(dagbag):
    """What the run page's Abort and ``POST /airflow-tpc/api/abort`` call (ui.runs.abort),
    on a real pending attempt: one ABORT event naming the target and the attempt."""
    from airflow_tpc.airflow.ui import runs

    dag_id, epoch = "tpc_it_lineage_folder", "2026-09-08"
    sink = Sink(FOLDER, NAMESPACE)
    txn = sink.begin(epoch, owner={"dag_id": dag_id, "run_id": "ui_run"})
    [info] = sink.describe(epoch)
    result = runs.abort(runs.Found(dag_id, "ui_run", "ui_submit", sink, info), "admin", "api")
    assert result["outcome"] == "aborted"
    [event] = _ui_events(dag_id, "ui_submit")
    [out] = event["outputs"]
    assert (out["namespace"], out["name"]) == _expected_identity("folder")
    tpc = out["facets"]["airflowTpc"]
    _validate_facet(tpc)
    assert (tpc["epoch"], tpc["attempt"], tpc["txnId"], tpc["outcome"]) == \
        (epoch, 1, txn.txn_id, "aborted")
    # Already aborted: nothing decided, no second event.
    assert runs.abort(runs.Found(dag_id, "ui_run", "ui_submit", sink,
                                 sink.describe(epoch)[0]), "admin", "api")["outcome"] \
        == "already aborted"
    assert len(_ui_events(dag_id, "ui_submit")) == 1


def test_a_group_abort_from_the_run_page_names_every_member(dagbag, tmp_path):
    """ui.groups.abort (the run page's Abort group, ``/api/abort-group``): one ABORT event,
    an output per member with that member's aborted attempt."""
    from airflow_tpc.airflow.ui import groups

    dag_id, epoch = "tpc_it_lineage_group", "2026-09-09"
    folder = str(tmp_path / "ui_group_folder")
    sinks = {"folder": Sink(folder, NAMESPACE),
             "table": open_sink("iceberg://lineage/ol.ui_group_events", NAMESPACE,
                                catalog_properties=PROPS)}
    group = Group(sinks, str(tmp_path / "ui_group"))
    gtxn = group.begin(epoch, owner={"dag_id": dag_id, "run_id": "ui_run"})
    result = groups.abort(groups.FoundGroup(dag_id, "ui_run", "ui_group_submit", group, gtxn),
                          "admin", "api")
    assert result["outcome"] == "aborted"
    [event] = _ui_events(dag_id, "ui_group_submit")
    outs = {o["name"]: o for o in event["outputs"]}
    assert sorted((o["namespace"], n) for n, o in outs.items()) == sorted(
        [("file", folder), (PROPS["warehouse"], "ol.ui_group_events")])
    for name, member in (("folder", folder), ("table", "ol.ui_group_events")):
        tpc = outs[member]["facets"]["airflowTpc"]
        _validate_facet(tpc)
        assert (tpc["txnId"], tpc["outcome"]) == (gtxn.member(name).txn_id, "aborted")
