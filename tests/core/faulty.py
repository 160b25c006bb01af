"""A real store with writes refused on demand (the storage "refuses writes" of the scenarios).

Not a mock: every call goes to the real local directory or moto's S3 server,
except those the test tells it to refuse.
"""

from __future__ import annotations

from collections.abc import Callable

from airflow_tpc.errors import StorageError
from airflow_tpc.storage import Storage

WRITES = ("put", "put_if_absent", "delete_prefix", "delete_files", "replace_dir", "copy_many")


class FaultyStorage:
    def __init__(self, inner: Storage) -> None:
        self.inner = inner
        self.refuse: Callable[[str, tuple], bool] = lambda op, args: False
        self.refused = 0

    def __getattr__(self, name):
        attr = getattr(self.inner, name)
        if name not in WRITES:
            return attr

        def guarded(*args, **kwargs):
            if self.refuse(name, args):
                self.refused += 1
                raise StorageError(f"injected: store refused {name}")
            return attr(*args, **kwargs)

        return guarded
