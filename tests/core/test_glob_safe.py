"""Glob-safe folder targets: recursive readers of a target read committed rows only.

Three real recursive readers that know nothing of airflow-tpc — DuckDB's
``read_parquet('<T>/**/*.parquet')``, ``pyarrow.dataset.dataset(T, partitioning="hive")``
and polars' ``scan_parquet('<T>/**/*.parquet')`` — read a target on a local disk and on
S3 (moto's server; DuckDB and pyarrow through an s3fs filesystem, polars through its
own S3 client) in every state of an epoch: staged (with Spark's ``_temporary`` files),
pre-committed, aborted (its cleanup not done), decided but not promoted, and
committed.  Staging lies beside the target (``<parent>/_tpc_staging/<name>``), so in
each state they return exactly what the read-committed path returns.

Also: a target claimed by an earlier build (staging in ``<T>/_tpc/staging``) keeps
its layout — an attempt staged there before the upgrade is committed, recovered and
read by this build; a target with no usable parent folder stages inside itself, with
a warning; the claim and a configured staging root must agree.  And what the
documentation says a plain reader of an S3 ``move`` target sees mid-promotion.
"""

from __future__ import annotations

import io
import json
import logging
import os
from collections import Counter

import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.parquet as pq
import pytest

from airflow_tpc import Sink, SinkConfig
from airflow_tpc.core.faults import InjectedCrash, armed
from airflow_tpc.errors import TpcError

from .helpers import read_committed

NS = "globsafe"


# ----------------------------------------------------------------------------- data
def parquet(ids: list[int]) -> bytes:
    buf = io.BytesIO()
    pq.write_table(pa.table({"id": pa.array(ids, pa.int64())}), buf)
    return buf.getvalue()


def rows(epoch: int, attempt: int, n: int = 3) -> list[int]:
    """Ids unique to (epoch, attempt): a reader that mixes attempts is caught."""
    return [epoch * 10_000 + attempt * 100 + i for i in range(n)]


def write(sink: Sink, txn, files: dict[str, list[int]], *, spark_leftovers: bool = False):
    """What a Spark job leaves in staging: part files in partition folders, and (while
    it runs, or after a task died) its committer's ``_temporary`` attempt folders."""
    staging = sink.layout.staging(txn.epoch, txn.attempt)
    for rel, ids in files.items():
        sink.storage.put(sink.storage.join(staging, rel), parquet(ids))
    if spark_leftovers:
        tmp = "_temporary/0/_temporary/attempt_202611232200_0001_m_000000_0"
        sink.storage.put(sink.storage.join(staging, tmp, "part=x", "part-00000.parquet"),
                         parquet([-1, -2]))
        sink.storage.put(sink.storage.join(staging, tmp, "part=x", "part-00001.parquet"),
                         b"PAR1 truncated: a task still writing")


# -------------------------------------------------------------------------- readers
class Readers:
    """The recursive readers, pointed at one target on one store."""

    def __init__(self, kind: str, target: str, options: dict | None):
        self.kind, self.target, self.options = kind, target, options
        self.fs = None
        if kind == "s3":
            import s3fs

            self.fs = s3fs.S3FileSystem(endpoint_url=options["endpoint_url"],
                                        key=options["key"], secret=options["secret"],
                                        skip_instance_cache=True, use_listings_cache=False)

    def duckdb(self) -> list[int]:
        import duckdb

        con = duckdb.connect()
        if self.fs is not None:
            con.register_filesystem(self.fs)
        try:
            return [r[0] for r in con.sql(
                f"SELECT id FROM read_parquet('{self.target}/**/*.parquet', "
                "hive_partitioning = true)").fetchall()]
        except duckdb.IOException as exc:
            if "No files found" in str(exc):
                return []
            raise
        finally:
            con.close()

    def pyarrow(self) -> list[int]:
        if self.fs is None:
            if not os.path.isdir(self.target):
                return []
            dataset = pads.dataset(self.target, partitioning="hive", format="parquet")
        else:
            path = self.target.split("://", 1)[1]
            if not self.fs.exists(path):
                return []
            dataset = pads.dataset(path, filesystem=self.fs, partitioning="hive",
                                   format="parquet")
        if not dataset.files:  # nothing to read: no schema either
            return []
        return dataset.to_table(columns=["id"]).column("id").to_pylist()

    def polars(self) -> list[int]:
        import polars as pl

        opts = None
        if self.fs is not None:
            opts = {"aws_access_key_id": self.options["key"],
                    "aws_secret_access_key": self.options["secret"],
                    "aws_endpoint_url": self.options["endpoint_url"],
                    "aws_region": "us-east-1", "aws_allow_http": "true"}
        try:
            frame = pl.scan_parquet(f"{self.target}/**/*.parquet", hive_partitioning=True,
                                    storage_options=opts).select("id").collect()
        except FileNotFoundError:
            return []
        except pl.exceptions.ComputeError as exc:
            if "expanded paths were empty" in str(exc) or "no files" in str(exc).lower():
                return []
            raise
        return frame["id"].to_list()

    def all(self) -> dict[str, Counter]:
        return {"duckdb": Counter(self.duckdb()), "pyarrow": Counter(self.pyarrow()),
                "polars": Counter(self.polars())}


