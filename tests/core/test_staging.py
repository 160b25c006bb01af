"""Staging: unique per attempt, Spark's bookkeeping ignored, configurable root."""

from __future__ import annotations

from airflow_tpc import Sink, SinkConfig

from .helpers import assert_invariant, stage, write_staged


def test_staging_unique_per_attempt_and_epoch(store):
    target, options = store
    sink = Sink(target, "st", storage_options=options)
    uris = {sink.begin(e).staging_uri for e in ("1", "1", "2", "1")}
    assert len(uris) == 4
    # beside the target, never inside it (tests/core/test_glob_safe.py)
    assert all("/_tpc_staging/target/epoch=" in u or "/_tpc_staging/events/epoch=" in u
               for u in uris)


def test_spark_bookkeeping_is_not_in_the_manifest(store):
    target, options = store
    sink = Sink(target, "st", storage_options=options)
    txn = sink.begin("1")
    write_staged(sink, txn, {
        "part-0.parquet": b"data", "d=1/part-1.parquet": b"more",
        "_SUCCESS": b"", "_temporary/0/task/part-9.parquet": b"half",
        ".part-0.parquet.crc": b"crc", "d=1/.part-1.parquet.crc": b"crc",
    })
    manifest = sink.precommit(txn)
    assert [f.path for f in manifest.files] == ["d=1/part-1.parquet", "part-0.parquet"]
    assert sink.precommit(txn).digest == manifest.digest  # idempotent
    sink.commit(txn)
    assert_invariant(sink, {"1": [b"data", b"more"]}, open_staging_ok=False)


def test_configured_staging_root_on_same_store(tmp_path):
    sink = Sink(str(tmp_path / "t"), "st",
                config=SinkConfig(staging_root=str(tmp_path / "scratch")))
    txn, _ = stage(sink, "1", {"a.parquet": b"A"})
    assert txn.staging_uri.startswith(f"file://{tmp_path}/scratch/epoch=1/")
    sink.commit(txn)
    assert_invariant(sink, {"1": [b"A"]}, open_staging_ok=False)
    assert not list((tmp_path / "scratch").rglob("*.parquet"))


def test_precommit_takes_the_job_sides_listing(tmp_path):
    """The job side hands over the listing it made (with its writer checksums), so
    staging is listed once per pre-commit, not once per layer."""
    from airflow_tpc import Sink

    from .helpers import write_staged

    sink = Sink(str(tmp_path / "t"), "seam")
    txn = sink.begin("1")
    write_staged(sink, txn, {"a.parquet": b"aaa", "p=1/b.parquet": b"bb"})
    staging = sink.layout.staging("1", 1)
    listing = sink.storage.list(staging)
    lists: list[str] = []
    real_list = sink.storage.list

    def counted(prefix):
        lists.append(prefix)
        return real_list(prefix)

    sink.storage.list = counted
    try:
        manifest = sink.precommit(txn, listing=listing,
                                  checksums={"a.parquet": "md5:47bce5c74f589f4867dbd57e9ca9f808"})
    finally:
        del sink.storage.list
    assert [p for p in lists if p.rstrip("/") == staging.rstrip("/")] == []
    assert {f.path: f.size for f in manifest.files} == {"a.parquet": 3, "p=1/b.parquet": 2}
    assert manifest.files[0].checksum == "md5:47bce5c74f589f4867dbd57e9ca9f808"
    sink.commit(txn, expected_digest=manifest.digest)  # the commit verifies it all the same


def test_the_streamed_fingerprints_digest_is_the_sealed_documents():
    """A commit checks staging's status against the sealed fingerprints by digest, hashed
    in pieces; it must be the digest of the document pre-commit seals, byte for byte,
    whatever the names (non-ASCII, quotes, more than one piece)."""
    from airflow_tpc.core.staging import digest_bytes, fingerprints_digest, fingerprints_doc
    from airflow_tpc.storage import ObjectInfo

    for count in (1, 4096, 9001):
        staged = {f"d=é{i % 7}/\"p\\{i}\u2603.parquet": ObjectInfo(
            f"/s/{i}", i, None, False, 1, f"1:{i}:{i}:9:9") for i in range(count)}
        assert fingerprints_digest(staged) == digest_bytes(fingerprints_doc(staged))
    assert fingerprints_digest({}) is None and fingerprints_doc({}) is None
