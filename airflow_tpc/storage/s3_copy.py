"""S3 promotion: server-side copies, many at once, each conditional on the ETag its
source had when it was verified (a mixin of :class:`~.s3.S3Storage`)."""

from __future__ import annotations

from typing import Any

from ..errors import StorageError
from .base import copy_in_parallel
from .s3_errors import _precondition_failed

#: Objects above this size are copied with boto3's managed multipart copy (s3transfer's
#: ``UploadPartCopy``; S3's single CopyObject limit is 5 GiB).
MULTIPART_COPY_THRESHOLD = 5 * 1024**3
MULTIPART_CHUNK = 512 * 1024**2


class S3Copies:
    """:meth:`copy_many` and its parts; the storage supplies ``client``, ``_split``,
    ``_fail``, ``_wrote``, ``uri``, ``delete_files`` and the copy settings."""

    client: Any
    copy_workers: int
    multipart_threshold: int
    multipart_chunk: int

    def copy_many(self, pairs: list[tuple[str, str]], sizes: dict[str, int] | None = None,
                  etags: dict[str, str] | None = None) -> None:
        """``etags``: the ETag each source had when it was verified.  A single-part copy's
        ETag is its source's, so a source rewritten between verification and copy is
        caught by the copy's own answer (no extra request) and the copy is refused."""
        self._wrote()
        if not pairs:
            return
        sizes = sizes or {}
        etags = etags or {}
        copy_in_parallel(pairs, self.copy_workers, lambda src, dst: self._copy_one(
            src, dst, sizes.get(src), etags.get(src)), "tpc-copy")

    def _copy_one(self, src: str, dst: str, size: int | None,
                  etag: str | None = None) -> None:
        sbucket, skey = self._split(src)
        dbucket, dkey = self._split(dst)
        try:
            if size is not None and size > self.multipart_threshold:
                self._multipart_copy(sbucket, skey, dbucket, dkey, size, etag)
                return
            guard = {"CopySourceIfMatch": f'"{etag}"'} if etag is not None else {}
            answer = self.client.copy_object(
                Bucket=dbucket, Key=dkey, CopySource={"Bucket": sbucket, "Key": skey}, **guard)
        except StorageError:
            raise
        except Exception as exc:  # noqa: BLE001
            if _precondition_failed(exc) and etag is not None:
                raise self._changed(src, etag) from None
            raise self._fail("copy", src, exc) from None
        copied = str(answer.get("CopyObjectResult", {}).get("ETag", "")).strip('"')
        if etag is not None and copied != etag:
            # A store that ignored the guard (moto) copied another version: take that
            # copy back, so nothing unverified is left where readers list.
            self.delete_files([dst])
            raise self._changed(src, etag, copied)

    def _changed(self, src: str, etag: str, now: str | None = None) -> StorageError:
        seen = f"ETag {now}, " if now else ""
        return StorageError(f"{self.uri(src)} changed after it was verified ({seen}the "
                            f"manifest says {etag}); refusing to publish it")

    def _multipart_copy(self, sbucket: str, skey: str, dbucket: str, dkey: str, size: int,
                        etag: str | None) -> None:
        """One object above ``multipart_threshold`` through boto3's managed copy
        (s3transfer): parallel ``UploadPartCopy`` of ``multipart_chunk`` ranges, the
        upload aborted on failure.  Every part is conditional on the source's ETag
        (``CopySourceIfMatch``): the verified one when the manifest has it, else the
        one s3transfer reads with a HEAD first, so a source rewritten mid-copy fails
        the copy instead of publishing a mix of two versions."""
        from s3transfer.manager import TransferConfig, TransferManager

        config = TransferConfig(multipart_threshold=self.multipart_threshold + 1,
                                multipart_chunksize=self.multipart_chunk,
                                max_request_concurrency=8)
        with TransferManager(self.client, config) as manager:
            manager.copy({"Bucket": sbucket, "Key": skey}, dbucket, dkey,
                         subscribers=[_KnownSource(size, etag)]).result()


class _KnownSource:
    """Tells s3transfer what the manifest already knows (size, ETag), so it does not
    HEAD the source; an s3transfer subscriber (duck-typed: the job side never imports
    s3transfer)."""

    def __init__(self, size: int, etag: str | None) -> None:
        self.size, self.etag = size, etag

    def on_queued(self, future: Any, **kwargs: Any) -> None:
        future.meta.provide_transfer_size(self.size)
        if self.etag is not None:
            future.meta.provide_object_etag(f'"{self.etag}"')

    def on_progress(self, future: Any, bytes_transferred: int, **kwargs: Any) -> None:
        pass

    def on_done(self, future: Any, **kwargs: Any) -> None:
        pass
