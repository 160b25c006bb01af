"""Storage backends: pick one from a target URI."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlparse

from ..errors import UnsupportedStorage
from .azure import AzureStorage
from .azure_options import AZURE_SCHEMES, parse_azure_uri
from .base import ObjectInfo, StatusDigest, Storage
from .local import LocalStorage
from .s3 import S3Storage

__all__ = ["ObjectInfo", "StatusDigest", "Storage", "LocalStorage", "S3Storage", "AzureStorage",
           "open_storage", "storage_class"]

SUPPORTED = "local paths/file://, s3://, az:// and abfs[s]://"
#: Why gs:// is refused (docs/PROTOCOL.md, table of stores): the decision needs a
#: conditional create the store enforces, and no emulator available to the tests does.
GCS_REFUSED = (
    "{scheme}:// (Google Cloud Storage) has no exactly-once backend in airflow-tpc: its "
    "decision would be an upload with ifGenerationMatch=0 and its copies guarded by "
    "ifSourceGenerationMatch, but no GCS emulator available to the tests enforces "
    "ifGenerationMatch, so that backend could not be proven. Use DeliveryGuarantee."
    "AT_LEAST_ONCE to write it without a two-phase commit (docs/PROTOCOL.md, stores).")


def _refuse(scheme: str) -> UnsupportedStorage:
    if scheme in ("gs", "gcs"):
        return UnsupportedStorage(GCS_REFUSED.format(scheme=scheme))
    return UnsupportedStorage(
        f"{scheme}:// has no tested exactly-once backend in airflow-tpc (supported: "
        f"{SUPPORTED}). Use DeliveryGuarantee.AT_LEAST_ONCE to write it without a "
        "two-phase commit, or contribute a backend with its conditional-write tests.")


def storage_class(uri: str) -> type[Storage]:
    """The store class a target URI names, to ask its capabilities (``takes_credentials``,
    ``spark_native``, ``spark_uri``...) without building a store or checking the URI;
    :func:`open_storage` does both."""
    scheme = urlparse(uri).scheme.lower() if isinstance(uri, str) else ""
    if scheme in ("s3", "s3a"):
        return S3Storage
    if scheme in ("", "file"):
        return LocalStorage
    if scheme in AZURE_SCHEMES:
        return AzureStorage
    raise _refuse(scheme)


def open_storage(uri: str, options: dict[str, Any] | None = None,
                 **kwargs: Any) -> tuple[Storage, str]:
    """Return ``(storage, store_path)`` for a target URI.

    Only stores with a tested exactly-once backend are accepted: a local
    absolute path / ``file://`` URI, ``s3://`` (``s3a://`` is read as S3), or Azure
    Blob Storage / ADLS Gen2 (``az://container/path``,
    ``abfs[s]://container@account.dfs.core.windows.net/path``).
    """
    if not isinstance(uri, str) or not uri or "\x00" in uri or "\n" in uri:
        raise UnsupportedStorage(f"target {uri!r} is not a path or URI (empty, or holds a NUL "
                                 "or newline)")
    try:
        uri.encode("utf-8")
    except UnicodeEncodeError:
        raise UnsupportedStorage(f"target {uri!r} is not valid UTF-8") from None
    parsed = urlparse(uri)
    scheme = parsed.scheme.lower()
    if scheme in ("", "file"):
        if scheme and parsed.netloc not in ("", "localhost"):
            # file://host/path names a file on another machine; reading it as /path
            # would write somewhere the user did not mean.
            raise UnsupportedStorage(f"target {uri!r} names host {parsed.netloc!r}; only local "
                                     "paths (file:///path or file://localhost/path) are "
                                     "supported")
        if scheme and (parsed.query or parsed.fragment or parsed.params):
            raise UnsupportedStorage(f"target {uri!r} has a query or fragment")
        path = parsed.path if scheme else uri
        if not path.startswith("/"):
            raise UnsupportedStorage(f"target {uri!r} must be an absolute path or file:// URI")
        import os

        return LocalStorage(), os.path.normpath(path)
    if scheme in ("s3", "s3a"):
        if not parsed.netloc:
            raise UnsupportedStorage(f"target {uri!r} has no bucket")
        if parsed.query or parsed.fragment or parsed.params or "@" in parsed.netloc:
            raise UnsupportedStorage(f"target {uri!r} has a query, fragment or user part; "
                                     "use s3://bucket/prefix (credentials come from a "
                                     "connection or the environment)")
        path = f"{parsed.netloc}/{parsed.path.strip('/')}".rstrip("/")
        return S3Storage(options, **kwargs), path
    if scheme in AZURE_SCHEMES:
        path, account, host = parse_azure_uri(uri, options)
        return AzureStorage(options, uri_scheme=scheme, uri_host=host, account=account,
                            **kwargs), path
    raise _refuse(scheme)
