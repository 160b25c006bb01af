"""current_transaction: payload by Spark conf or environment, standalone mode, no secrets."""

from __future__ import annotations

import json
import logging

import pytest

from airflow_tpc import DeliveryGuarantee, Sink, TpcError
from airflow_tpc.spark import (
    CONF_KEY,
    ENV_VAR,
    JobTransaction,
    NoTransactionError,
    build_payload,
    current_transaction,
    spark_conf_for,
)


class FakeConf:
    def __init__(self, values):
        self.values = values

    def get(self, key, default=None):
        return self.values.get(key, default)


class FakeSpark:
    """Only ``spark.conf.get`` is used: these tests need no JVM."""

    def __init__(self, values=None):
        self.conf = FakeConf(values or {})


@pytest.fixture()
def sink(tmp_path):
    return Sink(str(tmp_path / "t"), "ns")


def test_without_transaction_the_error_says_how_to_run_standalone():
    with pytest.raises(NoTransactionError) as err:
        current_transaction(FakeSpark())
    assert isinstance(err.value, TpcError)
    msg = str(err.value)
    assert CONF_KEY in msg and ENV_VAR in msg and "standalone_target=" in msg


def test_conf_payload_gives_everything_the_job_needs(sink):
    txn = sink.begin("2026-11-20")
    job = current_transaction(FakeSpark({CONF_KEY: build_payload(txn)}))
    assert (job.target, job.epoch, job.attempt, job.fencing_number) == (
        sink.target, "2026-11-20", txn.attempt, txn.attempt)
    assert job.txn == txn and job.guarantee is DeliveryGuarantee.EXACTLY_ONCE
    assert job.staging_uri == txn.staging_uri == job.output_uri
    assert "/_tpc_staging/" in job.output_uri  # beside the target (PROTOCOL §2)
    assert "/epoch=2026-11-20/attempt=" in job.output_uri


def test_environment_is_the_fallback_and_conf_wins(sink, monkeypatch):
    first, second = sink.begin("1"), sink.begin("2")
    monkeypatch.setenv(ENV_VAR, build_payload(first))
    assert current_transaction(FakeSpark()).txn == first
    assert current_transaction(None).txn == first
    assert current_transaction(FakeSpark({CONF_KEY: build_payload(second)})).txn == second


@pytest.mark.parametrize("guarantee", ["AT_LEAST_ONCE", "NONE"])
def test_non_transactional_modes_write_to_the_epoch_output(sink, guarantee):
    txn = sink.begin("7")
    job = current_transaction(FakeSpark(spark_conf_for(txn, guarantee=guarantee)))
    assert job.guarantee.value == guarantee and not job.transactional
    assert job.output_uri == sink.output_uri("7") == f"{sink.target}/epoch=7"
    assert job.precommit() is None
    assert sink.read_manifest(txn) is None


def test_credentials_never_travel_in_the_payload(sink):
    txn = sink.begin("1")
    opts = {"endpoint_url": "http://127.0.0.1:9", "region_name": "eu-west-1",
            "key": "AKIAXXXX", "secret": "very-secret", "token": "tok"}
    payload = build_payload(txn, storage_options=opts)
    assert "very-secret" not in payload and "AKIAXXXX" not in payload and "tok\"" not in payload
    assert json.loads(payload)["storage"] == {"endpoint_url": "http://127.0.0.1:9",
                                              "region_name": "eu-west-1"}
    forged = json.loads(payload)
    forged["storage"]["secret"] = "very-secret"
    with pytest.raises(TpcError, match="only .*endpoint_url.* may travel"):
        JobTransaction.from_payload(json.dumps(forged))


def test_s3_credentials_come_from_the_environment(monkeypatch, sink):
    txn = sink.begin("1")
    s3txn = type(txn)(**{**txn.to_dict(), "target": "s3://b/t",
                         "staging_uri": "s3://b/t/_tpc/staging/epoch=1/attempt=000001"})
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "env-key")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "env-secret")
    job = JobTransaction.from_payload(build_payload(
        s3txn, storage_options={"endpoint_url": "http://x", "secret": "dropped"}))
    assert job.storage_options() == {"endpoint_url": "http://x", "key": "env-key",
                                     "secret": "env-secret"}
    assert "env-secret" not in repr(job) and "env-secret" not in job.to_json()


