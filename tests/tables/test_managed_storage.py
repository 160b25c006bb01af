"""Managed table storage: a REST catalog's table bucket (SeaweedFS) takes only the
table's own files, so the ledger, claim, markers and seals live at ``ledger_uri``.

Every check here reads the real S3 (the bucket listings) and the real catalog."""

from __future__ import annotations

import io
import threading
import time

import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog import load_catalog
from pyiceberg.transforms import IdentityTransform

from airflow_tpc import StorageError, TpcError
from airflow_tpc.core.faults import InjectedCrash, armed
from airflow_tpc.tables import IcebergSink, open_sink
from tests.faults.proxy import FaultPlan, FaultProxy

from .conftest import TABLE, rows, stage, write_parquet


def _keys(seaweed, bucket: str) -> dict[str, str]:
    """Every key of a bucket with its ETag: a byte-for-byte picture of it."""
    s3 = seaweed.client()
    out: dict[str, str] = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        out.update({o["Key"]: o["ETag"] for o in page.get("Contents", [])})
    return out


@pytest.fixture()
def rest(seaweed):
    """A fresh table bucket behind the REST catalog: (catalog properties, bucket)."""
    warehouse = seaweed.new_warehouse()
    return seaweed.catalog_properties(warehouse), warehouse[len("s3://"):].strip("/")


def _sink(seaweed, props, ledger_uri=None, namespace="events", table=TABLE) -> IcebergSink:
    return IcebergSink(f"iceberg://sw/{table}", namespace, catalog_properties=props,
                       storage_options=seaweed.s3_options(), ledger_uri=ledger_uri)


def _existing_table(props):
    """A table made by someone else through the catalog, partitioned by epoch."""
    catalog = load_catalog("sw", **props)
    catalog.create_namespace_if_not_exists("analytics")
    schema = rows("x", [1]).schema
    table = catalog.create_table(TABLE, schema=schema)
    with table.update_spec() as spec:
        spec.add_field("epoch", IdentityTransform(), "epoch")
    return catalog.load_table(TABLE)


def test_only_data_files_and_the_catalogs_commits_reach_the_table_location(seaweed, rest):
    props, bucket = rest
    ledger = seaweed.new_prefix()
    sink = _sink(seaweed, props, ledger)
    txn, manifest = stage(sink, "5", {"a.parquet": rows("5", [1, 2])})
    sink.commit(txn, expected_digest=manifest.digest)
    txn, manifest = stage(_sink(seaweed, props, ledger), "5", {"b.parquet": rows("5", [3])})
    _sink(seaweed, props, ledger).commit(txn, expected_digest=manifest.digest)
    table = sink.table_target.load_table()
    assert sorted(table.scan().to_arrow()["id"].to_pylist()) == [3]
    location = table.location().rstrip("/")
    assert location == sink.table_location
    prefix = location[len(f"s3://{bucket}/"):]
    for key in _keys(seaweed, bucket):
        assert key.startswith(prefix + "/"), key
        rel = key[len(prefix) + 1:]
        assert (rel.startswith("data/") and rel.endswith(".parquet")) \
            or rel.startswith("metadata/"), key
    # The ledger, the claim (naming the table's location), the markers and the seals.
    store = sink.storage
    root = ledger[len("s3://"):]
    names = {o.path[len(root) + 1:] for o in store.list(root)}
    assert "_tpc/sink.json" in names and "epoch=5/_tpc_published.json" in names
    assert any(n.startswith("_tpc/sealed/epoch=5/attempt=000002/") for n in names)
    claim = store.read_bytes(store.join(root, "_tpc", "sink.json"))
    assert location.encode() in claim
    assert sink.committed_files()["5"] == [f"{location}/data/_tpc_staging/epoch=5/"
                                           "attempt=000002/b.parquet"]


def test_an_existing_table_in_managed_storage_without_ledger_uri_says_what_to_set(
        seaweed, rest):
    props, bucket = rest
    _existing_table(props)
    before = _keys(seaweed, bucket)
    sink = _sink(seaweed, props)
    with pytest.raises(StorageError, match="set ledger_uri") as exc:
        sink.begin("5")
    assert "403" in str(exc.value) and "Nothing was written" in str(exc.value)
    assert _keys(seaweed, bucket) == before
    # With a ledger apart, the same table takes the epoch.
    sink = _sink(seaweed, props, seaweed.new_prefix())
    txn, manifest = stage(sink, "5", {"a.parquet": rows("5", [7])})
    sink.commit(txn, expected_digest=manifest.digest)
    assert sink.table_target.load_table().scan().to_arrow()["id"].to_pylist() == [7]


