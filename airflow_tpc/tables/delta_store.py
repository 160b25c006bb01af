"""Reaching a Delta table's store: delta-rs's options, pyarrow's filesystem, the log.

airflow-tpc's storage options (fsspec's names, as for a folder target) are translated
once into delta-rs's object-store options and into pyarrow's S3 filesystem (for the
footers); neither is ever logged or put in an error.  The log's own files are read
through airflow-tpc's store (:func:`commit_infos`, :func:`log_paths`), as
``DeltaTable.history()`` would read them but without failing on some S3-compatible
stores.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from ..errors import StorageError
from ..storage.azure_options import AZURE_SCHEMES
from .staged import norm_uri

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow.fs as pafs

    from ..storage import Storage


def delta_storage_options(options: dict[str, Any] | None) -> dict[str, str]:
    """airflow-tpc's S3 options (fsspec's names) as delta-rs's object-store options.

    Only what is given is translated; what is not comes from the environment the way
    delta-rs reads it.  The result holds secrets: never log it."""
    opts = dict(options or {})
    client = dict(opts.get("client_kwargs") or {})
    out: dict[str, str] = {}
    endpoint = opts.get("endpoint_url") or client.get("endpoint_url")
    if endpoint:
        out["AWS_ENDPOINT_URL"] = str(endpoint)
        if str(endpoint).startswith("http://"):
            out["AWS_ALLOW_HTTP"] = "true"
    region = opts.get("region_name") or client.get("region_name")
    if region:
        out["AWS_REGION"] = str(region)
    for ours, theirs in (("key", "AWS_ACCESS_KEY_ID"), ("secret", "AWS_SECRET_ACCESS_KEY"),
                         ("token", "AWS_SESSION_TOKEN")):
        if opts.get(ours):
            out[theirs] = str(opts[ours])
    return out


def delta_azure_options(storage: Any) -> dict[str, str]:
    """An Azure store's options (:class:`~airflow_tpc.storage.azure.AzureStorage`, its
    environment fallback applied) as delta-rs's object-store options: the account, its
    key or SAS or connection string, and an endpoint (Azurite's path-style
    ``http://host:port/<account>`` works as it is, with ``allow_http``).  Holds secrets:
    never log it."""
    from ..storage.azure_options import connection_string_parts

    opts = storage.options_for_clients()
    parts = connection_string_parts(opts.get("connection_string") or "")
    out: dict[str, str] = {}
    account = opts.get("account_name") or parts.get("accountname")
    key = opts.get("account_key") or parts.get("accountkey")
    sas = opts.get("sas_token") or parts.get("sharedaccesssignature")
    if account:
        out["azure_storage_account_name"] = str(account)
    if key:
        out["azure_storage_account_key"] = str(key)
    elif sas:
        out["azure_storage_sas_token"] = str(sas).lstrip("?")
    for ours, theirs in (("tenant_id", "azure_storage_tenant_id"),
                         ("client_id", "azure_storage_client_id"),
                         ("client_secret", "azure_storage_client_secret")):
        if opts.get(ours):
            out[theirs] = str(opts[ours])
    endpoint = opts.get("endpoint_url") or parts.get("blobendpoint")
    if endpoint:
        out["azure_storage_endpoint"] = str(endpoint).rstrip("/")
        if str(endpoint).startswith("http://"):
            out["allow_http"] = "true"
    return out


def arrow_filesystem(location: str, opts: dict[str, Any]) -> tuple[pafs.FileSystem, str]:
    """pyarrow's own filesystem for a table's store (``opts``: airflow-tpc's options)
    and the table's path in it.

    Reading through pyarrow's native filesystem (not delta-rs's Python file
    handler, which ``to_pyarrow_dataset()`` uses by default) also avoids a known
    abort at interpreter exit of that handler with pyarrow's I/O threads."""
    import pyarrow.fs as pafs

    if urlparse(location).scheme == "file":
        return pafs.LocalFileSystem(), norm_uri(location)
    if urlparse(location).scheme in AZURE_SCHEMES:
        # adlfs behind pyarrow's fsspec handler: the same options the job's writer uses;
        # an abfs[s] URI names its account, which the options may then leave out
        import adlfs

        from ..storage.azure_options import adlfs_options, parse_azure_uri

        path, account, _ = parse_azure_uri(location, opts)
        with_account = {**opts, "account_name": opts.get("account_name") or account}
        fs = adlfs.AzureBlobFileSystem(**adlfs_options(with_account))
        return pafs.PyFileSystem(pafs.FSSpecHandler(fs)), path
    client = dict(opts.get("client_kwargs") or {})
    endpoint = opts.get("endpoint_url") or client.get("endpoint_url")
    kwargs: dict[str, Any] = {}
    if endpoint:
        parsed = urlparse(str(endpoint))
        kwargs.update(endpoint_override=parsed.netloc + parsed.path.rstrip("/"),
                      scheme=parsed.scheme or "https")
    region = opts.get("region_name") or client.get("region_name")
    if region:
        kwargs["region"] = region
    if opts.get("key"):
        kwargs.update(access_key=opts["key"], secret_key=opts.get("secret"),
                      session_token=opts.get("token"))
    return pafs.S3FileSystem(**kwargs), location[len("s3://"):]


def commit_infos(storage: Storage, log_dir: str, uri: str) -> list[dict[str, Any]]:
    """The ``commitInfo`` of every commit still in ``_delta_log``, newest first, each
    with its ``version`` — read from the log files through airflow-tpc's store (as
    ``DeltaTable.history()`` would, which fails on some S3-compatible stores)."""
    out: list[dict[str, Any]] = []
    try:
        for obj in storage.list(log_dir):
            name = obj.path.rsplit("/", 1)[-1]
            stem = name[:-len(".json")]
            if not (name.endswith(".json") and stem.isdigit() and len(stem) == 20):
                continue
            for line in (storage.read_bytes(obj.path) or b"").splitlines():
                action = json.loads(line) if line.strip() else {}
                if isinstance(action.get("commitInfo"), dict):
                    out.append({**action["commitInfo"], "version": int(stem)})
                    break
    except StorageError:
        raise
    except Exception as exc:
        raise StorageError(f"cannot read the log of Delta table {uri}: "
                           f"{type(exc).__name__}: {first_line(exc)}") from None
    return sorted(out, key=lambda info: -info["version"])


def log_paths(storage: Storage, log_dir: str, uri: str) -> set[str]:
    """Every data file path (as the log writes it) a retained version may reference:
    the ``add`` and ``remove`` paths of every commit file still in ``log_dir`` and the
    ``add`` paths of its checkpoints.  Read from the log itself: a superset of what
    any version that can still be loaded references, so time travel keeps working.
    Unreadable log: a StorageError (the sink's cleanup then deletes nothing)."""
    import io

    import pyarrow.parquet as pq

    paths: set[str] = set()
    try:
        entries = storage.list(log_dir)
        for obj in entries:
            name = obj.path.rsplit("/", 1)[-1]
            if name.endswith(".json") and not name.startswith("_"):
                raw = storage.read_bytes(obj.path) or b""
                for line in raw.splitlines():
                    if not line.strip():
                        continue
                    action = json.loads(line)
                    for kind in ("add", "remove"):
                        if isinstance(action.get(kind), dict):
                            paths.add(action[kind]["path"])
            elif name.endswith(".parquet"):  # checkpoints (classic, multi-part, v2)
                raw = storage.read_bytes(obj.path) or b""
                pf = pq.ParquetFile(io.BytesIO(raw))
                if "add" not in pf.schema_arrow.names:
                    continue
                for add in pf.read(columns=["add"]).column("add").to_pylist():
                    if add and add.get("path"):
                        paths.add(add["path"])
    except StorageError:
        raise
    except Exception as exc:
        raise StorageError(f"cannot read the log of Delta table {uri}: "
                           f"{type(exc).__name__}: {first_line(exc)}") from None
    return paths


def first_line(exc: Exception) -> str:
    """delta-rs's message without the Rust backtrace it appends."""
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
