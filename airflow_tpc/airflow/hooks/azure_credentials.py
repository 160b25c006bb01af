"""Storage options from the Microsoft Azure provider's ``wasb`` and ``adls`` connections.

Read from the connection's fields the way the provider's own hooks read them
(``WasbHook.get_conn``, ``AzureDataLakeStorageV2Hook.get_conn``), so a connection made for
them serves an Azure target unchanged; the provider's hooks are not called (they build
clients of their own: we need only the options, and the provider need not be installed
to read a connection).  Every secret is registered with Airflow's secrets masker, and
only :data:`~airflow_tpc.airflow.hooks.credentials.PUBLIC_STORAGE_KEYS` ever leave the
process (XCom, the Spark conf); the job gets the rest by ``job_credentials``.

``wasb`` (Azure Blob Storage):

- extra ``connection_string``: that, and nothing else;
- extra ``tenant_id``: a service principal, login = client id, password = secret;
- extra ``shared_access_key``, or the password: the account key, login = account name;
- extra ``sas_token``: a SAS (a full ``https://...?sig=`` URL is refused: its query is
  the secret and would travel as an endpoint);
- host: the account URL (``https://<account>.blob.core.windows.net``, Azurite's
  ``http://127.0.0.1:10000/devstoreaccount1``) as ``endpoint_url``.

``adls`` (ADLS Gen2): extra ``connection_string``; host = the account name; extra
``tenant_id`` with login/password = client id/secret, else the password is the account
key.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow_tpc.errors import TpcError
from airflow_tpc.storage.s3_endpoint import check_endpoint_url

if TYPE_CHECKING:
    from airflow.sdk.definitions.connection import Connection

#: The Microsoft Azure provider's connection types an Azure target takes.
AZURE_CONN_TYPES = ("wasb", "adls")
#: Options that are secrets: masked in every log line.
_SECRETS = ("account_key", "sas_token", "connection_string", "client_secret")


class AzureConnectionError(TpcError, ValueError):
    """A ``wasb``/``adls`` connection that cannot serve a target (the message never holds
    a credential)."""


def _field(extra: dict[str, Any], conn_type: str, name: str) -> Any:
    """An extra field, bare or with the provider's old ``extra__<type>__`` prefix."""
    return extra.get(name) or extra.get(f"extra__{conn_type}__{name}") or None


def azure_options_from_connection(conn: Connection) -> dict[str, Any]:
    """The Azure store's options from a ``wasb`` or ``adls`` connection. Never log these."""
    kind = conn.conn_type
    extra = conn.extra_dejson if conn.extra else {}
    opts: dict[str, Any] = {}
    connection_string = _field(extra, kind, "connection_string")
    tenant = _field(extra, kind, "tenant_id")
    if connection_string:
        opts["connection_string"] = connection_string
    elif kind == "adls":
        if conn.host:
            opts["account_name"] = conn.host
        if tenant:
            opts.update(tenant_id=tenant, client_id=conn.login, client_secret=conn.password)
        elif conn.password:
            opts["account_key"] = conn.password
    else:
        host = conn.host or ""
        if "://" in host:
            opts["endpoint_url"] = check_endpoint_url(
                host, f"account URL (host) of connection {conn.conn_id!r}")
        elif host:
            opts["account_name"] = host.split(".", 1)[0]
        if tenant:
            opts.update(tenant_id=tenant, client_id=conn.login, client_secret=conn.password)
        else:
            if conn.login:
                opts["account_name"] = conn.login
            key = _field(extra, kind, "shared_access_key") or conn.password
            sas = _field(extra, kind, "sas_token")
            if sas and str(sas).startswith(("http://", "https://")):
                raise AzureConnectionError(
                    f"connection {conn.conn_id!r}: its sas_token is a URL; give the token "
                    "alone (sv=...&sig=...) and the account URL as the host")
            if key:
                opts["account_key"] = key
            elif sas:
                opts["sas_token"] = sas
    _mask(opts)
    return {k: v for k, v in opts.items() if v}


def _mask(opts: dict[str, Any]) -> None:
    """Register the secrets with Airflow's masker, as the provider's hooks do."""
    try:
        from airflow.sdk.log import mask_secret
    except ImportError:  # pragma: no cover - Airflow 3 has it
        return
    for name in _SECRETS:
        if opts.get(name):
            mask_secret(str(opts[name]))


def azure_job_env(opts: dict[str, Any]) -> dict[str, str]:
    """The job's environment for these options: the variables Azure's SDKs and adlfs read
    (``AZURE_STORAGE_*``, a service principal's ``AZURE_CLIENT_*``)."""
    from airflow_tpc.storage.azure_options import AZURE_ENV, SERVICE_PRINCIPAL_ENV

    names = {**AZURE_ENV, **SERVICE_PRINCIPAL_ENV}
    return {var: str(opts[opt]) for var, opt in names.items() if opts.get(opt)}


#: The job environment's variables whose values are secrets (refused on a command line).
AZURE_SECRET_ENV = ("AZURE_STORAGE_ACCOUNT_KEY", "AZURE_STORAGE_SAS_TOKEN",
                    "AZURE_STORAGE_CONNECTION_STRING", "AZURE_CLIENT_SECRET")
