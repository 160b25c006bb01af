"""Shared fixtures: real stores (a temp dir; moto's S3 server on 127.0.0.1)."""

from __future__ import annotations

import logging
import os
import uuid

import pytest

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
# Credentials for moto only; real ones never come near the test suite.
os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing-secret-key")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")


logging.getLogger("werkzeug").setLevel(logging.WARNING)  # moto's per-request access log
# py4j logs "Closing down clientserver connection" from __del__ at interpreter exit,
# after pytest closed the stream: a "Logging error" traceback at the end of every run.
logging.getLogger("py4j").setLevel(logging.WARNING)


#: Modules that take a minute or more, slowest first (per-module durations of a clean CI
#: run, 2 workers, 2 cores): they start first, so the run ends on the many short
#: modules and the two workers finish together.  xdist's own order for ``--dist
#: loadfile`` (``--loadscope-reorder``, its default) is by number of tests, most
#: first: the one-test modules that run real Airflow services for minutes came last,
#: and one worker ran them while the other had nothing left.  Modules not listed keep
#: their collection order, after these.  Re-rank when ``--durations`` says so.
SLOW_MODULES = [
    "tests/airflow/test_production_airflow.py",  # ~330 s: PostgreSQL + Celery services
    "tests/airflow/test_pipeline.py",  # ~230 s: 6 DAG runs with spark-submits
    "tests/airflow/test_kills.py",  # ~200 s: SIGKILL chains through dag.test
    "tests/airflow/test_real_scheduler.py",  # ~195 s: airflow-local.sh services
    "tests/airflow/test_backfill.py",  # ~180 s: scheduler + api-server, 2 Spark runs
    "tests/soak/test_soak.py",
    "tests/airflow/test_secrets.py",
    "tests/bench/test_bench_smoke.py",
    "tests/airflow/test_tables_airflow.py",
    "tests/airflow/test_group_airflow.py",
    "tests/airflow/test_aws_connection.py",
    "tests/airflow/test_s3_and_cluster.py",
    "tests/airflow/test_azure_pipeline.py",  # ~90 s: two DAG runs on Azurite
    "tests/airflow/test_run_page_group.py",
    "tests/airflow/test_run_page.py",
    "tests/airflow/test_rest_catalog.py",
    "tests/airflow/test_metrics.py",
    "tests/tables/test_catalog_race.py",
    "tests/faults/test_protocol_under_faults.py",
    "tests/airflow/test_openlineage.py",
    "tests/airflow/test_ui_admin_provider.py",
    "tests/tables/test_clean_exit.py",
    "tests/core/test_one_committer.py",
    "tests/airflow/test_approval_gate.py",
    "tests/airflow/test_csrf.py",
    "tests/airflow/test_trigger.py",
    "tests/core/test_group_process_kill.py",
]


def pytest_configure(config):
    # Keep the order pytest_collection_modifyitems sets (see SLOW_MODULES); the option
    # exists when pytest-xdist is loaded.
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(config, items):
    """Slow modules first (SLOW_MODULES); a stable sort keeps each module's tests
    together and in their order."""
    rank = {module: n for n, module in enumerate(SLOW_MODULES)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))


@pytest.fixture(scope="session")
def moto_endpoint():
    """A real S3 endpoint: moto's server on 127.0.0.1, a free port, for the whole session."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture()
def s3_options(moto_endpoint):
    return {"endpoint_url": moto_endpoint, "key": "testing", "secret": "testing-secret-key",
            "region_name": "us-east-1"}


@pytest.fixture()
def s3_bucket(s3_options):
    import boto3

    name = f"tpc-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=s3_options["endpoint_url"],
                 aws_access_key_id=s3_options["key"],
                 aws_secret_access_key=s3_options["secret"],
                 region_name="us-east-1").create_bucket(Bucket=name)
    return name


def make_store(kind: str, request, tmp_path):
    """(target_uri, storage_options) for a store kind: "local", "s3" (moto), "seaweed"
    (SeaweedFS: a second real S3, which also enforces ``CopySourceIfMatch``) or "azure"
    (Azurite: Azure Blob Storage, a fresh container)."""
    if kind == "local":
        return str(tmp_path / "target"), None
    if kind == "azure":
        azurite = request.getfixturevalue("azurite")
        return f"{azurite.new_prefix()}/tables/events", azurite.options()
    if kind == "seaweed":
        seaweed = request.getfixturevalue("seaweed")
        return f"{seaweed.new_prefix()}/tables/events", seaweed.s3_options()
    options = request.getfixturevalue("s3_options")
    bucket = request.getfixturevalue("s3_bucket")
    return f"s3://{bucket}/tables/events", options


@pytest.fixture(params=["local", "s3"])
def store(request, tmp_path):
    """(target_uri, storage_options) on each store kind the protocol supports."""
    return make_store(request.param, request, tmp_path)


@pytest.fixture(scope="session")
def seaweed(tmp_path_factory):
    """SeaweedFS (tests/seaweed.py): a second real S3 and a real Iceberg REST catalog on
    127.0.0.1, started once per session."""
    from tests import seaweed as sw

    server = sw.start(tmp_path_factory.mktemp("seaweed"))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def azurite(tmp_path_factory):
    """Azurite (tests/azurite.py): Azure Blob Storage's emulator on 127.0.0.1, started
    once per session."""
    from tests import azurite as az

    server = az.start(tmp_path_factory.mktemp("azurite"))
    yield server
    server.stop()
