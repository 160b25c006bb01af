"""The ``tpc`` Python Data Source: fsspec writes from executors, commit/abort semantics."""

from __future__ import annotations

import json

import pytest

from airflow_tpc import Sink
from airflow_tpc.spark import read_committed, read_uncommitted, write_tpc
from airflow_tpc.spark.datasource import register_data_source

from .faulty import AlwaysFailSource, CrashFirstAttemptSource
from .helpers import job_for, rows_of


def s3_target(request) -> tuple[str, dict]:
    options = request.getfixturevalue("s3_options")
    bucket = request.getfixturevalue("s3_bucket")
    return f"s3://{bucket}/tables/events", options


@pytest.fixture(params=["local", "s3"])
def target(request, tmp_path):
    """(target URI, storage options for the operator side) on each store."""
    if request.param == "local":
        return str(tmp_path / "events"), None
    return s3_target(request)


def events(spark, n: int, parts: int = 2, offset: int = 0):
    return spark.range(offset, offset + n, numPartitions=parts).selectExpr(
        "id", "cast(id % 3 as string) as country", "id * 2 as value")


def staged(sink: Sink, txn) -> list[str]:
    staging = sink.layout.staging(txn.epoch, txn.attempt)
    return sorted(i.path[len(staging) + 1:] for i in sink.storage.list(staging))


def test_datasource_writes_seals_and_commits(spark, target):
    uri, options = target
    sink = Sink(uri, "events", storage_options=options)
    txn = job_for(spark, sink, "2026-11-20", storage_options=options)
    if options:  # the payload carries endpoint/region only; executors use their env keys
        assert options["secret"] not in txn.to_json()
        assert all(options["secret"] not in v for _, v in spark.sparkContext.getConf().getAll())
    write_tpc(events(spark, 600), txn, partition_by=["country"])

    manifest = sink.read_manifest(txn.txn)  # written by commit() in a Python worker
    assert manifest is not None and manifest.total_rows == 600
    algo = "md5:" if options else "sha256:"  # md5 = the ETag of a single-part S3 object
    assert all(f.checksum.startswith(algo) and f.path.startswith("country=")
               for f in manifest.files)
    names = [f.path.rsplit("/", 1)[-1] for f in manifest.files]
    assert all(n.startswith(("part-00000-a0-", "part-00001-a0-")) for n in names)
    assert txn.precommit().digest == manifest.digest  # idempotent, sidecar reused
    assert read_committed(spark, uri, storage_options=options).count() == 0

    result = sink.commit(txn.txn, expected_digest=manifest.digest)
    assert result.outcome == "committed"
    expected = [(i, i % 3, 2 * i, "2026-11-20") for i in range(600)]
    df = read_committed(spark, uri, storage_options=options)
    assert rows_of(df, "id", "country", "value", "epoch") == expected
    if options:
        # distributed: executors read through the tpc source, keys from their env
        public = {k: options[k] for k in ("endpoint_url", "region_name")}
        df = read_committed(spark, uri, storage_options=public)
        assert df.rdd.getNumPartitions() == manifest.total_files
        got = rows_of(df, "id", "country", "value", "epoch")
        assert got == [(i, str(c), v, e) for i, c, v, e in expected]  # partitions: strings
        assert read_committed(spark, uri, storage_options=public, epochs=["x"]).count() == 0


def test_retried_task_attempt_leaves_nothing_in_the_manifest(spark, target, tmp_path):
    uri, options = target
    register_data_source(spark, CrashFirstAttemptSource)
    sink = Sink(uri, "events", storage_options=options)
    txn = job_for(spark, sink, "1", storage_options=options)
    record = tmp_path / "crash.json"
    write_tpc(events(spark, 400), txn, max_records_per_file=50,
              format_name=CrashFirstAttemptSource.name(), options={"record": str(record)})

    crashed = json.loads(record.read_text())  # attempt 0 died after completing a file
    assert crashed["left"], "the crashed attempt left no file: the test proves nothing"
    manifest = sink.read_manifest(txn.txn)
    listed = {f.path for f in manifest.files}
    assert not listed & set(crashed["left"])
    assert {p.split("-")[2] for p in listed if p.startswith("part-00000-")} == {"a1"}
    assert {p.split("-")[2] for p in listed if p.startswith("part-00001-")} == {"a0"}
    assert manifest.total_rows == 400 and manifest.total_files == 8
    assert not set(staged(sink, txn.txn)) & set(crashed["left"])  # deleted by commit()

    sink.commit(txn.txn)
    df = read_committed(spark, uri, storage_options=options)
    assert sorted(r.id for r in df.collect()) == list(range(400))


def test_failed_job_aborts_leaves_no_manifest_and_nothing_visible(spark, target):
    uri, options = target
    register_data_source(spark, AlwaysFailSource)
    sink = Sink(uri, "events", storage_options=options)
    txn = job_for(spark, sink, "1", storage_options=options)
    with pytest.raises(Exception, match="injected failure in partition 1"):
        write_tpc(events(spark, 100), txn, format_name=AlwaysFailSource.name())
    assert sink.read_manifest(txn.txn) is None
    assert staged(sink, txn.txn) == []  # partition 0 succeeded: abort() removed its file
    assert read_committed(spark, uri, storage_options=options).count() == 0
    assert sink.committed_files() == {}


