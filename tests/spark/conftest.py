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

from tests.azurite import KEY as AZURITE_KEY

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


#: What executors hold of Azure: the key of Azurite's development account (as
#: ``azure_job_env`` gives a job), never its name, which a reader must pass as an option.
EXECUTOR_AZURE_ENV = {"AZURE_STORAGE_ACCOUNT_KEY": AZURITE_KEY}


@pytest.fixture(scope="session")
def spark():
    from pyspark.sql import SparkSession

    # The JVM copies this process's environment when it starts, and every Python worker
    # (executors' tasks, a data source's planning and commit) inherits the JVM's: that is
    # how a local-mode executor gets credentials.  Taken back out of this process at once,
    # so that driver-side tests see no ambient Azure credential.
    saved = {k: os.environ.get(k) for k in EXECUTOR_AZURE_ENV}
    os.environ.update(EXECUTOR_AZURE_ENV)
    try:
        session = (SparkSession.builder.master("local[2,2]").appName("airflow-tpc-tests")
                   .config("spark.ui.enabled", "false")
                   .config("spark.ui.showConsoleProgress", "false")
                   .config("spark.sql.shuffle.partitions", "4")
                   .config("spark.driver.memory", "2g")
                   .config("spark.sql.execution.arrow.pyspark.enabled", "true")
                   .getOrCreate())
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
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