def test_bad_payloads_are_clear_errors():
    with pytest.raises(TpcError, match="not valid JSON"):
        JobTransaction.from_payload("{nope")
    with pytest.raises(TpcError, match="not a transaction"):
        JobTransaction.from_payload("{}")
    with pytest.raises(TpcError, match="unknown delivery guarantee"):
        JobTransaction.from_payload({"guarantee": "TWICE"})


def test_standalone_mode_begins_its_own_transaction_and_says_so(tmp_path, caplog):
    target = str(tmp_path / "standalone")
    with caplog.at_level(logging.WARNING, logger="airflow_tpc.spark"):
        job = current_transaction(FakeSpark(), standalone_target=target, epoch="3")
    assert job.standalone and "STANDALONE" in caplog.text and job.txn_id in caplog.text
    sink = Sink(target, job.namespace)
    assert sink.latest_transaction("3") == job.txn
    with pytest.raises(NoTransactionError, match="needs an epoch"):
        current_transaction(FakeSpark(), standalone_target=target)


def test_a_passed_transaction_wins_over_standalone_arguments(sink, tmp_path):
    txn = sink.begin("1")
    job = current_transaction(FakeSpark({CONF_KEY: build_payload(txn)}),
                              standalone_target=str(tmp_path / "other"), epoch="9")
    assert job.txn == txn and not job.standalone
    assert not (tmp_path / "other").exists()


def test_staging_root_elsewhere_is_followed(tmp_path):
    from airflow_tpc import SinkConfig

    sink = Sink(str(tmp_path / "t"), "ns",
                config=SinkConfig(staging_root=str(tmp_path / "stage")))
    txn = sink.begin("1")
    job = JobTransaction.from_payload(build_payload(txn))
    (tmp_path / "stage" / "epoch=1" / "attempt=000001").mkdir(parents=True)
    (tmp_path / "stage" / "epoch=1" / "attempt=000001" / "a.txt").write_text("x")
    manifest = job.precommit()
    assert [f.path for f in manifest.files] == ["a.txt"]


def test_a_fenced_or_decided_attempt_fails_at_job_start(sink):
    from airflow_tpc import FencedError, InvalidState

    old = sink.begin("1")
    sink.begin("1")
    with pytest.raises(FencedError, match="zombie"):
        current_transaction(FakeSpark({CONF_KEY: build_payload(old)}))
    job = current_transaction(FakeSpark({CONF_KEY: build_payload(old)}), check=False)
    assert job.txn == old  # opt-out: the core still refuses at pre-commit
    other = sink.begin("2")
    sink.abort(other, "no")
    with pytest.raises(InvalidState, match="ABORTED"):
        current_transaction(FakeSpark({CONF_KEY: build_payload(other)}))
    forged = {**old.to_dict(), "started_at": 1.0}
    with pytest.raises(InvalidState, match="does not match"):
        current_transaction(FakeSpark({CONF_KEY: json.dumps(forged)}))


def test_the_tpc_reader_refuses_credentials_in_its_options(tmp_path):
    from airflow_tpc.spark.datasource import TpcDataSource

    with pytest.raises(TpcError, match="query plan"):
        TpcDataSource({"target": "s3://b/t", "secret": "x"}).schema()


def test_s3_output_uri_is_spelled_for_spark(sink):
    txn = sink.begin("1")
    s3txn = type(txn)(**{**txn.to_dict(), "target": "s3://b/t",
                         "staging_uri": "s3://b/t/_tpc/staging/epoch=1/attempt=000001"})
    job = JobTransaction.from_payload(build_payload(s3txn))
    assert job.output_uri == "s3a://b/t/_tpc/staging/epoch=1/attempt=000001"
    assert job.staging_uri == s3txn.staging_uri