def test_a_new_rest_table_without_ledger_uri_is_refused_before_anything_is_written(
        seaweed, rest):
    props, bucket = rest
    with pytest.raises(TpcError, match="set ledger_uri"):
        _sink(seaweed, props)
    assert _keys(seaweed, bucket) == {}
    assert not load_catalog("sw", **props).table_exists(TABLE)


def test_the_new_tables_place_is_the_ledgers_until_the_table_exists(seaweed, rest):
    """The catalog places a new table elsewhere once its first place holds files (our
    staging): every later sink of the ledger still stages where the first one did, and
    the table is created there."""
    props, _ = rest
    ledger = seaweed.new_prefix()
    first = _sink(seaweed, props, ledger)
    txn = first.begin("5")
    later = _sink(seaweed, props, ledger)
    assert later.table_location == first.table_location
    assert later.layout.staging("5", 1) == first.layout.staging("5", 1)
    write_parquet(later, txn, "a.parquet", rows("5", [1]))
    # What the catalog would answer now is elsewhere: the place comes from the ledger.
    catalog = load_catalog("sw", **props)
    elsewhere = catalog.create_table_transaction(TABLE, schema=rows("5", [1]).schema)
    assert elsewhere.table_metadata.location.rstrip("/") != first.table_location
    assert _sink(seaweed, props, ledger).table_location == first.table_location
    manifest = later.precommit(txn)
    _sink(seaweed, props, ledger).commit(txn, expected_digest=manifest.digest)
    assert catalog.load_table(TABLE).location().rstrip("/") == first.table_location


def test_ledger_uri_is_refused_where_it_cannot_serve(seaweed, rest, tmp_path):
    props, bucket = rest
    ledger = seaweed.new_prefix()
    sink = _sink(seaweed, props, ledger)
    txn, _ = stage(sink, "5", {"a.parquet": rows("5", [1])})
    sink.commit(txn)
    # One ledger, one table: another table on the same ledger is refused at begin.
    other = _sink(seaweed, props, ledger, table="analytics.other")
    with pytest.raises(TpcError, match="give each table its own ledger_uri"):
        other.begin("5")
    inside = f"{sink.table_location}/ledger"
    with pytest.raises(TpcError, match="must lie apart"):
        _sink(seaweed, props, inside)
    with pytest.raises(TpcError, match="another store"):
        _sink(seaweed, props, str(tmp_path / "ledger"))
    with pytest.raises(TpcError, match="not a table target"):
        open_sink(str(tmp_path / "folder"), "events", ledger_uri=str(tmp_path / "ledger"))
    # A folder target's ledger is not a table's.
    folder = seaweed.new_prefix()
    open_sink(folder, "events", storage_options=seaweed.s3_options()).begin("1")
    with pytest.raises(TpcError, match="a folder target"):
        _sink(seaweed, props, folder).begin("5")


class _TimedProxy:
    """SeaweedFS's S3 and REST catalog, each behind the fault proxy (tests/faults/proxy.py)
    adding a fixed latency to every request and recording when each one started and
    ended: how many requests a commit makes, and how many it makes one after another."""

    def __init__(self, seaweed, latency_s: float) -> None:
        plan = FaultPlan(latency_rate=1.0, latency_s=(latency_s, latency_s))
        self.s3 = FaultProxy(seaweed.s3_endpoint, plan).start()
        self.catalog = FaultProxy(seaweed.catalog_uri, plan).start()
        self.spans: list[list[float]] = []
        self._local = threading.local()
        for proxy in (self.s3, self.catalog):
            self._timed(proxy)

    def _timed(self, proxy) -> None:
        spans, local = self.spans, self._local

        def started(req, op, n):
            local.span = [time.perf_counter(), float("inf")]
            spans.append(local.span)

        serve = proxy._serve_one

        def serve_one(conn, rfile):
            local.span = None
            try:
                return serve(conn, rfile)
            finally:
                if local.span is not None:
                    local.span[1] = time.perf_counter()

        proxy.script, proxy._serve_one = started, serve_one

    def reset(self) -> None:
        self.spans.clear()

    def rounds(self) -> int:
        """The longest chain of requests each started after the one before it ended:
        the round trips a commit waits for one after another."""
        chain: list[tuple[float, int]] = []  # (end, chain length ending there)
        for start, end in sorted(self.spans):
            before = max((k for e, k in chain if e <= start), default=0)
            chain.append((end, before + 1))
        return max((k for _, k in chain), default=0)

    def close(self) -> None:
        self.s3.stop()
        self.catalog.stop()


