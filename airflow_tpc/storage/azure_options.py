"""Azure Blob Storage / ADLS Gen2: what a target URI names, which storage options a store
takes, which of them may be shown, and how an Azure error is told without its message.

Apart from :class:`~airflow_tpc.storage.azure.AzureStorage` because the Airflow layer and
the job's payload ask these too, and they need neither azure-storage-blob nor adlfs.

URIs (docs/storage.md):

- ``az://<container>/<path>`` — the account comes from the storage options
  (``account_name``, or the connection string, or the endpoint);
- ``abfs[s]://<container>@<account>.dfs.core.windows.net/<path>`` — the account is in
  the URI (ADLS Gen2's spelling, the one Hadoop's ABFS connector uses).

A store path is ``<container>/<path>``, as an S3 store path is ``<bucket>/<key>``.
"""

from __future__ import annotations

import os
import re
from typing import Any
from urllib.parse import urlparse

from ..errors import UnsupportedStorage
from .s3_endpoint import check_endpoint_url, redact_endpoint_url

#: The schemes of an Azure target (adlfs registers the same three with fsspec).
AZURE_SCHEMES = ("az", "abfs", "abfss")
#: Options that may travel (operator arguments, XCom, the Spark conf) and be shown.
PUBLIC_AZURE_KEYS = ("endpoint_url", "account_name")
#: Options that are secrets: never formatted into a message, a ``repr`` or the payload.
SECRET_AZURE_KEYS = ("account_key", "sas_token", "connection_string", "client_secret")
#: Every option the store takes.
#: ``region_name`` is S3's (the CLI and connections may pass it): taken and unused.
AZURE_KEYS = (*PUBLIC_AZURE_KEYS, *SECRET_AZURE_KEYS, "tenant_id", "client_id",
              "max_attempts", "connect_timeout", "read_timeout", "region_name")
#: The environment a store falls back to when its options hold no credential (the names
#: the Azure CLI, adlfs and Azure's SDKs read), as S3 falls back to ``AWS_*``.
AZURE_ENV = {"AZURE_STORAGE_CONNECTION_STRING": "connection_string",
             "AZURE_STORAGE_ACCOUNT_NAME": "account_name",
             "AZURE_STORAGE_ACCOUNT_KEY": "account_key",
             "AZURE_STORAGE_SAS_TOKEN": "sas_token"}
#: Azure's rule for container names (3-63 of a-z, 0-9 and single hyphens inside).
_CONTAINER = re.compile(r"[a-z0-9](?:[a-z0-9]|-(?=[a-z0-9])){2,62}")
_ACCOUNT = re.compile(r"[a-z0-9]{3,24}")
#: What Azure answers to a request the caller may not make.
DENIED_CODES = ("AuthenticationFailed", "AuthorizationFailure",
                "AuthorizationPermissionMismatch", "InsufficientAccountPermissions",
                "AccountIsDisabled")


def parse_azure_uri(uri: str, options: dict[str, Any] | None) -> tuple[str, str | None, str]:
    """``(store_path, account_from_uri, host)`` of an Azure target URI, or one clear
    :class:`UnsupportedStorage` (the URI never carries a secret: no query, no user part
    other than the container)."""
    parsed = urlparse(uri)
    scheme = parsed.scheme.lower()
    if parsed.query or parsed.fragment or parsed.params:
        # not repeated: a query is where a SAS token would be
        raise UnsupportedStorage(f"the {scheme}:// target has a query or fragment (a SAS "
                                 f"token?); use {scheme}://container/path and give "
                                 "credentials as storage options or a connection")
    container, at, host = parsed.netloc.partition("@")
    account = None
    if at:
        if ":" in container:
            raise UnsupportedStorage(f"the {scheme}:// target has a user:password part (not "
                                     "repeated here); the part before '@' must be the "
                                     "container")
        account = host.split(".", 1)[0].lower()
        if not _ACCOUNT.fullmatch(account) or "." not in host:
            raise UnsupportedStorage(
                f"target {uri!r} does not name an account host: write "
                f"{scheme}://<container>@<account>.dfs.core.windows.net/<path>")
    if not container:
        raise UnsupportedStorage(f"target {uri!r} has no container")
    if not _CONTAINER.fullmatch(container):
        raise UnsupportedStorage(
            f"target {uri!r}: {container!r} is not an Azure container name (3-63 lowercase "
            "letters, digits and single hyphens, starting and ending with a letter or digit)")
    named = (options or {}).get("account_name")
    if account and named and str(named).lower() != account:
        raise UnsupportedStorage(f"target {uri!r} names account {account!r} but the storage "
                                 f"options name {named!r}; they must agree")
    path = f"{container}/{parsed.path.strip('/')}".rstrip("/")
    return path, account, host if at else ""


