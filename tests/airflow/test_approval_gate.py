"""The approval gate answered through Airflow's real HITL REST API (what the UI's Required
Actions page calls), on ``tpc_it_gate_nospark``: the group's own wiring around a plain-Python
job, run with ``dag.test()`` (the gate defers; its trigger runs in-process)."""

from __future__ import annotations

import threading
import time

import pytest

from airflow_tpc import Sink, TxnState

from .helpers import asset_events, states

pytestmark = pytest.mark.timeout(900)
DAG_ID = "tpc_it_gate_nospark"


@pytest.fixture()
def api_client(airflow_db, monkeypatch):
    monkeypatch.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS", "admin:admin")
    from airflow.api_fastapi.app import create_app
    from fastapi.testclient import TestClient

    return TestClient(create_app())


def _admin() -> dict[str, str]:
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    token = get_auth_manager().generate_jwt(SimpleAuthManagerUser(username="admin", role="admin"))
    return {"Authorization": f"Bearer {token}"}


def _run_answering(dagbag, api_client, epoch: str, choice: str, dag_id: str = DAG_ID):
    """dag.test() of one epoch; a thread answers the gate with ``choice`` once it waits."""
    from airflow import settings
    from airflow.models.taskinstance import TaskInstance
    from sqlalchemy import select

    headers = _admin()
    answered: list[int] = []

    def answer() -> None:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and not answered:
            with settings.Session() as session:
                ti = session.scalar(select(TaskInstance).where(
                    TaskInstance.dag_id == dag_id, TaskInstance.task_id == "approve",
                    TaskInstance.state == "awaiting_input"))
                run_id = ti.run_id if ti is not None else None
            if run_id:
                r = api_client.patch(
                    f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/approve/-1"
                    "/hitlDetails", json={"chosen_options": [choice]}, headers=headers)
                answered.append(r.status_code)
                return
            time.sleep(0.5)

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    dr = dagbag.get_dag(dag_id).test(run_conf={"epoch": epoch})
    thread.join(5)
    assert answered == [200], answered
    return dr


def _sink() -> Sink:
    from .dags.tpc_it_gate_nospark import NAMESPACE, TARGET

    return Sink(TARGET, NAMESPACE)


def test_rejection_aborts_once_and_fails_the_run(dagbag, api_client):
    dr = _run_answering(dagbag, api_client, "2026-08-01", "Abort")
    st = states(dr)
    # The rejection is the run's outcome: it ends failed, not green.
    assert str(getattr(dr.state, "value", dr.state)) == "failed", st
    assert st["approve"] == "success" and st["commit"] == "skipped", st
    # abort_rejected aborted the attempt and then failed; the failure-path abort did not
    # run a second time; the leaf says "not committed".
    assert st["abort_rejected"] == "failed" and st["abort"] == "skipped", st
    assert st["committed"] == "upstream_failed", st
    sink = _sink()
    [info] = sink.describe("2026-08-01")
    assert info.state is TxnState.ABORTED and info.staging_files == 0
    assert info.reason == "rejected at the approval gate"
    assert sink.committed_files() == {}
    from .helpers import tries

    assert tries(dr, "abort_rejected") == 1  # AirflowFailException: no retry


def test_approval_commits_and_the_run_succeeds(dagbag, api_client):
    from airflow_tpc.airflow.operators.tpc import target_asset

    before = len(asset_events(target_asset(_sink().target).uri))
    dr = _run_answering(dagbag, api_client, "2026-08-02", "Commit")
    st = states(dr)
    assert str(getattr(dr.state, "value", dr.state)) == "success", st
    assert st["commit"] == "success" and st["committed"] == "success", st
    assert st["abort_rejected"] == "skipped" and st["abort"] == "skipped", st
    sink = _sink()
    [info] = sink.describe("2026-08-02")
    assert info.state is TxnState.COMMITTED
    assert list(sink.committed_files()) == ["2026-08-02"]
    assert len(asset_events(target_asset(sink.target).uri)) == before + 1


GROUP_DAG = "tpc_it_group_gate_nospark"


def test_a_group_rejected_at_the_gate_is_aborted_on_every_member(dagbag, api_client):
    from .dags.tpc_it_group_gate_nospark import open_group

    dr = _run_answering(dagbag, api_client, "2026-08-01", "Abort", GROUP_DAG)
    st = states(dr)
    assert str(getattr(dr.state, "value", dr.state)) == "failed", st
    assert st["commit"] == "skipped" and st["abort_rejected"] == "failed", st
    assert st["abort"] == "skipped" and st["committed"] == "upstream_failed", st
    group = open_group()
    for name, sink in group.sinks.items():
        [info] = sink.describe("2026-08-01")
        assert info.state is TxnState.ABORTED and info.staging_files == 0, name
        assert info.reason == "group: rejected at the approval gate", name
    assert group.stable_epochs() == {}


def test_a_group_approved_at_the_gate_commits_every_member_once(dagbag, api_client):
    from airflow_tpc.airflow.operators.tpc import target_asset

    from .dags.tpc_it_group_gate_nospark import TARGETS, open_group

    before = {n: len(asset_events(target_asset(t).uri)) for n, t in TARGETS.items()}
    dr = _run_answering(dagbag, api_client, "2026-08-02", "Commit", GROUP_DAG)
    st = states(dr)
    assert str(getattr(dr.state, "value", dr.state)) == "success", st
    assert st["commit"] == "success" and st["abort_rejected"] == "skipped", st
    group = open_group()
    assert group.stable_epochs() == {"2026-08-02": 1}
    for name, t in TARGETS.items():
        assert len(asset_events(target_asset(t).uri)) == before[name] + 1, name
