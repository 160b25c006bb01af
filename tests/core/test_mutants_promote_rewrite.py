"""A staged file rewritten between promote's verification and its server-side copy is
never published: the copy carries the verified ETag (``CopySourceIfMatch``).

Mutation testing (docs/mutation.md) found that dropping those ETags from
``CopyThenSwapMarker.switch`` survived: moto does not enforce the condition, and the
SeaweedFS test of it calls the store directly, not through a commit.  Here the whole
commit runs on SeaweedFS (which enforces it), and the rewrite lands at the crashpoint
just before the copies, the window a straggling task has.
"""

from __future__ import annotations

import hashlib

import pytest

from airflow_tpc import Sink
from airflow_tpc.core.faults import armed
from airflow_tpc.errors import StorageError

from .helpers import committed_contents, stage


@pytest.mark.parametrize("writer_md5", [False, True], ids=["listed-etag", "writers-md5"])
def test_a_staged_file_rewritten_before_the_copy_is_never_published(seaweed, writer_md5):
    """``writers-md5``: the checksum the Spark writer computed while writing (``md5:``),
    which on S3 is the object's ETag as well, guards the copy the same way."""
    sink = Sink(f"{seaweed.new_prefix()}/t", "rewrite", storage_options=seaweed.s3_options())
    txn, _ = stage(sink, "0", {"p.parquet": b"verified"}, precommit=False)
    sums = {"p.parquet": "md5:" + hashlib.md5(b"verified").hexdigest()} if writer_md5 else None
    manifest = sink.precommit(txn, checksums=sums)
    assert manifest.files[0].checksum.startswith("md5:" if writer_md5 else "etag:")
    staged = sink.storage.join(sink.layout.staging("0", txn.attempt), "p.parquet")

    def straggler(_step: str) -> None:
        sink.storage.put(staged, b"rewrote!")  # same size, other bytes

    with armed("promote.before_copy", straggler), \
            pytest.raises(StorageError, match="changed after it was verified"):
        sink.commit(txn)
    assert committed_contents(sink) == {}
    assert not [o for o in sink.storage.list(sink.layout.published_dir("0"))
                if o.path.endswith("p.parquet")]
