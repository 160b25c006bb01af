"""Airflow integration fixtures: one temp AIRFLOW_HOME + SQLite DB migrated once per session.

The environment is set at import time, before anything imports airflow, because
Airflow reads its configuration once, on first import.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
_HOME = tempfile.mkdtemp(prefix="tpc-airflow-home-")
ROOT = os.path.join(_HOME, "data")
os.makedirs(ROOT, exist_ok=True)

os.environ.update({
    "AIRFLOW_HOME": _HOME,
    "AIRFLOW__CORE__DAGS_FOLDER": str(HERE / "dags"),
    "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
    "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
    "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{_HOME}/airflow.db",
    "AIRFLOW_CONN_SPARK_LOCAL": json.dumps({"conn_type": "spark", "host": "local[2]"}),
    "TPC_IT_ROOT": ROOT,
    "SPARK_LOCAL_IP": "127.0.0.1",
    "PYSPARK_PYTHON": sys.executable,
    "PYSPARK_DRIVER_PYTHON": sys.executable,
    # The real OpenLineage listener, writing every event to one file, for the lineage
    # DAGs only (tests/airflow/dags/tpc_it_lineage.py; every other DAG emits nothing);
    # 60 s for its forked emitter on a busy machine (default 10 s).
    "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps({
        "type": "file", "log_file_path": os.path.join(_HOME, "openlineage.jsonl"),
        "append": True}),
    "AIRFLOW__OPENLINEAGE__EMISSION_POLICY": json.dumps([
        {"scope": {}, "controls": {"emit": False}},
        {"scope": {"dag_id": "tpc_it_lineage_.*"}, "match_mode": "regex",
         "controls": {"emit": True}}]),
    "AIRFLOW__OPENLINEAGE__EXECUTION_TIMEOUT": "60",
})
#: Where the OpenLineage listener writes its events (one JSON document per line).
OPENLINEAGE_EVENTS = os.path.join(_HOME, "openlineage.jsonl")
# Room for a busy machine (the suite runs on 2 shared cores): Airflow's
# infrastructure timeouts at their defaults turn a slow run into a failed one
# before any task code runs.  A slow machine must give a slow pass.  setdefault:
# an explicit setting in the environment wins.
for _key, _value in {
    # The task supervisor's Execution API client (every task's start, heartbeat,
    # XCom and state call): per-request timeout (default 5 s), then retries with
    # random exponential back-off (default 5 attempts, about 31 s in all).  Timeouts,
    # dropped connections and 5xx answers are retried; the long timeout matters more,
    # since retrying a request the server did process (e.g. "start") gets a 409.
    "AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": "300",
    "AIRFLOW__WORKERS__EXECUTION_API_RETRIES": "10",
    "AIRFLOW__WORKERS__EXECUTION_API_RETRY_WAIT_MIN": "1",
    "AIRFLOW__WORKERS__EXECUTION_API_RETRY_WAIT_MAX": "30",
    # The supervisor kills its task after this many heartbeats failed in a row (default 3).
    "AIRFLOW__WORKERS__MAX_FAILED_HEARTBEATS": "20",
    # The scheduler fails a running task whose heartbeat is older than this (default
    # 300 s), and a task queued longer than this (default 600 s; it is also the
    # lifetime of the queued workload's token).
    "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "1800",
    "AIRFLOW__SCHEDULER__TASK_QUEUED_TIMEOUT": "1800",
    # A scheduler whose own heartbeat is older than this is "unhealthy" (default 30 s).
    "AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_THRESHOLD": "600",
    # Task tokens (refreshed on use; default 600 s).
    "AIRFLOW__EXECUTION_API__JWT_EXPIRATION_TIME": "3600",
}.items():
    os.environ.setdefault(_key, _value)
# spark-submit must be the venv's (it is on PATH when the venv is active; make sure).
os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"


@pytest.fixture(scope="session")
def airflow_db() -> str:
    """Migrate the metadata DB once for the whole session (~6 s on SQLite)."""
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], check=True,
                   capture_output=True, env=os.environ.copy())
    print(f"[airflow db migrate: {time.monotonic() - t0:.1f} s]")
    return _HOME


@pytest.fixture(scope="session")
def dagbag(airflow_db):
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(HERE / "dags"))
    assert not bag.import_errors, bag.import_errors
    return bag


@pytest.fixture(scope="session")
def data_root() -> str:
    return ROOT


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory):
    """A standalone master + one worker on 127.0.0.1, via pyspark's bin/spark-class; once per
    session (test_s3_and_cluster.py and test_orphan_app.py share it). Yields the master URL,
    the log folder and the master web UI's URL."""
    import pyspark

    spark_class = Path(pyspark.__file__).parent / "bin" / "spark-class"
    port, ui, wui = _free_port(), _free_port(), _free_port()
    logs = tmp_path_factory.mktemp("spark-cluster")
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_WORKER_DIR": str(logs / "work"),
           "PYSPARK_PYTHON": sys.executable,
           "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false"}
    procs = [subprocess.Popen(
        [str(spark_class), "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
         "--port", str(port), "--webui-port", str(ui)], env=env,
        stdout=open(logs / "master.log", "w"), stderr=subprocess.STDOUT)]  # noqa: SIM115
    master = f"spark://127.0.0.1:{port}"
    procs.append(subprocess.Popen(
        [str(spark_class), "org.apache.spark.deploy.worker.Worker", master, "--host",
         "127.0.0.1", "--cores", "2", "--memory", "1g", "--webui-port", str(wui)], env=env,
        stdout=open(logs / "worker.log", "w"), stderr=subprocess.STDOUT))  # noqa: SIM115
    deadline = time.monotonic() + 600  # a busy 2-core machine: slow, not failed
    while time.monotonic() < deadline:
        if "Successfully registered with master" in (logs / "worker.log").read_text():
            break
        time.sleep(0.5)
    else:
        for p in procs:
            p.terminate()
        pytest.fail("spark worker did not register: " + (logs / "worker.log").read_text()[-2000:])
    os.environ["AIRFLOW_CONN_SPARK_CLUSTER"] = json.dumps(
        {"conn_type": "spark", "host": master, "extra": {"deploy-mode": "client"}})
    yield master, logs, f"http://127.0.0.1:{ui}"
    for p in reversed(procs):
        p.terminate()
    for p in procs:
        try:
            p.wait(20)
        except subprocess.TimeoutExpired:
            p.kill()
