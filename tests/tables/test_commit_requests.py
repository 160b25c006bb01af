"""What one table commit costs in S3 requests, and what guards the statistics it is
built from.  Real parts: moto's server over HTTP behind the counting proxy of
tests/faults/proxy.py (every client — airflow-tpc's store, pyiceberg's FileIO, pyarrow,
delta-rs — talks to S3 only through it), a pyiceberg SQL catalog on SQLite, delta-rs.

Pre-commit reads each staged footer once (the schema check needs them) and seals what
the table commit needs of them in ``_tpc_table_stats.json``; the commit then reads no
staged file at all, so its requests do not grow with the number of files.
"""

from __future__ import annotations

import json
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_tpc.core.faults import armed
from airflow_tpc.core.records import DECISION
from airflow_tpc.core.staging import TABLE_STATS_NAME
from airflow_tpc.tables import DeltaSink, IcebergSink, open_sink
from airflow_tpc.tables.base import TableSchemaError
from tests.faults.proxy import FaultProxy

from .conftest import TABLE, rows


@pytest.fixture()
def proxy(moto_endpoint):
    """The counting proxy; ``p.seen`` is every request as (method, path) since the last
    ``reset_stats``."""
    with FaultProxy(moto_endpoint) as p:
        p.seen = []

        def record(req, op, n):
            p.seen.append((req.method, req.path))
            return None  # counted and forwarded, never failed

        p.script = record
        reset = p.reset_stats

        def reset_all() -> None:
            reset()
            p.seen.clear()

        p.reset_stats = reset_all
        yield p


def _options(proxy: FaultProxy) -> dict[str, str]:
    return {"endpoint_url": proxy.endpoint, "key": "testing", "secret": "testing-secret-key",
            "region_name": "us-east-1"}


def _iceberg(tmp_path, proxy: FaultProxy, bucket: str, name: str) -> IcebergSink:
    opts = _options(proxy)
    props = {"type": "sql", "uri": f"sqlite:///{tmp_path}/{name}.db",
             "warehouse": f"s3://{bucket}/{name}",
             "s3.endpoint": opts["endpoint_url"], "s3.access-key-id": opts["key"],
             "s3.secret-access-key": opts["secret"], "s3.region": "us-east-1"}
    return IcebergSink(f"iceberg://local/{TABLE}", "events", catalog_properties=props,
                       storage_options=opts)


def _delta(tmp_path, proxy: FaultProxy, bucket: str, name: str) -> DeltaSink:
    sink = open_sink(f"delta+s3://{bucket}/{name}/events", "events",
                     storage_options=_options(proxy))
    assert isinstance(sink, DeltaSink)
    return sink


MAKERS = {"iceberg": _iceberg, "delta": _delta}


def _stage(sink, epoch: str, n: int, table=None, precommit: bool = True):
    """What the job does: n Parquet files into the attempt's staging (pyarrow's S3)."""
    txn = sink.begin(epoch)
    fs = pa.fs.S3FileSystem(endpoint_override=sink.storage_options_endpoint, scheme="http",
                            access_key="testing", secret_key="testing-secret-key",
                            region="us-east-1")
    staging = txn.staging_uri[len("s3://"):]
    for i in range(n):
        with fs.open_output_stream(f"{staging}/part-{i:05d}.parquet") as out:
            pq.write_table(table if table is not None else rows(epoch, [10 * i, 10 * i + 1]),
                           out)
    return txn, (sink.precommit(txn) if precommit else None)


def _sink(fmt: str, tmp_path, proxy, bucket, name):
    sink = MAKERS[fmt](tmp_path, proxy, bucket, name)
    sink.storage_options_endpoint = proxy.endpoint[len("http://"):]
    return sink


