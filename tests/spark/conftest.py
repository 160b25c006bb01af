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
# Credentials for moto only.  Set before the JVM starts: executors and the Python
# worker that runs a data source's commit() inherit them (they never go in conf).
os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing-secret-key")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")


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


# S3 fixtures of our own (same names as the suite-wide ones, so these tests do not
# depend on another directory's conftest): moto's real HTTP server on 127.0.0.1.
@pytest.fixture(scope="session")
def moto_endpoint():
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture()
def s3_options(moto_endpoint):
    """What the operator side holds; only endpoint/region may reach the job."""
    return {"endpoint_url": moto_endpoint, "key": os.environ["AWS_ACCESS_KEY_ID"],
            "secret": os.environ["AWS_SECRET_ACCESS_KEY"], "region_name": "us-east-1"}


@pytest.fixture()
def s3_bucket(s3_options):
    import uuid

    import boto3

    name = f"tpc-spark-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=s3_options["endpoint_url"],
                 aws_access_key_id=s3_options["key"],
                 aws_secret_access_key=s3_options["secret"],
                 region_name="us-east-1").create_bucket(Bucket=name)
    return name
