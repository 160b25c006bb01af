"""Azure Blob Storage (and ADLS Gen2 through its Blob endpoint) backend.

Everything goes through azure-storage-blob (imported lazily: a job that only writes
through fsspec needs adlfs, not this):

- the commit point is ``Put Blob`` with ``If-None-Match: *`` (``upload_blob(...,
  overwrite=False)``; 409 ``BlobAlreadyExists`` when the blob exists);
- the published marker's compare-and-swap is ``Put Blob`` with ``If-Match: <ETag>``;
- promotion copies server-side, guarded by each source's verified ETag
  (:mod:`.azure_copy`), or names the manifest (``promotion="manifest"``);
- listings are never cached (each call asks the service).

Credentials live only in the client objects: they are never formatted into messages,
manifests or ``repr`` (errors name Azure's error code, never its message, which can
quote a signed URL).
"""

from __future__ import annotations

import contextlib
import io
import threading
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..errors import StorageError, UnsupportedStorage
from .azure_copy import AzureCopies, RangedBlob
from .azure_options import (
    AZURE_ENV,
    DENIED_CODES,
    PUBLIC_AZURE_KEYS,
    SERVICE_PRINCIPAL_ENV,
    adlfs_options,
    check_azure_options,
    connection_string_parts,
    error_code,
    http_status,
    public_azure_options,
    with_environment,
)
from .base import ObjectInfo
from .object_store import ObjectStore

#: Blob metadata an ADLS Gen2 (hierarchical namespace) account puts on a directory.
_FOLDER_META = "hdi_isfolder"