def committed_rows(sink: Sink) -> Counter:
    """What the read-committed path (the markers) says is committed, row by row."""
    out: Counter = Counter()
    for files in read_committed(Sink(sink.target, NS, storage_options=_options(sink))
                                ).values():
        for data in files.values():
            out.update(pq.read_table(io.BytesIO(data)).column("id").to_pylist())
    return out


def _options(sink: Sink) -> dict | None:
    return getattr(sink.storage, "_options", None) or None


def assert_committed_only(readers: Readers, sink: Sink, expected: list[int], state: str):
    want = Counter(expected)
    assert committed_rows(sink) == want, f"{state}: read_committed"
    for name, got in readers.all().items():
        assert got == want, f"{state}: {name} read {sorted(got)}, committed {sorted(want)}"


# ----------------------------------------------------------------------------- tests
@pytest.fixture(params=["local", "s3"])
def target(request, tmp_path):
    from tests.conftest import make_store

    uri, options = make_store(request.param, request, tmp_path)
    return request.param, uri, options


@pytest.mark.parametrize("promotion", ["move", "manifest"])
def test_recursive_readers_see_committed_rows_only_in_every_state(target, promotion):
    kind, uri, options = target
    sink = Sink(uri, NS, storage_options=options, config=SinkConfig(promotion=promotion))
    readers = Readers(kind, uri, options)
    # In "manifest" mode the data stays in staging, beside the target: a recursive
    # reader of the target sees none of it (it needs read_committed), never a wrong row.
    visible = promotion == "move"
    assert_committed_only(readers, sink, [], "empty")

    first = sink.begin("1")
    write(sink, first, {"part=a/p0.parquet": rows(1, 1)})
    sink.commit(first, expected_digest=sink.precommit(first).digest)
    published = rows(1, 1) if visible else []
    if visible:
        assert_committed_only(readers, sink, published, "epoch 1 committed")
    else:
        assert committed_rows(sink) == Counter(rows(1, 1))
        assert readers.all() == dict.fromkeys(("duckdb", "pyarrow", "polars"), Counter())

    def check(state: str) -> None:
        if visible:
            assert_committed_only(readers, sink, published, state)
        else:
            assert readers.all() == dict.fromkeys(("duckdb", "pyarrow", "polars"),
                                                  Counter()), state

    # staged, with a Spark job's _temporary files (DuckDB crashed on them in-tree)
    staged = sink.begin("2")
    write(sink, staged, {"part=a/p0.parquet": rows(2, 1), "part=b/p1.parquet": rows(2, 1)},
          spark_leftovers=True)
    assert "/_tpc_staging/" in staged.staging_uri
    check("staged")
    # pre-committed (Spark's leftovers are hidden: not in the manifest)
    sink.storage.delete_prefix(sink.storage.join(
        sink.layout.staging("2", staged.attempt), "_temporary", "0", "_temporary",
        "attempt_202611232200_0001_m_000000_0", "part=x", "part-00001.parquet"))
    manifest = sink.precommit(staged)
    check("pre-committed")
    # aborted, its staging not removed yet (the abort died after its decision)
    with armed("abort.after_decision"), pytest.raises(InjectedCrash):
        sink.abort(staged, "test")
    assert sink.storage.list(sink.layout.staging("2", staged.attempt))
    check("aborted, staging left")

    # decided but not promoted (a crash right after the commit point)
    decided = sink.begin("2")
    write(sink, decided, {"part=a/p0.parquet": rows(2, 2)}, spark_leftovers=True)
    manifest = sink.precommit(decided)
    with armed("commit.after_decision"), pytest.raises(InjectedCrash):
        sink.commit(decided, expected_digest=manifest.digest)
    check("decided, not promoted")

    # committed: rolled forward by recover
    Sink(uri, NS, storage_options=options, config=SinkConfig(promotion=promotion)).recover()
    published = published + rows(2, 2) if visible else []
    check("epoch 2 committed")
    assert committed_rows(sink) == Counter(rows(1, 1) + rows(2, 2))

    # an epoch replaced by a later attempt: only the new rows, once
    again = sink.begin("1")
    write(sink, again, {"part=a/p0.parquet": rows(1, 2)})
    sink.commit(again, expected_digest=sink.precommit(again).digest)
    published = rows(1, 2) + rows(2, 2) if visible else []
    check("epoch 1 replaced")
    assert committed_rows(sink) == Counter(rows(1, 2) + rows(2, 2))
    if visible and kind == "local":  # the directory exchange left no Spark leftovers behind
        assert not [p for p, _, _ in os.walk(uri) if "_temporary" in p]