def test_read_committed_never_returns_staged_aborted_or_superseded_rows(spark, tmp_path):
    sink = Sink(str(tmp_path / "t"), "ns")

    def run(epoch: str, offset: int, *, commit: bool = True, precommit: bool = True):
        txn = job_for(spark, sink, epoch)
        write_tpc(events(spark, 10, offset=offset), txn, partition_by=["country"],
                  precommit=precommit)
        if commit:
            sink.commit(txn.txn)
        return txn

    run("0", 0)                                   # committed
    run("1", 100)                                 # committed, then superseded by a rerun
    run("1", 200)                                 # the rerun (attempt 2) replaces it
    run("2", 300, commit=False)                   # pre-committed, not committed
    open_txn = run("3", 400, commit=False, precommit=False)  # still open
    aborted = run("4", 500, commit=False)
    sink.abort(aborted.txn, "operator said no")

    df = read_committed(spark, sink.target)
    got = rows_of(df, "id", "epoch")
    assert got == [(i, "0") for i in range(10)] + [(i, "1") for i in range(200, 210)]
    only_1 = read_committed(spark, sink.target, epochs=["1", "2"])
    assert {r.epoch for r in only_1.collect()} == {"1"}

    debug = read_uncommitted(spark, sink.target)
    states = {(r.epoch, r.tpc_state) for r in debug.select("epoch", "tpc_state").collect()}
    assert states == {("0", "published"), ("1", "published"), ("2", "PRECOMMITTED"),
                      ("3", "OPEN")}
    assert debug.filter("epoch = '3'").count() == 10 and open_txn.attempt == 1


def test_partitioned_round_trip_with_escaping_and_two_columns(spark, tmp_path):
    sink = Sink(str(tmp_path / "t"), "ns")
    txn = job_for(spark, sink, "9")
    rows = [(i, f"a/b={i % 2}", i % 2 == 0, f"v{i}") for i in range(20)]
    rows += [(20, None, True, "null path"), (21, None, None, "both null")]
    df = spark.createDataFrame(rows, "id long, path string, even boolean, v string")
    write_tpc(df, txn, partition_by=["path", "even"])
    manifest = sink.read_manifest(txn.txn)
    assert {f.path.rsplit("/", 1)[0] for f in manifest.files} == {
        "path=a%2Fb%3D0/even=true", "path=a%2Fb%3D1/even=false",
        "path=__HIVE_DEFAULT_PARTITION__/even=true",
        "path=__HIVE_DEFAULT_PARTITION__/even=__HIVE_DEFAULT_PARTITION__"}
    sink.commit(txn.txn)
    back = read_committed(spark, sink.target)
    # Spark's partition discovery types a boolean directory value as a string
    assert rows_of(back, "id", "path", "even", "v") == sorted(
        (i, p, None if e is None else str(e).lower(), v) for i, p, e, v in rows)


def test_at_least_once_writes_straight_into_the_epoch(spark, tmp_path):
    sink = Sink(str(tmp_path / "t"), "ns")
    txn = job_for(spark, sink, "1", guarantee="AT_LEAST_ONCE")
    write_tpc(events(spark, 30), txn)
    assert txn.output_uri == sink.output_uri("1")
    assert sink.read_manifest(txn.txn) is None
    assert spark.read.parquet(sink.output_uri("1")).count() == 30
    write_tpc(events(spark, 30), txn)  # a retry duplicates: that is the documented cost
    assert spark.read.parquet(sink.output_uri("1")).count() == 60


def test_two_writes_into_one_transaction_then_one_precommit(spark, tmp_path):
    sink = Sink(str(tmp_path / "t"), "ns")
    txn = job_for(spark, sink, "1")
    write_tpc(events(spark, 10), txn, precommit=False)
    events(spark, 5, offset=10).write.parquet(txn.output_uri + "/native")
    write_tpc(events(spark, 10, offset=20), txn, precommit=False)
    manifest = txn.precommit()
    assert manifest.total_files == 4 + len(
        [f for f in manifest.files if f.path.startswith("native/")])
    sink.commit(txn.txn)
    ids = sorted(r.id for r in read_committed(spark, sink.target).collect())
    assert ids == list(range(15)) + list(range(20, 30))


def test_a_fenced_attempt_cannot_seal_through_the_data_source(spark, tmp_path):
    """A zombie job (its Airflow task was retried) writes, but its seal is refused."""
    sink = Sink(str(tmp_path / "t"), "ns")
    zombie = job_for(spark, sink, "1")
    live = job_for(spark, sink, "1")
    with pytest.raises(Exception, match="FencedError|has begun since"):
        write_tpc(events(spark, 10), zombie)
    assert sink.read_manifest(zombie.txn) is None
    write_tpc(events(spark, 10, offset=100), live)
    sink.commit(live.txn)
    assert sorted(r.id for r in read_committed(spark, sink.target).collect()) == list(
        range(100, 110))


def test_overwrite_mode_replaces_what_the_attempt_staged(spark, tmp_path):
    sink = Sink(str(tmp_path / "t"), "ns")
    txn = job_for(spark, sink, "1")
    write_tpc(events(spark, 10), txn, precommit=False)
    write_tpc(events(spark, 5, offset=50), txn, mode="overwrite")
    sink.commit(txn.txn)
    assert sorted(r.id for r in read_committed(spark, sink.target).collect()) == list(
        range(50, 55))
