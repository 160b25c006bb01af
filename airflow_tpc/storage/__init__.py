"""Storage backends: pick one from a target URI."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlparse

from ..errors import UnsupportedStorage
from .base import ObjectInfo, Storage
from .local import LocalStorage
from .s3 import S3Storage

__all__ = ["ObjectInfo", "Storage", "LocalStorage", "S3Storage", "open_storage"]


def open_storage(uri: str, options: dict[str, Any] | None = None,
                 **kwargs: Any) -> tuple[Storage, str]:
    """Return ``(storage, store_path)`` for a target URI.

    Only stores with a tested exactly-once backend are accepted: a local
    absolute path / ``file://`` URI, or ``s3://`` (``s3a://`` is read as S3).
    """
    parsed = urlparse(uri)
    scheme = parsed.scheme.lower()
    if scheme in ("", "file"):
        path = parsed.path if scheme else uri
        if not path.startswith("/"):
            raise UnsupportedStorage(f"target {uri!r} must be an absolute path or file:// URI")
        import os

        return LocalStorage(), os.path.normpath(path)
    if scheme in ("s3", "s3a"):
        if not parsed.netloc:
            raise UnsupportedStorage(f"target {uri!r} has no bucket")
        path = f"{parsed.netloc}/{parsed.path.strip('/')}".rstrip("/")
        return S3Storage(options, **kwargs), path
    raise UnsupportedStorage(
        f"{scheme}:// has no tested exactly-once backend in airflow-tpc (supported: local "
        "paths/file:// and s3://). Use DeliveryGuarantee.AT_LEAST_ONCE to write it without "
        "a two-phase commit, or contribute a backend with its conditional-write tests.")