def test_s3_copy_promotion_mid_way_is_what_the_docs_say(s3_options, s3_bucket):
    """PROTOCOL §8: between the copies and the cleanup of an S3 ``move`` promotion a
    recursive reader sees the replaced attempt's rows beside the new one's (never a
    staged or aborted row); read_committed sees one attempt throughout."""
    uri = f"s3://{s3_bucket}/tables/events"
    sink = Sink(uri, NS, storage_options=s3_options)
    readers = Readers("s3", uri, s3_options)
    first = sink.begin("1")
    write(sink, first, {"part=a/p0.parquet": rows(1, 1)})
    sink.commit(first, expected_digest=sink.precommit(first).digest)
    second = sink.begin("1")
    write(sink, second, {"part=a/p0.parquet": rows(1, 2)})
    manifest = sink.precommit(second)
    with armed("promote.before_marker"), pytest.raises(InjectedCrash):
        sink.commit(second, expected_digest=manifest.digest)
    assert committed_rows(sink) == Counter(rows(1, 1))
    assert Counter(readers.duckdb()) == Counter(rows(1, 1) + rows(1, 2))
    Sink(uri, NS, storage_options=s3_options).recover()
    assert_committed_only(readers, sink, rows(1, 2), "after the cleanup")


def _legacy_target(uri: str, options: dict | None) -> Sink:
    """A target as an earlier build claimed it: ``sink.json`` version 1 (no
    ``staging_root``), so its staging lies in ``<T>/_tpc/staging``."""
    probe = Sink(uri, NS, storage_options=options)
    probe.storage.put(probe.layout_claim_path, json.dumps(
        {"format": "airflow-tpc-sink", "version": 1, "namespace": NS}).encode())
    return Sink(uri, NS, storage_options=options)


def test_a_target_of_the_earlier_layout_keeps_it(target):
    kind, uri, options = target
    legacy = _legacy_target(uri, options)
    assert legacy.layout.staging_root.endswith("/_tpc/staging")
    # the earlier build's attempts: one committed, one in flight (pre-committed)
    done = legacy.begin("1")
    assert done.staging_uri.endswith("/_tpc/staging/epoch=1/attempt=000001")
    write(legacy, done, {"part=a/p0.parquet": rows(1, 1)})
    legacy.commit(done, expected_digest=legacy.precommit(done).digest)
    flight = legacy.begin("2")
    write(legacy, flight, {"part=a/p0.parquet": rows(2, 1)})
    manifest = legacy.precommit(flight)
    decided = legacy.begin("3")
    write(legacy, decided, {"part=a/p0.parquet": rows(3, 1)})
    decided_manifest = legacy.precommit(decided)
    with armed("commit.after_decision"), pytest.raises(InjectedCrash):
        legacy.commit(decided, expected_digest=decided_manifest.digest)

    # "the upgrade": a new Sink object, as any later task builds
    sink = Sink(uri, NS, storage_options=options)
    assert sink.layout.staging_root.endswith("/_tpc/staging")
    assert json.loads(sink.storage.read_bytes(sink.layout_claim_path)).get("version") == 1
    txn = sink.transaction("2", flight.attempt)
    result = sink.commit(txn, expected_digest=manifest.digest)
    assert ("3", decided.attempt) in result.rolled_forward  # through the pending index
    report = Sink(uri, NS, storage_options=options).recover()
    assert not report.errors and not report.aborted
    assert committed_rows(sink) == Counter(rows(1, 1) + rows(2, 1) + rows(3, 1))
    # and it keeps staging where it always did
    later = Sink(uri, NS, storage_options=options).begin("4")
    assert later.staging_uri.endswith("/_tpc/staging/epoch=4/attempt=000001")
    readers = Readers(kind, uri, options)
    assert Counter(readers.pyarrow()) == Counter(rows(1, 1) + rows(2, 1) + rows(3, 1))