def _commit_requests(fmt: str, n: int, tmp_path, proxy, bucket) -> tuple[int, list]:
    """Requests of the commit (decision, table commit, marker, ledger) of n staged files
    into a table that already holds one epoch."""
    sink = _sink(fmt, tmp_path, proxy, bucket, f"t{n}")
    txn, _ = _stage(sink, "2026-01-01", 1)
    assert sink.commit(txn).outcome == "committed"
    proxy.reset_stats()
    txn, manifest = _stage(sink, "2026-01-02", n)
    assert manifest.table_stats is not None
    # Pre-commit reads each footer once: pyarrow's open (a HEAD for the size: its
    # Python API takes no known size) and one ranged GET, nothing else per file.
    footer_reads = [(m, p) for m, p in proxy.seen if "/part-" in p and m in ("GET", "HEAD")]
    assert len({p for _, p in footer_reads}) == n
    assert len(footer_reads) <= 2 * n, footer_reads
    sink = _sink(fmt, tmp_path, proxy, bucket, f"t{n}")  # a new process: nothing cached
    proxy.reset_stats()
    assert sink.commit(txn).outcome == "committed"
    return sum(proxy.stats.requests.values()), list(proxy.seen)


@pytest.mark.parametrize("fmt", ["iceberg", "delta"])
def test_commit_requests_are_flat_in_the_file_count(fmt, tmp_path, proxy, s3_bucket):
    few, few_log = _commit_requests(fmt, 3, tmp_path, proxy, s3_bucket)
    many, many_log = _commit_requests(fmt, 30, tmp_path, proxy, s3_bucket)
    # No staged data file is read (no footer, no HEAD): every per-file fact comes from
    # the sealed statistics.
    touched = [e for e in many_log if "/part-" in e[1]]
    assert touched == [], touched[:5]
    assert few == many, (few, many, sorted(set(many_log) - set(few_log))[:20])
    # Nothing of ours is read twice in one commit: the begin record, the manifest, the
    # sealed statistics; nor the table's immutable manifests and manifest lists (the
    # table is loaded once, handed from the check before the decision to the switch).
    # The catalog's and delta-rs's own reads of table metadata are theirs to make.
    gets = Counter(p for m, p in many_log if m == "GET" and p.strip("/").count("/")
                   and ("/_tpc" in p or p.endswith(".avro")))
    assert [p for p, k in gets.items() if k > 1] == []
    # A record is read with one GET (no HEAD for its size first), and a file the
    # commit writes is not asked about (whether it exists, its length).
    assert [p for m, p in many_log if m == "HEAD" and ("/_tpc" in p or p.endswith(".avro"))
            and ("GET", p) not in many_log] == []


@pytest.mark.parametrize("fmt", ["iceberg", "delta"])
def test_a_commit_loads_its_table_once_unless_it_loses_a_race(fmt, tmp_path, proxy,
                                                              s3_bucket):
    """The table the check before the decision loaded is handed to the switch (one
    catalog round trip, or one Delta log read, per commit).  A table changed between
    the two (a foreign append) still makes the switch's commit lose its race and load
    again: the handed table is never trusted for more than a base."""
    sink = _sink(fmt, tmp_path, proxy, s3_bucket, "loads")
    txn, _ = _stage(sink, "2026-01-01", 1)
    assert sink.commit(txn).outcome == "committed"
    txn, _ = _stage(sink, "2026-01-02", 2)
    sink = _sink(fmt, tmp_path, proxy, s3_bucket, "loads")
    real, loads = sink.table_target.load_table, []
    sink.table_target.load_table = lambda *a, **k: loads.append(1) or real(*a, **k)
    assert sink.commit(txn).outcome == "committed"
    assert len(loads) == 1
    assert sink.table_target.take_table(txn.txn_id) is not None and len(loads) == 2  # gone

    # A foreign append between the check and the switch: the switch's commit on the
    # handed (now stale) table loses, reloads, and the epoch still lands once.
    txn, _ = _stage(sink, "2026-01-03", 1)
    loads.clear()

    def foreign_append(_name: str) -> None:
        other = rows("2026-01-09", [900])
        if fmt == "iceberg":
            real().append(other)
        else:
            from deltalake import write_deltalake

            write_deltalake(sink.table_target._table_uri(), other, mode="append",
                            partition_by=["epoch"],
                            storage_options=sink.table_target._delta_options)

    with armed("commit.after_decision", foreign_append):
        assert sink.commit(txn).outcome == "committed"
    if fmt == "iceberg":  # the snapshot it was built on is asserted: lost, reloaded
        assert len(loads) == 2
    # (Delta resolves a foreign append to another partition as no conflict.)
    table = sink.table_target.pyarrow_dataset().to_table() if fmt == "delta" \
        else real().scan().to_arrow()
    got = sorted(zip(table["epoch"].to_pylist(), table["id"].to_pylist(), strict=True))
    assert got == [("2026-01-01", 0), ("2026-01-01", 1), ("2026-01-02", 0), ("2026-01-02", 1),
                   ("2026-01-02", 10), ("2026-01-02", 11), ("2026-01-03", 0),
                   ("2026-01-03", 1), ("2026-01-09", 900)]


