"""Airflow integration fixtures: one temp AIRFLOW_HOME + SQLite DB migrated once per session.

The environment is set at import time, before anything imports airflow, because
Airflow reads its configuration once, on first import.
"""

from __future__ import annotations

import json
import os
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
})
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
