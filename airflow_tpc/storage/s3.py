"""Amazon S3 (and S3-compatible) backend.

Reading and listing go through fsspec/s3fs with its listing cache disabled (a
stale listing is a protocol bug).  What S3 must do natively goes through boto3:
the commit point is ``put_object(IfNoneMatch="*")`` (412 when the key exists);
promotion uses server-side copies on a bounded thread pool.  boto3 is imported
lazily so job-side code shipped to a cluster needs only fsspec.

Credentials live only in the client objects: they are never formatted into
messages, manifests or ``repr``.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

from ..errors import StorageError
from .base import CHUNK, ObjectInfo
from .object_store import ObjectStore
from .s3_copy import MULTIPART_CHUNK, MULTIPART_COPY_THRESHOLD, S3Copies
from .s3_endpoint import check_endpoint_url, public_s3_options, redact_endpoint_url
from .s3_errors import (
    DENIED_CODES,
    _client_error_code,
    _http_status,
    _is_cut_body,
)

#: The endpoint's checks moved to :mod:`.s3_endpoint`, the copies to :mod:`.s3_copy`;
#: earlier imports of them from here still work.
__all__ = ["MULTIPART_CHUNK", "MULTIPART_COPY_THRESHOLD", "S3Storage", "check_endpoint_url",
           "public_s3_options", "redact_endpoint_url"]

T = TypeVar("T")


class S3Storage(S3Copies, ObjectStore):
    scheme = "s3"
    atomic_dir_rename = False
    has_links = False  # keys are not links: nothing below a prefix leads elsewhere
    server_side_copy = True
    native_checksum = "etag"
    etag_is_md5 = True  # a single-part object's ETag is its MD5 (multipart ones hold a "-")
    takes_credentials = True
    spark_native = False  # pyspark ships no hadoop-aws: s3a:// needs jars on the cluster
    credential_env = {"AWS_ACCESS_KEY_ID": "key",  # noqa: RUF012
                      "AWS_SECRET_ACCESS_KEY": "secret", "AWS_SESSION_TOKEN": "token"}
    public_option_names = ("endpoint_url", "region_name")

    @classmethod
    def fsspec_options(cls, options: dict[str, Any]) -> dict[str, Any]:
        """``s3fs.S3FileSystem``'s spelling of the options."""
        out: dict[str, Any] = {k: options[k] for k in ("key", "secret", "token", "endpoint_url")
                               if k in options}
        if "region_name" in options:
            out["client_kwargs"] = {"region_name": options["region_name"]}
        return out

    @classmethod
    def spark_uri(cls, uri: str) -> str:
        return "s3a://" + uri.split("://", 1)[1] if "://" in uri else uri

    @classmethod
    def lineage_name(cls, uri: str) -> tuple[str, str]:
        bucket, _, key = uri.split("://", 1)[1].partition("/")
        return f"s3://{bucket}", key.strip("/") or "/"

    @classmethod
    def browser_url(cls, uri: str) -> str | None:
        bucket, _, key = uri.split("://", 1)[1].partition("/")
        return f"https://{bucket}.s3.amazonaws.com/{key}"

    def __init__(self, options: dict[str, Any] | None = None, *, copy_workers: int = 16,
                 multipart_threshold: int = MULTIPART_COPY_THRESHOLD,
                 multipart_chunk: int = MULTIPART_CHUNK) -> None:
        self._options = dict(options or {})
        if self._options.get("endpoint_url") is not None:
            check_endpoint_url(self._options["endpoint_url"], "S3 endpoint_url")
        self.copy_workers = copy_workers
        self.multipart_threshold = multipart_threshold
        self.multipart_chunk = multipart_chunk
        self._fs = None
        self._client = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:  # never show credentials
        return f"S3Storage({public_s3_options(self._options)})"

    def public_options(self) -> dict[str, Any]:
        """Options that may travel (to Spark conf, XCom): endpoint and region only."""
        return public_s3_options(self._options)

    # -- clients --------------------------------------------------------------
    @property
    def fs(self):
        if self._fs is None:
            import s3fs

            opts = self._options
            client_kwargs = dict(opts.get("client_kwargs", {}))
            if "region_name" in opts:
                client_kwargs.setdefault("region_name", opts["region_name"])
            fs = s3fs.S3FileSystem(
                key=opts.get("key"), secret=opts.get("secret"), token=opts.get("token"),
                endpoint_url=opts.get("endpoint_url"), client_kwargs=client_kwargs,
                skip_instance_cache=True, use_listings_cache=False,
                config_kwargs=self._client_config(),
            )
            # s3fs's own loop would re-run each call (after the SDK's retries) up to
            # 5 times on SlowDown/connection errors: 5x the configured budget.
            fs.retries = 1
            self._fs = fs
        return self._fs

    def _client_config(self) -> dict[str, Any]:
        """One retry policy for boto3 and s3fs: standard mode, ``max_attempts`` retries."""
        opts = self._options
        return {
            "retries": {"mode": "standard", "max_attempts": opts.get("max_attempts", 10)},
            "connect_timeout": opts.get("connect_timeout", 10),
            "read_timeout": opts.get("read_timeout", 60),
        }

    @property
    def client(self):
        with self._lock:
            if self._client is None:
                import boto3
                from botocore.config import Config

                opts = self._options
                self._client = boto3.session.Session().client(
                    "s3",
                    endpoint_url=opts.get("endpoint_url"),
                    aws_access_key_id=opts.get("key"),
                    aws_secret_access_key=opts.get("secret"),
                    aws_session_token=opts.get("token"),
                    region_name=opts.get("region_name"),
                    config=Config(max_pool_connections=self.copy_workers + 4,
                                  **self._client_config()),
                )
        return self._client

    def warm_up(self) -> None:
        """Make the boto3 client now (a verb's reads ahead start it in the background):
        making it costs ~0.1-0.4 s of CPU, which the first conditional write (a commit's
        decision) would otherwise wait for on its path.  Never raises: the write that
        needs the client makes it, and says what failed."""
        with contextlib.suppress(Exception):
            self.client  # noqa: B018 - made and kept by the property

    @staticmethod
    def _split(path: str) -> tuple[str, str]:
        bucket, _, key = path.partition("/")
        return bucket, key

    def uri(self, path: str) -> str:
        return f"s3://{path}"

    def _fail(self, op: str, path: str, exc: Exception) -> StorageError:
        code = _client_error_code(exc)
        status = _http_status(exc)
        said = code if status is None or code == str(status) else f"{code} ({status})"
        return StorageError(f"S3 {op} of {self.uri(path)} failed: {said}",
                            denied=code in DENIED_CODES or isinstance(exc, PermissionError))

    # -- reading --------------------------------------------------------------
    def _reread_cut_body(self, read: Callable[[], T]) -> T:
        """Run ``read`` again when its body was cut, within the ``max_attempts`` budget."""
        tries = int(self._options.get("max_attempts", 10)) + 1
        for attempt in range(tries):
            try:
                return read()
            except Exception as exc:
                if attempt + 1 >= tries or not _is_cut_body(exc):
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    def _read_bytes(self, path: str) -> bytes | None:
        try:
            # One GET: with its default concurrency s3fs asks for the size first (a HEAD,
            # and on a missing key a LIST besides), to split a large body into ranges.
            # Records and manifests are read whole; the extra round trips were half of a
            # commit's requests.
            return self._reread_cut_body(lambda: self.fs.cat_file(path, max_concurrency=1))
        except FileNotFoundError:
            return None
        except Exception as exc:  # noqa: BLE001 - never let a client traceback be the message
            raise self._fail("read", path, exc) from None

    def iter_chunks(self, path: str) -> Iterator[bytes]:
        try:
            with self.fs.open(path, "rb", block_size=CHUNK) as fh:
                while chunk := fh.read(CHUNK):
                    yield chunk
        except FileNotFoundError:
            raise StorageError(f"{self.uri(path)} does not exist") from None
        except Exception as exc:  # noqa: BLE001
            raise self._fail("read", path, exc) from None

    def open_input(self, path: str) -> Any:
        try:
            return self.fs.open(path, "rb", block_size=64 * 1024, cache_type="readahead")
        except FileNotFoundError:
            raise StorageError(f"{self.uri(path)} does not exist") from None
        except Exception as exc:  # noqa: BLE001
            raise self._fail("read", path, exc) from None

    def _listing(self, prefix: str, ask: Callable[[str], T]) -> T | None:
        """``ask(<prefix>/)``: None where nothing is below ``prefix``; any other failure one
        :class:`StorageError` (a listing of objects or of folders alike)."""
        try:
            return ask(prefix.rstrip("/") + "/")
        except FileNotFoundError:
            return None
        except Exception as exc:  # noqa: BLE001
            raise self._fail("list", prefix, exc) from None

    def _list(self, prefix: str) -> list[ObjectInfo]:
        found = self._listing(prefix, lambda p: self.fs.find(p, detail=True, withdirs=False))
        if found is None:
            return []
        out = []
        for path, info in found.items():
            if info.get("type") == "directory":
                continue
            etag = info.get("ETag") or info.get("etag")
            etag = etag.strip('"') if etag else None
            out.append(ObjectInfo(path, int(info.get("size", 0)), etag))
        return out

    def list_dirs(self, prefix: str) -> list[str]:
        entries = self._listing(prefix, lambda p: self.fs.ls(p, detail=True, refresh=True))
        return [e["name"].rstrip("/").rsplit("/", 1)[-1] for e in entries or []
                if e.get("type") == "directory"]

    # -- writing --------------------------------------------------------------
    def put(self, path: str, data: bytes) -> None:
        self._wrote()
        try:
            self.fs.pipe_file(path, data)
        except Exception as exc:  # noqa: BLE001
            raise self._fail("write", path, exc) from None

    def put_if_absent(self, path: str, data: bytes) -> bool:
        self._wrote()
        bucket, key = self._split(path)
        try:
            self.client.put_object(Bucket=bucket, Key=key, Body=data, IfNoneMatch="*")
            return True
        except Exception as exc:  # noqa: BLE001
            if _client_error_code(exc) in ("PreconditionFailed", "412"):
                return False
            raise self._fail("conditional write", path, exc) from None

    def read_versioned(self, path: str) -> tuple[bytes | None, str | None]:
        bucket, key = self._split(path)
        def read() -> tuple[bytes, str | None]:
            resp = self.client.get_object(Bucket=bucket, Key=key)
            return resp["Body"].read(), resp.get("ETag")

        try:
            return self._reread_cut_body(read)
        except Exception as exc:  # noqa: BLE001
            if _client_error_code(exc) in ("NoSuchKey", "404", "NotFound"):
                return None, None
            raise self._fail("read", path, exc) from None

    def put_if_version(self, path: str, data: bytes, version: str | None) -> bool:
        if version is None:
            return self.put_if_absent(path, data)
        self._wrote()
        bucket, key = self._split(path)
        try:
            self.client.put_object(Bucket=bucket, Key=key, Body=data, IfMatch=version)
            return True
        except Exception as exc:  # noqa: BLE001
            if _client_error_code(exc) in ("PreconditionFailed", "412", "NoSuchKey", "404",
                                           "ConditionalRequestConflict", "409"):
                return False
            raise self._fail("conditional write", path, exc) from None

    def delete_prefix(self, prefix: str) -> None:
        self._wrote()
        self.delete_files(o.path for o in self.list(prefix))

    def delete_files(self, paths: Iterable[str]) -> None:
        self._wrote()
        paths = list(paths)
        if not paths:
            return
        try:
            import boto3  # noqa: F401
        except ImportError:  # job side on a cluster without boto3: fsspec can delete too
            with contextlib.suppress(FileNotFoundError):
                self.fs.rm(paths)
            return
        by_bucket: dict[str, list[str]] = {}
        for path in paths:
            bucket, key = self._split(path)
            by_bucket.setdefault(bucket, []).append(key)
        for bucket, keys in by_bucket.items():
            for i in range(0, len(keys), 1000):
                batch = [{"Key": k} for k in keys[i : i + 1000]]
                try:
                    resp = self.client.delete_objects(
                        Bucket=bucket, Delete={"Objects": batch, "Quiet": True})
                except Exception as exc:  # noqa: BLE001
                    raise self._fail("delete", f"{bucket}/{batch[0]['Key']}", exc) from None
                errors = resp.get("Errors") or []
                if errors:
                    first = errors[0]
                    raise StorageError(
                        f"S3 delete of s3://{bucket}/{first.get('Key')} failed: {first.get('Code')}"
                        f" ({len(errors)} objects not deleted)")
