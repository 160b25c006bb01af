"""One request per metadata file a commit reads or writes on S3.

A commit's Iceberg metadata files — the manifest list and manifests it reads, the
manifests and manifest list it writes — are small (kilobytes) and read or written
whole (:mod:`.iceberg_io` holds their bytes).  pyiceberg's S3 FileIOs spend two or
three requests on each: pyarrow's ``S3FileSystem`` asks for the size (a HEAD) before
every GET, and writes through a multipart upload (create, upload part, complete),
each waiting for the one before.  Behind 50-100 ms of object-store latency those
were six round trips on the commit's sequential path.  Here each is one request:
a GET, or a single PutObject (atomic for readers, as the multipart upload was).

Only where that changes nothing but the request count: a FileIO of pyiceberg's own
(pyarrow's or fsspec's, not a custom ``py-io-impl``) whose S3 settings are exactly
an endpoint, a region and static keys (the catalog's vended ones, or configured).
Any other S3 setting — a role to assume, a profile, remote signing, anonymous
access, virtual addressing, server-side encryption, a proxy — is left to the
FileIO itself (:func:`direct_s3` returns None), as is every non-S3 location.  The
client is made from the FileIO's own properties (public pyiceberg names), so every
request still carries the table's own credentials; they live only in the client.
"""

from __future__ import annotations

import hashlib
import threading
from typing import Any
from urllib.parse import urlsplit

from ..storage.s3_errors import DENIED_CODES, _client_error_code, _is_cut_body

#: The FileIOs whose S3 requests a plain client reproduces (pyiceberg's own).
KNOWN_IOS = {"pyiceberg.io.pyarrow.PyArrowFileIO", "pyiceberg.io.fsspec.FsspecFileIO"}
#: Each setting by pyiceberg's names, the S3-specific one first (as pyiceberg reads them).
_SETTINGS = {
    "endpoint": ("s3.endpoint",),
    "key": ("s3.access-key-id", "client.access-key-id"),
    "secret": ("s3.secret-access-key", "client.secret-access-key"),
    "token": ("s3.session-token", "client.session-token"),
    "region": ("s3.region", "client.region"),
    "connect_timeout": ("s3.connect-timeout",),
    "read_timeout": ("s3.request-timeout",),
}
#: The ``s3.*`` / ``client.*`` properties a plain client reproduces; any other one
#: present means the FileIO does something more (a role, a signer, ...): left to it.
PLAIN_PROPERTIES = {name for names in _SETTINGS.values() for name in names}
S3_SCHEMES = ("s3", "s3a", "s3n")
#: Attempts of one request (the SDK's standard retry mode) and of a cut body.
MAX_ATTEMPTS = 10

_CLIENTS: dict[str, Any] = {}
_CLIENTS_LOCK = threading.Lock()


def _setting(props: dict[str, str], name: str) -> str | None:
    for key in _SETTINGS[name]:
        if props.get(key):
            return props[key]
    return None


def direct_s3(io: Any) -> DirectS3 | None:
    """A one-request-per-file S3 client for ``io`` (a pyiceberg FileIO), or None when
    ``io`` must make its requests itself (see the module)."""
    kind = f"{type(io).__module__}.{type(io).__qualname__}"
    props = dict(getattr(io, "properties", None) or {})
    if kind not in KNOWN_IOS:
        return None
    if any(k.startswith(("s3.", "client.")) and k not in PLAIN_PROPERTIES for k in props):
        return None
    settings = {name: _setting(props, name) for name in _SETTINGS}
    if not (settings["key"] and settings["secret"] and settings["region"]):
        return None  # credentials or region from the environment: the FileIO's own chain
    return DirectS3(_client(settings))


def _client(settings: dict[str, str | None]) -> Any:
    """One client per settings for the process (a client costs ~50 ms of CPU to make).
    The cache key is a digest: the secret is kept by the client alone."""
    key = hashlib.sha256(repr(sorted(settings.items())).encode()).hexdigest()
    with _CLIENTS_LOCK:
        client = _CLIENTS.get(key)
        if client is None:
            import boto3
            from botocore.config import Config

            timeouts = {k: float(settings[k]) for k in ("connect_timeout", "read_timeout")
                        if settings[k]}  # type: ignore[arg-type]
            # Path-style with an endpoint, as pyarrow's S3FileSystem addresses it
            # unless told otherwise (that setting is left to the FileIO, above).
            style = "path" if settings["endpoint"] else "auto"
            client = _CLIENTS[key] = boto3.session.Session().client(
                "s3", endpoint_url=settings["endpoint"],
                aws_access_key_id=settings["key"], aws_secret_access_key=settings["secret"],
                aws_session_token=settings["token"], region_name=settings["region"],
                config=Config(retries={"mode": "standard", "max_attempts": MAX_ATTEMPTS},
                              s3={"addressing_style": style}, max_pool_connections=16,
                              **timeouts))
        return client


class DirectS3:
    """GET and PUT of whole small objects, each one request (retried by the SDK; a
    body cut mid-stream is read again)."""

    def __init__(self, client: Any) -> None:
        self.client = client

    @staticmethod
    def handles(location: str) -> bool:
        return urlsplit(location).scheme in S3_SCHEMES

    @staticmethod
    def _split(location: str) -> tuple[str, str]:
        parts = urlsplit(location)
        return parts.netloc, parts.path.lstrip("/")

    def get(self, location: str) -> bytes:
        bucket, key = self._split(location)
        for attempt in range(MAX_ATTEMPTS):
            try:
                body = self.client.get_object(Bucket=bucket, Key=key)["Body"]
                return body.read()  # type: ignore[no-any-return]
            except Exception as exc:  # noqa: BLE001 - translated below, never echoed raw
                if _is_cut_body(exc) and attempt + 1 < MAX_ATTEMPTS:
                    continue
                raise _translated("read", location, exc) from None
        raise AssertionError("unreachable")  # pragma: no cover

    def put(self, location: str, data: bytes) -> None:
        bucket, key = self._split(location)
        try:
            self.client.put_object(Bucket=bucket, Key=key, Body=data)
        except Exception as exc:  # noqa: BLE001
            raise _translated("write", location, exc) from None


def _translated(op: str, location: str, exc: Exception) -> OSError:
    """The error pyiceberg's FileIOs raise for the same answer (FileNotFoundError,
    PermissionError, else OSError), naming the code only: never a request's headers."""
    code = _client_error_code(exc)
    if code in ("NoSuchKey", "404", "NotFound"):
        return FileNotFoundError(f"Cannot {op} {location}: it does not exist")
    if code in DENIED_CODES:
        return PermissionError(f"Cannot {op} {location}: access denied ({code})")
    return OSError(f"Cannot {op} {location}: {code}")