def test_the_claim_records_where_staging_lies(target):
    kind, uri, options = target
    sink = Sink(uri, NS, storage_options=options)
    txn = sink.begin("1")
    claim = json.loads(sink.storage.read_bytes(sink.layout_claim_path))
    parent, name = uri.rstrip("/").rsplit("/", 1)
    expected = f"{parent}/_tpc_staging/{name}"
    if kind == "local":
        expected = f"file://{expected}"
    assert claim == {"format": "airflow-tpc-sink", "version": 2, "namespace": NS,
                     "staging_root": expected}
    assert txn.staging_uri == f"{expected}/epoch=1/attempt=000001"
    # a configured staging root that disagrees with the claim is refused, changing nothing
    other = f"{parent}/elsewhere" if kind == "s3" else os.path.join(parent, "elsewhere")
    with pytest.raises(TpcError, match="keeps the staging root it was created with"):
        Sink(uri, NS, storage_options=options, config=SinkConfig(staging_root=other)).begin("2")
    assert sink.describe() and [i.attempt for i in sink.describe()] == [1]
    # the same root configured explicitly is fine
    same = Sink(uri, NS, storage_options=options, config=SinkConfig(staging_root=expected))
    assert same.begin("2").staging_uri == f"{expected}/epoch=2/attempt=000001"


def test_a_configured_staging_root_is_not_recorded(tmp_path):
    """Table sinks configure theirs: the claim leaves it to the sink, so a plain sink
    opened on the same location looks in <target>/_tpc/staging and fails closed."""
    uri, scratch = str(tmp_path / "t"), str(tmp_path / "t" / "data" / "_tpc_staging")
    sink = Sink(uri, NS, config=SinkConfig(staging_root=scratch, promotion="manifest"))
    txn = sink.begin("1")
    assert txn.staging_uri == f"file://{scratch}/epoch=1/attempt=000001"
    assert json.loads((tmp_path / "t" / "_tpc" / "sink.json").read_text()) == {
        "format": "airflow-tpc-sink", "version": 2, "namespace": NS}
    write(sink, txn, {"part=a/p0.parquet": rows(1, 1)})
    with pytest.raises(TpcError, match="staging"):
        Sink(uri, NS).precommit(txn)
    assert sink.read_manifest(txn) is None


def test_a_bucket_root_target_stages_inside_itself_with_a_warning(s3_options, s3_bucket,
                                                                  caplog):
    uri = f"s3://{s3_bucket}"
    with caplog.at_level(logging.WARNING, logger="airflow_tpc"):
        txn = Sink(uri, NS, storage_options=s3_options).begin("1")
    assert txn.staging_uri == f"{uri}/_tpc/staging/epoch=1/attempt=000001"
    assert "stages inside itself" in caplog.text and "no parent folder" in caplog.text
    claim = json.loads(Sink(uri, NS, storage_options=s3_options).storage.read_bytes(
        f"{s3_bucket}/_tpc/sink.json"))
    assert claim["staging_root"] == f"{uri}/_tpc/staging"


def test_a_local_target_whose_sibling_is_unusable_stages_inside_itself(tmp_path, caplog):
    (tmp_path / "_tpc_staging").write_text("not a folder")  # the name is taken by a file
    uri = str(tmp_path / "t")
    with caplog.at_level(logging.WARNING, logger="airflow_tpc"):
        txn = Sink(uri, NS).begin("1")
    assert txn.staging_uri == f"file://{uri}/_tpc/staging/epoch=1/attempt=000001"
    assert "cannot be created" in caplog.text
    assert (tmp_path / "_tpc_staging").read_text() == "not a folder"
    assert sorted(os.listdir(tmp_path)) == ["_tpc_staging", "t"]


def test_a_damaged_staging_root_in_the_claim_is_refused(tmp_path):
    uri = str(tmp_path / "t")
    Sink(uri, NS).begin("1")
    claim_file = tmp_path / "t" / "_tpc" / "sink.json"
    for bad in (uri, str(tmp_path), f"{uri}/epoch=1/x", "s3://bucket/x", 7):
        doc = json.loads(claim_file.read_text())
        doc["staging_root"] = bad
        claim_file.write_text(json.dumps(doc))
        with pytest.raises(TpcError, match="staging_root") as err:
            Sink(uri, NS).recover()
        assert "Traceback" not in str(err.value)
