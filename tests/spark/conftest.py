"""One real local Spark session for all Spark tests (JVM start dominates their cost).

``local[2,2]``: two cores, and every task may fail once and be retried — the
tests rely on that retry.  Python workers get the repository on their path so
test-only data sources (``tests.spark.faulty``) unpickle there too.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
os.environ["PYTHONPATH"] = os.pathsep.join(
    [str(REPO), *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]])


@pytest.fixture(scope="session")
def spark():
    from pyspark.sql import SparkSession

    session = (SparkSession.builder.master("local[2,2]").appName("airflow-tpc-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "4")
               .config("spark.driver.memory", "2g")
               .config("spark.sql.execution.arrow.pyspark.enabled", "true")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(autouse=True)
def _no_ambient_transaction(monkeypatch, request):
    """A test never inherits a transaction from the environment or an earlier test."""
    monkeypatch.delenv("AIRFLOW_TPC_TXN", raising=False)
    if "spark" in request.fixturenames:
        session = request.getfixturevalue("spark")
        session.conf.unset("spark.airflow_tpc.txn")
    yield
