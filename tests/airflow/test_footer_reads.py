"""Each staged Parquet footer of a table target is read once (issue 32 §4, docs/tables.md).

The real path of an Airflow run, Iceberg and Delta: the job seals with the core alone
(``JobTransaction.precommit``, as under spark-submit; once with Spark's own writer),
the sensor's check runs through
the hook (``TpcHook.check_precommit``: the poke, and a deferred sensor's second look),
the commit task's hook commits the pointer.  Footer reads are counted by wrapping the
one function that reads a staged file's footer (:func:`airflow_tpc.core.footer.read_footer`):
the real reads of the real files, nothing mocked.  A sealed-statistics file changed
after the sensor sealed it is never trusted: the commit reads the footers itself, and
the table holds the true statistics.
"""

from __future__ import annotations

import json
import os
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_tpc.core import footer
from airflow_tpc.core.staging import FOOTERS_NAME, TABLE_STATS_NAME, digest_bytes
from airflow_tpc.spark.context import JobTransaction, build_payload
from airflow_tpc.tables.staged import norm_uri
from tests.tables.conftest import spark  # noqa: F401  (the tables' SparkSession fixture)

FORMATS = ["iceberg", "delta"]
CONN = "tpc_footers_catalog"


@pytest.fixture()
def reads(monkeypatch) -> Counter:
    """Footer reads per staged file (normalised URI), counted where they happen."""
    counted: Counter = Counter()
    real = footer.read_footer

    def counting(stream, uri):
        counted[norm_uri(uri)] += 1
        return real(stream, uri)

    monkeypatch.setattr(footer, "read_footer", counting)
    return counted


@pytest.fixture(params=FORMATS)
def hook_args(request, tmp_path, monkeypatch, airflow_db) -> dict:
    """The sink arguments a DAG's tasks give their hook: an Iceberg table of a SQL
    catalog named by an ``iceberg_catalog`` connection, or a Delta table's location."""
    if request.param == "delta":
        return {"target": f"delta+file://{tmp_path}/delta/events", "namespace": "footers"}
    (tmp_path / "warehouse").mkdir()
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN.upper()}", json.dumps({
        "conn_type": "iceberg_catalog", "host": f"sqlite:///{tmp_path}/catalog.db",
        "schema": f"file://{tmp_path}/warehouse", "extra": {"type": "sql"}}))
    return {"target": "iceberg://footcat/analytics.events", "namespace": "footers",
            "catalog_conn_id": CONN}


def _hook(args: dict):
    """A task's hook, as each task (its own process) builds it."""
    from airflow_tpc.airflow.hooks.tpc import TpcHook

    return TpcHook(**args)


def _batch(epoch: str, ids: list[int]) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()),
                     "value": pa.array([f"v{i}" for i in ids], pa.string()),
                     "epoch": pa.array([epoch] * len(ids), pa.string())})


def _job(args: dict, epoch: str, batches: list[list[int]]) -> tuple[dict, list[str]]:
    """Submit's begin, then the job: Parquet files written into its output (as Spark's
    native writer leaves them: no row counts measured) and sealed by the core alone.
    Returns the transaction's XCom and the staged files' URIs."""
    txn = _hook(args).get_sink().begin(epoch)
    job = JobTransaction.from_payload(build_payload(txn, promotion="manifest",
                                                    table=args["target"]))
    out = norm_uri(job.output_uri)
    os.makedirs(out, exist_ok=True)
    uris = []
    for n, ids in enumerate(batches):
        path = os.path.join(out, f"part-{n:05d}.parquet")
        pq.write_table(_batch(epoch, ids), path)
        uris.append(path)
    assert job.precommit() is not None
    return txn.to_dict(), uris


def _sensor(args: dict, txn_doc: dict) -> dict:
    """The sensor's poke (a deferred sensor looks twice: the trigger, then
    execute_complete), and the pointer it pushes."""
    hook = _hook(args)
    check = hook.check_precommit(txn_doc)
    assert check.status == "ready", check.message
    again = _hook(args).check_precommit(txn_doc)
    assert again.status == "ready", again.message
    return hook.precommit_pointer(check)


def _table_rows(args: dict, epoch: str) -> dict[str, int]:
    """Each data file of ``epoch`` in the table and the rows its metadata says."""
    sink = _hook(args).get_sink()
    if args["target"].startswith("iceberg"):
        table = sink.table_target.load_table()
        files = table.inspect.files().to_pylist()
        return {norm_uri(f["file_path"]): f["record_count"] for f in files
                if f["partition"]["epoch"] == epoch}
    from deltalake import DeltaTable

    location = norm_uri(args["target"].removeprefix("delta+"))
    actions = pa.table(DeltaTable(location).get_add_actions(flatten=True)).to_pylist()
    return {os.path.join(location, a["path"]): a["num_records"] for a in actions
            if a["partition.epoch"] == epoch}


