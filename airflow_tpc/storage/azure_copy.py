"""Azure promotion and ranged reads (mixins of :class:`~.azure.AzureStorage`).

Copies are server-side (``Copy Blob``: ``start_copy_from_url``), many at once, each
conditional on the ETag its source had when it was verified (``x-ms-source-if-match``):
a source rewritten between verification and copy is refused by the service itself.
Unlike S3, a copy gets an ETag of its own, so the guard is the only check there is,
and Azurite enforces it (docs/PROTOCOL.md's table of stores).
"""

from __future__ import annotations

import io
import time
from typing import Any

from ..errors import StorageError
from .azure_options import error_code
from .base import copy_in_parallel

#: How long a copy the service reports as pending (a large blob) may take to finish.
COPY_DEADLINE_S = 3600.0


class AzureCopies:
    """:meth:`copy_many`; the storage supplies ``_blob``, ``_fail``, ``_wrote``, ``uri``,
    ``delete_files`` and ``copy_workers``."""

    copy_workers: int

    def copy_many(self, pairs: list[tuple[str, str]], sizes: dict[str, int] | None = None,
                  etags: dict[str, str] | None = None) -> None:
        """Copy each (src, dst) server-side; a source whose ETag is no longer the one in
        ``etags`` is refused (StorageError) and nothing of it is published."""
        self._wrote()
        if not pairs:
            return
        etags = etags or {}
        copy_in_parallel(pairs, self.copy_workers,
                         lambda src, dst: self._copy_one(src, dst, etags.get(src)), "tpc-azcopy")

    def _copy_one(self, src: str, dst: str, etag: str | None) -> None:
        from azure.core import MatchConditions

        source = self._blob(src)
        target = self._blob(dst)
        guard: dict[str, Any] = {}
        if etag is not None:
            guard = {"source_etag": f'"{etag}"',
                     "source_match_condition": MatchConditions.IfNotModified}
        try:
            answer = target.start_copy_from_url(source.url, **guard)
            status = answer.get("copy_status")
            deadline = time.monotonic() + COPY_DEADLINE_S
            while status == "pending" and time.monotonic() < deadline:
                # A pending copy is the service's work, not ours to order: poll its state.
                time.sleep(0.05)
                status = target.get_blob_properties().copy.status
        except Exception as exc:  # noqa: BLE001 - never a client traceback as the message
            if etag is not None and error_code(exc) in ("SourceConditionNotMet",
                                                        "ConditionNotMet") \
                    or type(exc).__name__ == "ResourceModifiedError":
                raise self._changed(src, etag) from None
            raise self._fail("copy", src, exc) from None
        if status != "success":
            self.delete_files([dst])
            raise StorageError(f"Azure copy of {self.uri(src)} ended {status!r}; nothing of it "
                               "was published")

    def _changed(self, src: str, etag: str | None) -> StorageError:
        return StorageError(f"{self.uri(src)} changed after it was verified (the manifest "
                            f"says ETag {etag}); refusing to publish it")


class RangedBlob(io.RawIOBase):
    """A seekable read-only file over one blob: each read is a ranged GET conditional on
    the ETag the blob had when it was opened (a rewrite mid-read fails the read rather
    than mixing two versions).  Wrapped in :class:`io.BufferedReader` by the store."""

    def __init__(self, client: Any, size: int, etag: str, fail: Any) -> None:
        super().__init__()
        self._client, self._size, self._etag, self._fail = client, size, etag, fail
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, buffer: Any) -> int:
        from azure.core import MatchConditions

        want = min(len(buffer), self._size - self._pos)
        if want <= 0:
            return 0
        try:
            data = self._client.download_blob(
                offset=self._pos, length=want, etag=self._etag,
                match_condition=MatchConditions.IfNotModified).readall()
        except Exception as exc:  # noqa: BLE001
            raise self._fail(exc) from None
        buffer[:len(data)] = data
        self._pos += len(data)
        return len(data)
