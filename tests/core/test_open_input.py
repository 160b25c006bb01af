"""Ranged reads (``Storage.open_input``): a Parquet footer is read from the tail of
the object, on local disk and on S3, and a store without them says so."""

from __future__ import annotations

import io

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_tpc.errors import UnsupportedStorage
from airflow_tpc.storage import LocalStorage, Storage, open_storage


def parquet_bytes(n: int) -> bytes:
    buf = io.BytesIO()
    pq.write_table(pa.table({"id": list(range(n)), "pad": ["x" * 100] * n}), buf)
    return buf.getvalue()


def test_a_footer_is_read_through_open_input_on_every_store(store):
    target, options = store
    storage, root = open_storage(target, options)
    path = storage.join(root, "part-0.parquet")
    storage.put(path, parquet_bytes(5000))
    with storage.open_input(path) as fh:
        assert pq.read_metadata(fh).num_rows == 5000


def test_a_store_without_ranged_reads_refuses(tmp_path):
    local = LocalStorage()

    class Minimal(Storage):
        scheme = "file"
        uri = local.uri
        read_bytes = local.read_bytes
        list = local.list
        list_dirs = local.list_dirs
        iter_chunks = local.iter_chunks
        put = local.put
        put_if_absent = local.put_if_absent
        delete_prefix = local.delete_prefix
        delete_files = local.delete_files

    with pytest.raises(UnsupportedStorage, match="no ranged reads"):
        Minimal().open_input(str(tmp_path / "x.parquet"))
