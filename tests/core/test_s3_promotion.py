"""S3 specifics: multipart server-side copy, and what a plain lister sees mid-promotion."""

from __future__ import annotations

import os

from airflow_tpc import Sink
from airflow_tpc.core.faults import armed
from airflow_tpc.storage import S3Storage

from .helpers import assert_invariant, committed_contents, plain_listing, stage


def test_multipart_copy_above_threshold(s3_options, s3_bucket):
    storage = S3Storage(s3_options, multipart_threshold=5 * 1024**2,
                        multipart_chunk=5 * 1024**2)
    sink = Sink(f"s3://{s3_bucket}/big", "mp", storage=storage)
    big = os.urandom(11 * 1024**2)  # 3 parts: 5 + 5 + 1 MiB
    txn, manifest = stage(sink, "1", {"big.parquet": big, "small.parquet": b"s"})
    sink.commit(txn, expected_digest=manifest.digest)
    assert_invariant(sink, {"1": [big, b"s"]}, open_staging_ok=False)
    published = [o for o in storage.list(sink.layout.published_dir("1"))
                 if o.path.endswith("big.parquet")]
    assert published[0].etag.endswith("-3")  # really assembled from 3 copied parts


def test_plain_lister_vs_read_committed_during_promotion(s3_options, s3_bucket):
    """Documented in PROTOCOL.md §8: a plain S3 lister may see both attempts mid-way."""
    sink = Sink(f"s3://{s3_bucket}/mid", "mid", storage_options=s3_options)
    old, _ = stage(sink, "1", {"a.parquet": b"old"})
    sink.commit(old)
    new, _ = stage(sink, "1", {"a.parquet": b"new"})
    observed = {}

    def look(_step):
        observed["plain"] = plain_listing(sink)["1"]
        observed["committed"] = committed_contents(sink)["1"]

    with armed("promote.before_marker", look):
        sink.commit(new)
    assert observed["plain"] == [b"new", b"old"]      # a mix, for a plain lister
    assert observed["committed"] == [b"old"]          # read-committed: still the old epoch
    assert_invariant(sink, {"1": [b"new"]}, open_staging_ok=False)


def test_local_swap_is_atomic_for_plain_listers(tmp_path):
    sink = Sink(str(tmp_path / "t"), "swap")
    old, _ = stage(sink, "1", {"a.parquet": b"old", "b.parquet": b"old-b"})
    sink.commit(old)
    new, _ = stage(sink, "1", {"a.parquet": b"new"})
    seen = {}

    def look(step):
        seen[step] = plain_listing(sink)["1"]

    with armed("promote.before_swap", look), armed("promote.after_swap", look):
        sink.commit(new)
    assert seen == {"promote.before_swap": [b"old", b"old-b"], "promote.after_swap": [b"new"]}