def check_azure_options(options: dict[str, Any] | None) -> dict[str, Any]:
    """The options, checked: known names only (a typo would silently mean another
    identity), an endpoint that carries no secret.  Messages name options, never values."""
    opts = dict(options or {})
    unknown = sorted(set(opts) - set(AZURE_KEYS))
    if unknown:
        raise UnsupportedStorage(f"Azure storage options {unknown} are not known; use "
                                 f"{sorted(AZURE_KEYS)}")
    if opts.get("endpoint_url") is not None:
        check_endpoint_url(opts["endpoint_url"], "Azure endpoint_url")
    return opts


#: A service principal's variables (DefaultAzureCredential reads them too).
SERVICE_PRINCIPAL_ENV = {"AZURE_TENANT_ID": "tenant_id", "AZURE_CLIENT_ID": "client_id",
                         "AZURE_CLIENT_SECRET": "client_secret"}


def adlfs_options(options: dict[str, Any]) -> dict[str, Any]:
    """``adlfs.AzureBlobFileSystem``'s spelling of the store's options."""
    opts = with_environment(dict(options))
    out: dict[str, Any] = {}
    if opts.get("connection_string"):
        out["connection_string"] = opts["connection_string"]
    elif opts.get("endpoint_url") and opts.get("account_key"):
        scheme = str(opts["endpoint_url"]).split("://", 1)[0]
        out["connection_string"] = (
            f"DefaultEndpointsProtocol={scheme};AccountName={opts.get('account_name')};"
            f"AccountKey={opts['account_key']};BlobEndpoint={opts['endpoint_url']};")
    else:
        out.update({k: opts[k] for k in ("account_name", "account_key", "sas_token",
                                         "tenant_id", "client_id", "client_secret")
                    if opts.get(k)})
    return out


def with_environment(options: dict[str, Any]) -> dict[str, Any]:
    """``options``, or where they hold no credential, completed from :data:`AZURE_ENV`."""
    if any(options.get(k) for k in SECRET_AZURE_KEYS):
        return options
    out = dict(options)
    for var, key in AZURE_ENV.items():
        if os.environ.get(var) and not out.get(key):
            out[key] = os.environ[var]
    return out


def public_azure_options(options: dict[str, Any] | None) -> dict[str, Any]:
    """What may be shown or travel: the endpoint (redacted) and the account name."""
    out = {k: options[k] for k in PUBLIC_AZURE_KEYS if options and options.get(k) is not None}
    if "endpoint_url" in out:
        out["endpoint_url"] = redact_endpoint_url(out["endpoint_url"])
    return out


def connection_string_parts(value: str) -> dict[str, str]:
    """``Key=value;...`` of an Azure connection string, keys lower-cased."""
    parts: dict[str, str] = {}
    for item in str(value).split(";"):
        key, eq, val = item.partition("=")
        if eq:
            parts[key.strip().lower()] = val.strip()
    return parts


def error_code(exc: BaseException) -> str:
    """Azure's error code (``BlobAlreadyExists``, ``ConditionNotMet``...) or the
    exception's class name: never its message, which may quote a signed URL."""
    code = getattr(exc, "error_code", None)
    return str(getattr(code, "value", code) or type(exc).__name__)  # an enum's value


def http_status(exc: BaseException) -> int | None:
    status = getattr(exc, "status_code", None)
    return int(status) if isinstance(status, int) else None