class AzureStorage(AzureCopies, ObjectStore):
    scheme = "az"
    atomic_dir_rename = False
    has_links = False  # blob names are not links: nothing below a prefix leads elsewhere
    server_side_copy = True
    native_checksum = "etag"
    takes_credentials = True
    spark_native = False  # pyspark ships no hadoop-azure: the tpc data source writes it
    credential_env = {**AZURE_ENV, **SERVICE_PRINCIPAL_ENV}
    public_option_names = PUBLIC_AZURE_KEYS  # the endpoint and the account name: never the key

    @classmethod
    def fsspec_options(cls, options: dict[str, Any]) -> dict[str, Any]:
        """adlfs's spelling: an account key with an endpoint (Azurite, a private endpoint)
        becomes a connection string, the one way adlfs takes an http(s) endpoint."""
        return adlfs_options(options)

    @classmethod
    def lineage_name(cls, uri: str) -> tuple[str, str]:
        scheme, rest = uri.split("://", 1)
        netloc, _, path = rest.partition("/")
        return f"{scheme}://{netloc}", path.strip("/") or "/"

    @classmethod
    def browser_url(cls, uri: str) -> str | None:
        scheme, rest = uri.split("://", 1)
        netloc, _, path = rest.partition("/")
        container, at, host = netloc.partition("@")
        if not at:
            return None  # az://: the account is not in the URI
        account = host.split(".", 1)[0]
        return f"https://{account}.blob.core.windows.net/{container}/{path}"

    def __init__(self, options: dict[str, Any] | None = None, *, uri_scheme: str = "az",
                 uri_host: str = "", account: str | None = None,
                 copy_workers: int = 16) -> None:
        self._options = check_azure_options(options)
        if account and not self._options.get("account_name"):
            self._options["account_name"] = account
        self._options = with_environment(self._options)
        self._uri_scheme, self._uri_host = uri_scheme, uri_host
        self.copy_workers = copy_workers
        self._service: Any = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:  # never show credentials
        return f"AzureStorage({public_azure_options(self._options)})"

    def options_for_clients(self) -> dict[str, Any]:
        """Every option, secrets included, for another client of the same store (delta-rs);
        never log it."""
        return dict(self._options)

    def public_options(self) -> dict[str, Any]:
        """Options that may travel (to Spark conf, XCom): endpoint and account name only."""
        return public_azure_options(self._options)

    # -- the client ------------------------------------------------------------
    def account_url(self) -> str:
        """The Blob service URL: the endpoint option, the connection string's, or the
        public cloud's for the account."""
        opts = self._options
        if opts.get("endpoint_url"):
            return str(opts["endpoint_url"]).rstrip("/")
        parts = connection_string_parts(opts.get("connection_string") or "")
        if parts.get("blobendpoint"):
            return parts["blobendpoint"].rstrip("/")
        account = opts.get("account_name") or parts.get("accountname")
        if not account:
            raise UnsupportedStorage("an Azure target needs its account: an abfs:// URI "
                                     "naming it, or storage option account_name, "
                                     "connection_string or endpoint_url")
        suffix = parts.get("endpointsuffix", "core.windows.net")
        return f"https://{account}.blob.{suffix}"

    def _credential(self) -> Any:
        opts = self._options
        parts = connection_string_parts(opts.get("connection_string") or "")
        account = opts.get("account_name") or parts.get("accountname")
        key = opts.get("account_key") or parts.get("accountkey")
        if key:
            if not account:
                raise UnsupportedStorage("an Azure account key needs account_name beside it")
            return {"account_name": account, "account_key": key}
        sas = opts.get("sas_token") or parts.get("sharedaccesssignature")
        if sas:
            return str(sas).lstrip("?")
        if opts.get("client_secret"):
            from azure.identity import ClientSecretCredential

            return ClientSecretCredential(opts.get("tenant_id"), opts.get("client_id"),
                                          opts["client_secret"])
        try:
            from azure.identity import DefaultAzureCredential
        except ImportError:
            return None  # anonymous: public containers only
        return DefaultAzureCredential()

    @property
    def service(self) -> Any:
        with self._lock:
            if self._service is None:
                from azure.storage.blob import BlobServiceClient

                opts = self._options
                self._service = BlobServiceClient(
                    self.account_url(), credential=self._credential(),
                    retry_total=int(opts.get("max_attempts", 10)),
                    connection_timeout=opts.get("connect_timeout", 10),
                    read_timeout=opts.get("read_timeout", 60),
                    transport=self._transport())
        return self._service

    def _transport(self) -> Any:
        """A connection pool as large as the copies run at once (the default holds 10)."""
        import requests
        from azure.core.pipeline.transport import RequestsTransport

        session = requests.Session()
        adapter = requests.adapters.HTTPAdapter(pool_maxsize=self.copy_workers + 4)
        session.mount("http://", adapter)
        session.mount("https://", adapter)
        return RequestsTransport(session=session, session_owner=False)

    def warm_up(self) -> None:
        """Make the client now (see :func:`~.ahead.reading_ahead`); never raises."""
        with contextlib.suppress(Exception):
            self.service  # noqa: B018 - made and kept by the property

    def _blob(self, path: str) -> Any:
        container, _, name = path.partition("/")
        return self.service.get_blob_client(container, name)

    def _container(self, path: str) -> tuple[Any, str]:
        container, _, name = path.partition("/")
        return self.service.get_container_client(container), name

    def uri(self, path: str) -> str:
        if not self._uri_host:
            return f"{self._uri_scheme}://{path}"
        container, _, name = path.partition("/")
        return f"{self._uri_scheme}://{container}@{self._uri_host}/{name}"

    def _fail(self, op: str, path: str, exc: BaseException) -> StorageError:
        code, status = error_code(exc), http_status(exc)
        said = code if status is None else f"{code} ({status})"
        return StorageError(f"Azure {op} of {self.uri(path)} failed: {said}",
                            denied=code in DENIED_CODES or status == 403)

    # -- reading ---------------------------------------------------------------
    def _read_bytes(self, path: str) -> bytes | None:
        return self.read_versioned(path)[0]

    def read_versioned(self, path: str) -> tuple[bytes | None, str | None]:
        try:
            stream = self._blob(path).download_blob(max_concurrency=1)
            return stream.readall(), stream.properties.etag
        except Exception as exc:  # noqa: BLE001
            if type(exc).__name__ == "ResourceNotFoundError":
                return None, None  # no blob, or no container: nothing is there
            raise self._fail("read", path, exc) from None

    def iter_chunks(self, path: str) -> Iterator[bytes]:
        try:
            stream = self._blob(path).download_blob(max_concurrency=1)
            yield from stream.chunks()
        except Exception as exc:  # noqa: BLE001
            if type(exc).__name__ == "ResourceNotFoundError":
                raise StorageError(f"{self.uri(path)} does not exist") from None
            raise self._fail("read", path, exc) from None

    def open_input(self, path: str) -> Any:
        client = self._blob(path)
        try:
            props = client.get_blob_properties()
        except Exception as exc:  # noqa: BLE001
            if type(exc).__name__ == "ResourceNotFoundError":
                raise StorageError(f"{self.uri(path)} does not exist") from None
            raise self._fail("read", path, exc) from None
        raw = RangedBlob(client, int(props.size), props.etag,
                         lambda exc: self._fail("read", path, exc))
        return io.BufferedReader(raw, buffer_size=64 * 1024)

    def _list(self, prefix: str) -> list[ObjectInfo]:
        container, name = self._container(prefix)
        start = name.rstrip("/") + "/" if name.strip("/") else ""
        out = []
        try:
            for blob in container.list_blobs(name_starts_with=start, include=["metadata"]):
                if (blob.metadata or {}).get(_FOLDER_META) == "true":
                    continue  # an ADLS Gen2 directory, not a file
                etag = str(blob.etag).strip('"') if blob.etag else None
                out.append(ObjectInfo(f"{container.container_name}/{blob.name}",
                                      int(blob.size), etag))
        except Exception as exc:  # noqa: BLE001
            if type(exc).__name__ == "ResourceNotFoundError":
                return []
            raise self._fail("list", prefix, exc) from None
        return out

    def list_dirs(self, prefix: str) -> list[str]:
        container, name = self._container(prefix)
        start = name.rstrip("/") + "/" if name.strip("/") else ""
        try:
            return [item.name[len(start):].rstrip("/")
                    for item in container.walk_blobs(name_starts_with=start, delimiter="/")
                    if item.name.endswith("/")]
        except Exception as exc:  # noqa: BLE001
            if type(exc).__name__ == "ResourceNotFoundError":
                return []
            raise self._fail("list", prefix, exc) from None

    # -- writing ---------------------------------------------------------------
    def put(self, path: str, data: bytes) -> None:
        self._wrote()
        try:
            self._blob(path).upload_blob(data, overwrite=True, max_concurrency=1)
        except Exception as exc:  # noqa: BLE001
            raise self._fail("write", path, exc) from None

    def put_if_absent(self, path: str, data: bytes) -> bool:
        self._wrote()
        try:
            # overwrite=False sends If-None-Match: * (one Put Blob below 64 MiB).
            self._blob(path).upload_blob(data, overwrite=False, max_concurrency=1)
            return True
        except Exception as exc:  # noqa: BLE001
            if type(exc).__name__ == "ResourceExistsError" \
                    or error_code(exc) in ("BlobAlreadyExists", "ConditionNotMet"):
                return False
            raise self._fail("conditional write", path, exc) from None

    def put_if_version(self, path: str, data: bytes, version: str | None) -> bool:
        if version is None:
            return self.put_if_absent(path, data)
        from azure.core import MatchConditions

        self._wrote()
        try:
            self._blob(path).upload_blob(data, overwrite=True, max_concurrency=1,
                                         etag=version,
                                         match_condition=MatchConditions.IfNotModified)
            return True
        except Exception as exc:  # noqa: BLE001
            if type(exc).__name__ in ("ResourceModifiedError", "ResourceNotFoundError") \
                    or error_code(exc) in ("ConditionNotMet", "BlobNotFound"):
                return False
            raise self._fail("conditional write", path, exc) from None

    def delete_prefix(self, prefix: str) -> None:
        self._wrote()
        self.delete_files(o.path for o in self._list(prefix))

    def delete_files(self, paths: Iterable[str]) -> None:
        self._wrote()
        paths = list(paths)
        if not paths:
            return
        workers = max(1, min(self.copy_workers, len(paths)))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="tpc-azdel") as pool:
            failed = [err for err in pool.map(self._delete_one, paths) if err is not None]
        if failed:
            raise StorageError(f"{failed[0]} ({len(failed)} blobs not deleted)")

    def _delete_one(self, path: str) -> StorageError | None:
        try:
            self._blob(path).delete_blob()
        except Exception as exc:  # noqa: BLE001
            if type(exc).__name__ != "ResourceNotFoundError":
                return self._fail("delete", path, exc)
        return None