@pytest.mark.parametrize("fmt", ["iceberg", "delta"])
@pytest.mark.parametrize("damage", ["missing", "altered", "garbage"])
def test_a_damaged_sidecar_is_never_used_and_the_commit_is_the_same(
        fmt, damage, tmp_path, proxy, s3_bucket, caplog):
    """A missing or damaged sidecar: the commit reads the footers instead (in parallel)
    and makes the very same table content.  An altered one (rows doubled, valid JSON)
    is refused by the manifest's digest: never used."""
    sink = _sink(fmt, tmp_path, proxy, s3_bucket, "damaged")
    txn, manifest = _stage(sink, "2026-01-01", 4)
    path = sink.storage.join(sink.layout.staging(txn.epoch, txn.attempt), TABLE_STATS_NAME)
    doc = json.loads(sink.storage.read_bytes(path))
    if damage == "missing":
        sink.storage.delete_files([path])
    elif damage == "altered":
        for entry in doc["files"].values():
            entry["rows"] = 1000
            if "iceberg" in entry:
                entry["iceberg"]["record_count"] = 1000
        sink.storage.put(path, json.dumps(doc).encode())
    else:
        sink.storage.put(path, b"{not json")
    proxy.reset_stats()
    assert _sink(fmt, tmp_path, proxy, s3_bucket, "damaged").commit(txn).outcome == "committed"
    touched = {path for _, path in proxy.seen if "/part-" in path}
    assert len(touched) == 4  # the fallback read every footer instead
    if fmt == "iceberg":
        table = sink.table_target.load_table()
        files = list(table.inspect.files().to_pylist())
        assert sorted(f["record_count"] for f in files) == [2, 2, 2, 2]
        assert len(table.scan().to_arrow()) == 8
    else:
        dataset = sink.table_target.pyarrow_dataset()
        assert dataset.count_rows() == 8
        adds = pa.table(sink.table_target.load_table().get_add_actions(flatten=True)).to_pylist()
        assert sorted(a["num_records"] for a in adds) == [2, 2, 2, 2]


@pytest.mark.parametrize("fmt", ["iceberg", "delta"])
def test_a_table_changed_after_precommit_is_still_refused_before_the_decision(
        fmt, tmp_path, proxy, s3_bucket):
    """The sealed statistics name the table state pre-commit checked; a schema change
    after it makes the commit check again (from the footers) and refuse, undecided."""
    sink = _sink(fmt, tmp_path, proxy, s3_bucket, "changed")
    txn, _ = _stage(sink, "2026-01-01", 1)
    assert sink.commit(txn).outcome == "committed"
    txn, _ = _stage(sink, "2026-01-02", 3)
    if fmt == "iceberg":
        from pyiceberg.types import StringType

        table = sink.table_target.load_table()
        with table.update_schema(allow_incompatible_changes=True) as update:
            update.add_column("required_col", StringType(), required=True)
    else:
        from deltalake import write_deltalake

        # Another writer replaces the schema: "value" is a long now.
        other = pa.table({"id": pa.array([99], pa.int64()), "value": pa.array([7], pa.int64()),
                          "epoch": pa.array(["2026-01-03"])})
        write_deltalake(sink.table_target._table_uri(), other, mode="overwrite",
                        schema_mode="overwrite", partition_by=["epoch"],
                        storage_options=sink.table_target._delta_options)
    with pytest.raises(TableSchemaError) as err:
        _sink(fmt, tmp_path, proxy, s3_bucket, "changed").commit(txn)
    assert "Nothing was decided" in str(err.value)
    assert sink.ledger.read(txn.epoch, txn.attempt, DECISION) is None