def _stats_path(args: dict, txn_doc: dict) -> str:
    sink = _hook(args).get_sink()
    return sink.storage.join(sink.layout.sealed(txn_doc["epoch"], txn_doc["attempt"]),
                             TABLE_STATS_NAME)


def test_each_staged_footer_is_read_once_from_the_jobs_seal_to_the_table(hook_args, reads):
    # The first commit creates the table from the staged schema (the footers the job kept).
    first, first_uris = _job(hook_args, "2026-11-01", [[1, 2], [3]])
    assert _hook(hook_args).commit_pointer(_sensor(hook_args, first)).result.outcome \
        == "committed"
    assert dict(reads) == {uri: 1 for uri in first_uris}, dict(reads)
    assert _table_rows(hook_args, "2026-11-01") == dict(zip(first_uris, [2, 1], strict=True))
    reads.clear()

    txn_doc, uris = _job(hook_args, "2026-11-02", [[10, 11, 12], [13], [14, 15]])
    pointer = _sensor(hook_args, txn_doc)
    outcome = _hook(hook_args).commit_pointer(pointer)

    assert outcome.result.outcome == "committed"
    assert dict(reads) == {uri: 1 for uri in uris}, dict(reads)
    assert _table_rows(hook_args, "2026-11-02") == dict(zip(uris, [3, 1, 2], strict=True))
    assert pointer["rows"] == 6  # the manifest still says the rows the job sealed


def test_a_real_spark_jobs_footers_are_read_once(hook_args, reads, spark):  # noqa: F811
    """The job as under spark-submit: Spark's own Parquet writer (part files, ``_SUCCESS``,
    ``.crc`` files) into the transaction's output, sealed by ``txn.precommit()``."""
    counted = []
    for epoch, ids in (("2026-11-01", [1, 2, 3]), ("2026-11-02", [4, 5, 6, 7, 8])):
        txn = _hook(hook_args).get_sink().begin(epoch)
        job = JobTransaction.from_payload(build_payload(txn, promotion="manifest",
                                                        table=hook_args["target"]))
        df = spark.createDataFrame([(i, f"v{i}") for i in ids], "id long, value string")
        job.with_epoch_column(df).repartition(2).write.mode("overwrite") \
            .parquet(job.output_uri)
        manifest = job.precommit()
        _hook(hook_args).commit_pointer(_sensor(hook_args, txn.to_dict()))
        staging = norm_uri(job.staging_uri)
        uris = [os.path.join(staging, f.path) for f in manifest.files]
        counted.append((dict(reads), {uri: 1 for uri in uris}))
        assert sum(_table_rows(hook_args, epoch).values()) == len(ids)
        reads.clear()
    for got, want in counted:  # the table's creation, then a commit to it
        assert got == want


@pytest.mark.parametrize("damage", ["edited", "another_manifest", "garbage",
                                    "edited_no_job_footers"])
def test_changed_sealed_statistics_are_never_trusted(hook_args, reads, damage):
    first, _ = _job(hook_args, "2026-11-01", [[1, 2]])
    _hook(hook_args).commit_pointer(_sensor(hook_args, first))
    txn_doc, uris = _job(hook_args, "2026-11-02", [[10, 11, 12], [13]])
    pointer = _sensor(hook_args, txn_doc)
    path = _stats_path(hook_args, txn_doc)
    with open(path, "rb") as fh:
        doc = json.load(fh)
    assert doc["manifest"] == pointer["digest"]  # the sensor sealed them for this manifest
    if damage == "edited_no_job_footers":  # and nothing kept by the job to fall back on
        os.remove(os.path.join(os.path.dirname(path), FOOTERS_NAME))
    if damage.startswith("edited"):  # wrong statistics, well-formed, naming the manifest
        for entry in doc["files"].values():
            entry["rows"] = 1000
            if entry.get("iceberg"):
                entry["iceberg"]["record_count"] = 1000
        raw = json.dumps(doc).encode()
    elif damage == "another_manifest":  # sealed properly, but for another manifest
        doc["manifest"] = "sha256:" + "0" * 64
        rest = {k: v for k, v in doc.items() if k != "seal"}
        doc["seal"] = digest_bytes(json.dumps(rest, sort_keys=True,
                                              separators=(",", ":")).encode())
        raw = json.dumps(doc).encode()
    else:
        raw = b"{not json"
    with open(path, "wb") as fh:
        fh.write(raw)
    reads.clear()

    assert _hook(hook_args).commit_pointer(pointer).result.outcome == "committed"

    # the table holds the true counts, and the commit read each footer itself, once
    assert _table_rows(hook_args, "2026-11-02") == dict(zip(uris, [3, 1], strict=True))
    assert dict(reads) == {uri: 1 for uri in uris}, dict(reads)
