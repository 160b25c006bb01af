"""Provider metadata, the UI plugin (auth required; abort from the page) and the admin DAG."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_tpc import Sink, TxnState

REPO = Path(__file__).resolve().parents[2]
#: What the plugin page's Abort button sends besides its JSON body (CSRF defence).
JSON_ABORT = {"X-Airflow-TPC": "1"}
pytestmark = pytest.mark.timeout(900)


def test_provider_info_and_providers_list(airflow_db):
    from airflow_tpc.provider_info import get_provider_info

    info = get_provider_info()
    assert info["package-name"] == "airflow-tpc"
    import importlib

    import airflow_tpc.airflow as layer

    for kind in ("operators", "sensors", "triggers", "hooks"):
        for module in info[kind][0]["python-modules"]:
            importlib.import_module(module)  # every module the provider names imports
    for name in layer.__all__:
        assert getattr(layer, name) is not None, name
    out = subprocess.run([sys.executable, "-m", "airflow", "providers", "list", "-o", "json"],
                         capture_output=True, text=True, check=True, env=os.environ.copy())
    names = {p["package_name"] for p in json.loads(out.stdout)}
    assert "airflow-tpc" in names
    plugins = subprocess.run([sys.executable, "-m", "airflow", "plugins", "-o", "json"],
                             capture_output=True, text=True, check=True, env=os.environ.copy())
    assert "airflow_tpc" in plugins.stdout


@pytest.fixture()
def run_with_txn(dagbag, tmp_path):
    """A DAG run whose submit task began (and pre-committed) a transaction."""
    from airflow import settings
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import sync_bag_to_db
    from airflow.models.dagrun import get_or_create_dagrun
    from airflow.models.xcom import XComModel
    from airflow.serialization.serialized_objects import DagSerialization
    from airflow.utils.types import DagRunTriggeredByType

    from .helpers import day

    dag_id, run_id = "tpc_it_gate", "ui-test-run"
    target = str(tmp_path / "ui_target")
    DagBundlesManager().sync_bundles_to_db()
    sync_bag_to_db(dagbag, "dags-folder", None)
    sdag = DagSerialization.deserialize_dag(DagSerialization.serialize_dag(
        dagbag.get_dag(dag_id)))
    with settings.Session() as session:
        get_or_create_dagrun(dag=sdag, run_id=run_id, logical_date=day("2026-06-01"),
                             data_interval=(day("2026-06-01"), day("2026-06-01")),
                             run_after=day("2026-06-01"), conf=None,
                             triggered_by=DagRunTriggeredByType.TEST,
                             triggering_user_name="test", start_date=day("2026-06-01"),
                             session=session)
        session.commit()
    sink = Sink(target, "tpc_ui")
    txn = sink.begin("2026-06-01", owner={"dag_id": dag_id, "run_id": run_id})
    staging = Path(txn.staging_uri.removeprefix("file://"))
    staging.mkdir(parents=True)
    (staging / "part-0.parquet").write_bytes(b"x" * 64)
    sink.precommit(txn)
    with settings.Session() as session:
        XComModel.set(key="tpc_txn", value={**txn.to_dict(), "storage_conn_id": None,
                                            "storage_options": {}},
                      dag_id=dag_id, task_id="events.submit", run_id=run_id, session=session)
        session.commit()
    return dag_id, run_id, sink


@pytest.fixture()
def api_client(airflow_db, monkeypatch):
    monkeypatch.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS", "admin:admin,viewer:viewer")
    from airflow.api_fastapi.app import create_app
    from fastapi.testclient import TestClient

    return TestClient(create_app())


def _token(role: str) -> str:
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    return get_auth_manager().generate_jwt(SimpleAuthManagerUser(username=role, role=role))


def test_plugin_requires_auth_and_aborts(api_client, run_with_txn):
    dag_id, run_id, sink = run_with_txn
    q = {"dag_id": dag_id, "run_id": run_id}
    # Unauthenticated: refused, on every route.
    assert api_client.get("/airflow-tpc/api/transactions", params=q).status_code == 401
    assert api_client.get("/airflow-tpc/", params=q).status_code == 401
    body = {"epoch": "2026-06-01", "attempt": 1, "task_id": "events.submit"}
    r = api_client.post("/airflow-tpc/api/abort", params=q, json=body, headers=JSON_ABORT)
    assert r.status_code == 401
    assert api_client.get("/airflow-tpc/api/transactions", params=q,
                          headers={"Authorization": "Bearer forged"}).status_code in (401, 403)
    assert sink.describe("2026-06-01")[0].state is TxnState.PRECOMMITTED

    admin = {"Authorization": f"Bearer {_token('admin')}"}
    r = api_client.get("/airflow-tpc/api/transactions", params=q, headers=admin)
    assert r.status_code == 200, r.text
    [t] = r.json()["transactions"]
    assert t["txn_id"] == "tpc_ui/2026-06-01/1" and t["state"] == "PRECOMMITTED"
    page = api_client.get("/airflow-tpc/", params=q, headers=admin)
    assert page.status_code == 200 and "PRECOMMITTED" in page.text and "Abort" in page.text

    # A viewer may look but not abort.
    viewer = {"Authorization": f"Bearer {_token('viewer')}"}
    assert api_client.get("/airflow-tpc/api/transactions", params=q,
                          headers=viewer).status_code == 200
    r = api_client.post("/airflow-tpc/api/abort", params=q, headers={**viewer, **JSON_ABORT},
                        json=body)
    assert r.status_code == 403
    assert sink.describe("2026-06-01")[0].state is TxnState.PRECOMMITTED

    # Abort as the page does it: a JSON body with the custom header (see test_csrf.py).
    r = api_client.post("/airflow-tpc/api/abort", params=q, headers={**admin, **JSON_ABORT},
                        json=body)
    assert r.status_code == 200, r.text
    assert r.json()["aborted"] == ["tpc_ui/2026-06-01/1"]
    [info] = sink.describe("2026-06-01")
    assert info.state is TxnState.ABORTED and info.staging_files == 0
    assert "admin" in info.reason


def test_admin_dag_status_and_abort(airflow_db, tmp_path):
    target = str(tmp_path / "admin_target")
    sink = Sink(target, "tpc_admin_test")
    txn = sink.begin("2026-07-01")
    staging = Path(txn.staging_uri.removeprefix("file://"))
    staging.mkdir(parents=True)
    (staging / "part-0.parquet").write_bytes(b"y" * 10)
    script = (
        "import json, sys\n"
        "from airflow.dag_processing.dagbag import DagBag\n"
        f"dag = DagBag(dag_folder={str(REPO / 'dags')!r}).get_dag('tpc_admin')\n"
        "conf = json.loads(sys.argv[1])\n"
        "dr = dag.test(run_conf=conf)\n"
        "ti = [t for t in dr.get_task_instances() if t.task_id == 'act'][0]\n"
        "print('STATE', dr.state)\n"
        "if conf['action'] == 'status':\n"
        "    from airflow.models.xcom import XComModel\n"
        "    from airflow.utils.session import create_session\n"
        "    with create_session() as s:\n"
        "        v = s.query(XComModel.value).filter_by(dag_id='tpc_admin', run_id=dr.run_id,"
        " task_id='act', key='return_value').scalar()\n"
        "    print('RESULT', v if isinstance(v, str) else json.dumps(v))\n")
    env = {**os.environ, "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags")}
    conf = {"target": target, "namespace": "tpc_admin_test", "epoch": "2026-07-01",
            "action": "abort", "attempt": 0}
    out = subprocess.run([sys.executable, "-c", script, json.dumps(conf)], env=env,
                         capture_output=True, text=True, timeout=240)
    assert "STATE success" in out.stdout, out.stderr[-3000:]
    [info] = sink.describe("2026-07-01")
    assert info.state is TxnState.ABORTED and info.staging_files == 0

    # status of the whole target: the listing, and the health gauges' figures.
    sink.begin("2026-07-02")
    conf = {"target": target, "namespace": "tpc_admin_test", "epoch": "", "action": "status"}
    out = subprocess.run([sys.executable, "-c", script, json.dumps(conf)], env=env,
                         capture_output=True, text=True, timeout=240)
    assert "STATE success" in out.stdout, out.stderr[-3000:]
    [line] = [x for x in out.stdout.splitlines() if x.startswith("RESULT ")]
    result = json.loads(line.removeprefix("RESULT "))
    result = json.loads(result) if isinstance(result, str) else result
    assert {t["state"] for t in result["transactions"]} == {"ABORTED", "OPEN"}
    health = result["health"]
    assert (health["open"], health["precommitted"], health["unfinished"]) == (1, 0, 0)
    assert health["oldest_undecided_age_s"] > 0


def test_approval_gate_abort_choice_aborts(dagbag, api_client, data_root):
    """The optional HITL gate: a person answers "Abort" through Airflow's HITL REST API
    (what the Required Actions UI calls); the pre-committed attempt is thrown away."""
    import threading
    import time

    from airflow import settings
    from airflow.models.taskinstance import TaskInstance
    from sqlalchemy import select

    from .helpers import day, states

    admin = {"Authorization": f"Bearer {_token('admin')}"}
    answered: list[int] = []

    def answer() -> None:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and not answered:
            with settings.Session() as session:
                ti = session.scalar(select(TaskInstance).where(
                    TaskInstance.dag_id == "tpc_it_gate", TaskInstance.task_id == "events.approve",
                    TaskInstance.state == "awaiting_input"))
                run_id = ti.run_id if ti is not None else None
            if run_id:
                r = api_client.patch(
                    f"/api/v2/dags/tpc_it_gate/dagRuns/{run_id}/taskInstances/events.approve/-1"
                    "/hitlDetails", json={"chosen_options": ["Abort"]}, headers=admin)
                answered.append(r.status_code)
                return
            time.sleep(0.5)

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    dr = dagbag.get_dag("tpc_it_gate").test(logical_date=day("2026-06-10"),
                                            run_conf={"rows": 300})
    thread.join(5)
    assert answered == [200], answered
    st = states(dr)
    # A rejection aborts, then fails the run (see test_approval_gate.py).
    assert str(getattr(dr.state, "value", dr.state)) == "failed", st
    assert st["approve"] == "success" and st["abort_rejected"] == "failed", st
    assert st["commit"] == "skipped" and st["committed"] == "upstream_failed", st
    assert st["abort"] == "skipped", st
    sink = Sink(os.path.join(data_root, "gate_target"), "tpc_it_gate")
    [info] = sink.describe("2026-06-10")
    assert info.state is TxnState.ABORTED and info.staging_files == 0
    assert "rejected" in info.reason
    assert sink.committed_files() == {}


def test_a_second_installed_copy_of_the_plugin_is_named_when_it_loads(tmp_path):
    """Two copies of the package on ``sys.path`` (an install plus a source folder with its
    ``*.egg-info``) make Airflow's task-side loader skip the plugins after the second
    (OpenLineage's listener among them, docs/airflow.md): the plugin says so, naming
    both places, when Airflow loads it; one copy loads silently."""
    other = tmp_path / "other"
    info = other / "airflow_tpc-0.0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: airflow-tpc\nVersion: 0.0.1\n")
    (info / "entry_points.txt").write_text(
        "[airflow.plugins]\nairflow_tpc = airflow_tpc.airflow.ui.plugin:AirflowTpcPlugin\n")
    code = ("import logging, sys\n"
            "from airflow_tpc.airflow.ui.plugin import AirflowTpcPlugin\n"
            "logging.getLogger('airflow_tpc').addHandler(logging.StreamHandler(sys.stdout))\n"
            "AirflowTpcPlugin.on_load()\n")

    def load(extra: str | None) -> str:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        if extra:
            env["PYTHONPATH"] = extra
        done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert "installed" not in load(None)
    said = load(str(other))
    assert "airflow-tpc's Airflow plugin is installed 2 times" in said, said
    assert str(other) in said and "OpenLineage" in said
