"""Job side of the credentials hand-over: a file shipped with ``--files`` (SparkContext.addFile
here, which is what spark-submit does with ``--files``), found by name on the driver and in
executors' Python workers, winning over the environment; only its name ever travels."""

from __future__ import annotations

import json
import os
import uuid

import pytest

from airflow_tpc.core.transaction import Transaction
from airflow_tpc.errors import TpcError
from airflow_tpc.spark.context import JobTransaction, build_payload

FILE_SECRET = "tpc-file-S3cret-0f-the-job-9921"
TXN = Transaction(namespace="n", target="s3://bucket/table", epoch="2026-01-01", attempt=1,
                  staging_uri="s3://bucket/table/_tpc/staging/epoch=2026-01-01/attempt=000001",
                  started_at=1.0, timeout_s=3600.0)


def _shipped(spark, tmp_path, content) -> str:
    name = f"tpc-credentials-{uuid.uuid4().hex}.json"
    path = tmp_path / name
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    path.chmod(0o600)
    spark.sparkContext.addFile(str(path))
    return name


def _secret_on_executor(payload: str) -> list[str]:
    from airflow_tpc.spark.context import JobTransaction

    return [JobTransaction.from_payload(payload).storage_options().get("secret", "")]


def test_credentials_file_reaches_driver_and_executors_and_wins_over_env(spark, tmp_path):
    assert os.environ["AWS_SECRET_ACCESS_KEY"] != FILE_SECRET  # the env holds other keys
    name = _shipped(spark, tmp_path, {"AWS_ACCESS_KEY_ID": "AKIAFILE",
                                      "AWS_SECRET_ACCESS_KEY": FILE_SECRET,
                                      "AWS_SESSION_TOKEN": "tok"})
    payload = build_payload(TXN, storage_options={"endpoint_url": "http://127.0.0.1:9"},
                            credentials_file=name)
    assert FILE_SECRET not in payload and json.loads(payload)["credentials_file"] == name
    job = JobTransaction.from_payload(payload)
    opts = job.storage_options()
    assert (opts["key"], opts["secret"], opts["token"]) == ("AKIAFILE", FILE_SECRET, "tok")
    assert job.fsspec_options()["secret"] == FILE_SECRET
    assert FILE_SECRET not in job.to_json() and FILE_SECRET not in repr(job)
    # executors' Python workers find it too (the tpc data source writes there)
    shipped = job.to_json()
    rdd = spark.sparkContext.parallelize([0, 1], 2)
    got = rdd.mapPartitions(lambda _: _secret_on_executor(shipped)).collect()
    assert got == [FILE_SECRET, FILE_SECRET]


def test_without_a_named_file_the_environment_is_used(spark):
    job = JobTransaction.from_payload(build_payload(TXN))
    assert job.credentials_file is None
    assert job.storage_options()["secret"] == os.environ["AWS_SECRET_ACCESS_KEY"]


def test_a_named_file_that_is_missing_or_broken_is_an_error_not_another_identity(spark,
                                                                                  tmp_path):
    missing = JobTransaction.from_payload(
        build_payload(TXN, credentials_file=f"tpc-credentials-{uuid.uuid4().hex}.json"))
    with pytest.raises(TpcError, match="--files"):
        missing.storage_options()
    broken = _shipped(spark, tmp_path, f"not json {FILE_SECRET}")
    with pytest.raises(TpcError, match="not JSON") as info:
        JobTransaction.from_payload(build_payload(TXN, credentials_file=broken)).storage_options()
    assert FILE_SECRET not in str(info.value)
    partial = _shipped(spark, tmp_path, {"AWS_SECRET_ACCESS_KEY": FILE_SECRET})
    with pytest.raises(TpcError, match="AWS_ACCESS_KEY_ID") as info:
        JobTransaction.from_payload(build_payload(TXN, credentials_file=partial)).storage_options()
    assert FILE_SECRET not in str(info.value)


@pytest.mark.parametrize("name", ["../../etc/passwd", "/tmp/x.json", ".hidden", "a b", 7])
def test_credentials_file_must_be_a_plain_name(name):
    doc = {**TXN.to_dict(), "credentials_file": name}
    with pytest.raises(TpcError, match="plain file name"):
        JobTransaction.from_payload(json.dumps(doc))
