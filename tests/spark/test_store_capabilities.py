"""The job side asks the store class (``storage_class``) what it can do, never the URI.

Why these tests exist: the Spark modules used to decide "S3 or not" by URI prefix in
five places.  Now ``takes_credentials``, ``spark_native`` and ``spark_uri`` decide.
The tests below check the answers for the two real stores, and then swap in a store
class that answers differently for a *local* target: if the job side still sniffed
the URI, the swapped answers would change nothing.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_tpc import Sink, UnsupportedStorage
from airflow_tpc.spark import JobTransaction, build_payload, read_committed
from airflow_tpc.spark import committed as committed_mod
from airflow_tpc.spark import context as context_mod
from airflow_tpc.spark import readers as readers_mod
from airflow_tpc.storage import LocalStorage, S3Storage

from .helpers import rows_of


def _s3_job(sink: Sink) -> JobTransaction:
    txn = sink.begin("1")
    s3txn = type(txn)(**{**txn.to_dict(), "target": "s3a://b/t",
                         "staging_uri": "s3://b/t/_tpc/staging/epoch=1/attempt=000001"})
    return JobTransaction.from_payload(build_payload(
        s3txn, storage_options={"endpoint_url": "http://127.0.0.1:9"}))


def test_a_local_target_gets_no_credentials_and_keeps_its_spelling(tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "env-key")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "env-secret")
    sink = Sink(str(tmp_path / "t"), "ns")
    job = JobTransaction.from_payload(build_payload(sink.begin("1")))
    assert job.storage_options() == {} and job.fsspec_options() == {}
    assert job.output_uri == job.staging_uri


def test_an_s3a_target_is_s3_for_credentials_caches_and_spelling(tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "env-key")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "env-secret")
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    job = _s3_job(Sink(str(tmp_path / "t"), "ns"))
    assert job.storage_options() == {"endpoint_url": "http://127.0.0.1:9", "key": "env-key",
                                     "secret": "env-secret"}
    assert job.fsspec_options() == {"endpoint_url": "http://127.0.0.1:9", "key": "env-key",
                                    "secret": "env-secret", "use_listings_cache": False,
                                    "skip_instance_cache": True}
    assert job.output_uri == "s3a://b/t/_tpc/staging/epoch=1/attempt=000001"


class _RemoteLikeLocal(LocalStorage):
    """A local disk that claims what S3 claims: credentials, no native Spark, ``x+`` URIs."""

    takes_credentials = True
    spark_native = False
    credential_env = S3Storage.credential_env  # the job's credentials from AWS_*, as S3's

    @classmethod
    def spark_uri(cls, uri: str) -> str:
        return "x+" + uri


def _ask(answer: type) -> object:
    return lambda uri: answer


def test_the_job_transaction_follows_the_store_class_not_the_uri(tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "env-key")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "env-secret")
    sink = Sink(str(tmp_path / "t"), "ns")
    job = JobTransaction.from_payload(build_payload(sink.begin("1")))
    monkeypatch.setattr(context_mod, "storage_class", _ask(_RemoteLikeLocal))
    assert job.output_uri == "x+" + job.staging_uri
    assert job.storage_options()["key"] == "env-key"
    assert job.fsspec_options()["use_listings_cache"] is False
    monkeypatch.setattr(committed_mod, "storage_class", _ask(_RemoteLikeLocal))
    seen: dict[str, object] = {}
    real_sink = committed_mod.Sink

    def spy(target: str, namespace: str, storage_options: object = None,
            **kwargs: object) -> Sink:
        seen["options"] = storage_options
        return real_sink(target, namespace, **kwargs)

    monkeypatch.setattr(committed_mod, "Sink", spy)
    committed_mod.reader_sink(sink.target, {"region_name": "r"})
    assert seen["options"] == {"key": "env-key", "secret": "env-secret", "region_name": "r"}


def test_the_job_asks_the_store_whether_spark_writes_it_natively(tmp_path, monkeypatch):
    """``JobTransaction.spark_native`` (the example job's choice between Spark's writer
    and ``write_tpc``): True for a local disk, False for S3 and Azure, and whatever the
    store class says for a URI that did not change."""
    sink = Sink(str(tmp_path / "t"), "ns")
    job = JobTransaction.from_payload(build_payload(sink.begin("1")))
    assert job.spark_native is True
    assert _s3_job(sink).spark_native is False
    txn = sink.begin("2")
    aztxn = type(txn)(**{**txn.to_dict(), "target": "az://c0ntainer/t",
                         "staging_uri": "az://c0ntainer/_tpc_staging/t/epoch=2/attempt=000001"})
    assert JobTransaction.from_payload(build_payload(aztxn)).spark_native is False
    monkeypatch.setattr(context_mod, "storage_class", _ask(_RemoteLikeLocal))
    assert job.spark_native is False


def _committed_local_target(tmp_path) -> Sink:
    """One committed epoch written with pyarrow straight into staging (real files)."""
    sink = Sink(str(tmp_path / "t"), "ns")
    txn = sink.begin("2026-11-20")
    staged = Path(sink.layout.staging("2026-11-20", txn.attempt))
    (staged / "k=a").mkdir(parents=True)
    pq.write_table(pa.table({"v": [1, 2]}), staged / "k=a" / "part-0.parquet")
    manifest = sink.precommit(txn)
    sink.commit(txn, expected_digest=manifest.digest)
    return sink


def test_read_committed_takes_the_arrow_path_when_the_store_is_not_spark_native(
        spark, tmp_path, monkeypatch):
    sink = _committed_local_target(tmp_path)
    arrow_reads: list[str] = []
    real = readers_mod._read_arrow

    def counting(spark_, fmt, base, files, storage_options):
        arrow_reads.append(base)
        return real(spark_, fmt, base, files, storage_options)

    monkeypatch.setattr(readers_mod, "_read_arrow", counting)
    # the real local store: Spark reads it natively
    assert rows_of(read_committed(spark, sink.target), "v", "k", "epoch") == [
        (1, "a", "2026-11-20"), (2, "a", "2026-11-20")]
    assert arrow_reads == []
    # the same files, but the store says Spark cannot reach it: pyarrow on the driver
    monkeypatch.setattr(readers_mod, "storage_class", _ask(_RemoteLikeLocal))
    assert rows_of(read_committed(spark, sink.target, distributed=False),
                   "v", "k", "epoch") == [(1, "a", "2026-11-20"), (2, "a", "2026-11-20")]
    assert len(arrow_reads) == 1


def test_an_unsupported_store_is_refused_before_spark_is_touched():
    with pytest.raises(UnsupportedStorage, match="hdfs://"):
        read_committed(None, "hdfs://namenode/t")
    with pytest.raises(UnsupportedStorage, match="gs://"):
        committed_mod.reader_sink("gs://b/t", None)


def test_the_two_real_stores_answer_as_the_job_side_expects():
    """The capability values the Spark side relies on (pyspark here has no hadoop-aws)."""
    assert (LocalStorage.takes_credentials, LocalStorage.spark_native) == (False, True)
    assert (S3Storage.takes_credentials, S3Storage.spark_native) == (True, False)
    assert S3Storage.spark_uri("s3://b/k") == "s3a://b/k" == S3Storage.spark_uri("s3a://b/k")
    assert LocalStorage.spark_uri("/a/b") == "/a/b"