def test_a_rest_commit_makes_the_same_requests_at_any_file_count_few_in_a_row(seaweed, rest):
    """Behind a fixed latency on every S3 and catalog request: a commit of 40 files makes
    exactly the requests of a commit of 2 (18), and waits for at most 12 round trips one
    after another (9 on a quiet machine: the table load, the reads before the decision,
    the pending entry, the decision, the snapshot's files beside the marker read, the
    catalog commit, the marker, published.json, the entry's removal; 24 when each read
    waited for the one before, 14 with pyarrow's HEAD before each GET and its multipart
    uploads): its reads before the decision go side by side (storage/ahead.py), the
    table's manifests are read (one GET each: tables/iceberg_s3io.py) from the moment
    it is loaded and its snapshot built while the commit verifies and decides, the
    snapshot's files are sent (one PUT each) once the decision is written, and the
    pending index is listed beside the promotion.  Every write keeps its order: the
    decision is written before the catalog commit, the marker after it."""
    props, _ = rest
    timed = _TimedProxy(seaweed, 0.04)
    direct = seaweed.client()
    try:
        via = {**props, "uri": timed.catalog.endpoint, "s3.endpoint": timed.s3.endpoint,
               "oauth2-server-uri": f"{timed.catalog.endpoint}/v1/oauth/tokens"}
        options = {**seaweed.s3_options(), "endpoint_url": timed.s3.endpoint}
        seen = {}
        for n in (2, 40):  # each its own table, holding one epoch before the one measured
            table, ledger = f"analytics.events_{n}", seaweed.new_prefix()

            def sink(table: str = table, ledger: str = ledger) -> IcebergSink:
                return IcebergSink(f"iceberg://sw/{table}", "events", catalog_properties=via,
                                   storage_options=options, ledger_uri=ledger)

            for epoch, files in (("1", 1), ("2", n)):
                s = sink()
                txn = s.begin(epoch)
                bucket, prefix = txn.staging_uri[len("s3://"):].split("/", 1)
                for i in range(files):  # straight into the store, as the job writes
                    buf = io.BytesIO()
                    pq.write_table(rows(epoch, [10 * i, 10 * i + 1]), buf)
                    direct.put_object(Bucket=bucket, Key=f"{prefix}/part-{i:05d}.parquet",
                                      Body=buf.getvalue())
                manifest = s.precommit(txn)
                s = sink()  # a new process: nothing cached but the catalog's client
                timed.reset()
                assert s.commit(txn, expected_digest=manifest.digest).outcome == "committed"
            seen[n] = (len(timed.spans), timed.rounds())
            assert len(sink().table_target.load_table().scan().to_arrow()) == 2 + 2 * n
        assert seen[2][0] == seen[40][0], seen
        assert seen[2][1] <= 12 and seen[40][1] <= 12, seen
    finally:
        timed.close()


def test_a_crash_after_the_decided_commit_sent_its_files_still_gives_one_snapshot(
        seaweed, rest):
    """The commit built before the decision uploads its manifests once the decision is
    written, beside the marker read: a crash after that, before the catalog commit,
    leaves unreferenced metadata files only; the next actor commits one snapshot."""
    props, bucket = rest
    ledger = seaweed.new_prefix()
    txn, manifest = stage(_sink(seaweed, props, ledger), "5", {"a.parquet": rows("5", [1])})
    _sink(seaweed, props, ledger).commit(txn, expected_digest=manifest.digest)
    txn, manifest = stage(_sink(seaweed, props, ledger), "5", {"b.parquet": rows("5", [2])})
    before = {k for k in _keys(seaweed, bucket) if "/metadata/" in k}
    sink = _sink(seaweed, props, ledger)
    with armed("iceberg.before_table_commit"), pytest.raises(InjectedCrash):
        sink.commit(txn, expected_digest=manifest.digest)
    for _ in range(100):  # sent in the background (by the crash, as a rule)
        sent = {k for k in _keys(seaweed, bucket) if "/metadata/" in k} - before
        if sent:
            break
        time.sleep(0.1)
    assert sent and all(k.endswith(".avro") for k in sent), sent  # files, no snapshot
    table = sink.table_target.load_table()
    assert sorted(table.scan().to_arrow()["id"].to_pylist()) == [1]
    report = _sink(seaweed, props, ledger).recover()
    assert report.rolled_forward == [("5", 2)]
    again = _sink(seaweed, props, ledger)
    assert again.commit(txn, expected_digest=manifest.digest).outcome == "already_committed"
    table = again.table_target.load_table()
    assert sorted(table.scan().to_arrow()["id"].to_pylist()) == [2]
    ours = [s for s in table.snapshots() if s.summary is not None
            and s.summary.additional_properties.get("airflow-tpc.attempt") == "2"]
    assert len(ours) == 1
