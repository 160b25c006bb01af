"""Storage credentials from an Airflow connection, and the check that keeps them out of
operator arguments.

Apart from the hooks because it is the one part of the layer that touches secrets: a
generic connection's login/password, or an Amazon ``aws`` connection resolved by the
provider's own hook (:class:`AwsCredentials`).  Operator arguments, XComs, trigger kwargs
and the Spark conf carry only :data:`PUBLIC_STORAGE_KEYS` (:func:`check_public`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow_tpc.airflow.hooks.azure_credentials import (
    AZURE_CONN_TYPES,
    azure_options_from_connection,
)
from airflow_tpc.errors import TpcError
from airflow_tpc.storage.s3 import check_endpoint_url, public_s3_options

if TYPE_CHECKING:
    from airflow.sdk.definitions.connection import Connection

#: Storage options that may appear in operator arguments, XComs, trigger kwargs and
#: the Spark conf: everything else (keys, secrets, tokens) comes from the connection.
PUBLIC_STORAGE_KEYS = ("endpoint_url", "region_name", "account_name")


def public_options(options: dict[str, Any] | None) -> dict[str, Any]:
    """Only the storage options that are safe to show (endpoint without user info or query,
    region)."""
    return public_s3_options(options)


def check_public(options: dict[str, Any] | None, where: str) -> dict[str, Any]:
    """Refuse secrets in operator arguments: they would be rendered in the UI and logs.

    Only ``endpoint_url`` and ``region_name`` are accepted, and an endpoint carrying
    ``user:secret@``, a query string or a fragment is refused too (the message never
    repeats it).
    """
    secret = sorted(set(options or {}) - set(PUBLIC_STORAGE_KEYS))
    if secret:
        raise ValueError(
            f"{where}: storage_options {secret} look like credentials; put them in an Airflow "
            "connection (storage_conn_id: login = access key, password = secret, extra = "
            '{"endpoint_url": ..., "region_name": ...}) instead of operator arguments.')
    options = dict(options or {})
    if options.get("endpoint_url") is not None:
        check_endpoint_url(options["endpoint_url"], f"{where}: storage_options['endpoint_url']")
    return options


#: ``conn_type`` of the Amazon provider's connection (``aws_default``).
AWS_CONN_TYPE = "aws"


class AwsConnectionError(TpcError, ValueError):
    """An ``aws`` storage connection that cannot give credentials (no Amazon provider, or the
    provider's credential chain failed); the message never holds a credential."""


def options_from_connection(conn: Connection | None) -> dict[str, Any]:
    """fsspec/s3fs style options from a connection.

    A generic connection: login = access key, password = secret, extra ``endpoint_url``/
    ``region_name``/``token``.  An Amazon ``aws`` connection: whatever the Amazon provider's
    :class:`AwsBaseHook` resolves (:class:`AwsCredentials`; each call asks it again, so a
    hook keeps one :class:`AwsCredentials` instead).
    """
    if conn is None:
        return {}
    if conn.conn_type == AWS_CONN_TYPE:
        return AwsCredentials(conn).options()
    if conn.conn_type in AZURE_CONN_TYPES:  # the Microsoft Azure provider's wasb / adls
        return azure_options_from_connection(conn)
    opts: dict[str, Any] = {}
    extra = conn.extra_dejson if conn.extra else {}
    if conn.login:
        opts["key"] = conn.login
    if conn.password:
        opts["secret"] = conn.password
    for name in ("endpoint_url", "region_name", "token"):
        if extra.get(name):
            opts[name] = extra[name]
    if conn.host and "endpoint_url" not in opts:
        opts["endpoint_url"] = conn.host if "://" in conn.host else f"https://{conn.host}"
    if "endpoint_url" in opts:
        check_endpoint_url(opts["endpoint_url"],
                           f"endpoint_url of connection {conn.conn_id!r}")
    return opts


class AwsCredentials:
    """Storage options from an Amazon provider ``aws`` connection (``aws_default`` & co.).

    The provider's :class:`AwsBaseHook` (``client_type="s3"``) does what it does for every
    AWS operator: static keys or a session token from login/password/extra, a profile, the
    default chain, and role assumption (``role_arn``, ``assume_role_method``,
    ``assume_role_kwargs``; STS at ``service_config.sts.endpoint_url`` if set).  Its boto3
    session is kept, and every :meth:`options` call asks it for *current* frozen
    credentials: botocore refreshes assumed-role credentials before they expire, so a
    hook held for hours (a poking sensor, the trigger) never uses expired ones.

    Mapped to our options: ``key``/``secret``/``token``, ``region_name``, and the S3
    endpoint (``endpoint_url`` of the extra, or ``service_config.s3.endpoint_url``) as
    ``endpoint_url``, which :class:`~airflow_tpc.storage.s3.S3Storage` hands to both s3fs
    (its client kwargs) and boto3.  The temporary values are registered with Airflow's
    secrets masker, as the provider's own ``get_credentials`` does.
    """

    def __init__(self, conn: Connection) -> None:
        try:
            from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook
        except ImportError:
            raise AwsConnectionError(
                f"storage_conn_id {conn.conn_id!r} is an Amazon Web Services ('aws') "
                "connection, which needs the Amazon provider: pip install "
                "'airflow-tpc[amazon]' (apache-airflow-providers-amazon). Without it, use a "
                "generic connection: login = access key id, password = secret access key, "
                'extra {"endpoint_url": ..., "region_name": ..., "token": ...}.') from None

        class _ResolvedAwsHook(AwsBaseHook):
            # The connection was resolved already (the trigger resolves it asynchronously):
            # the provider's hook wraps that one instead of looking it up again.
            def get_connection(self, conn_id: str) -> Connection:  # type: ignore[override]
                return conn

        self.conn_id = conn.conn_id
        self.hook = _ResolvedAwsHook(aws_conn_id=conn.conn_id, client_type="s3")
        self._session: Any = None

    def _fail(self, what: str, exc: Exception) -> AwsConnectionError:
        code = getattr(exc, "response", {}).get("Error", {}).get("Code") \
            if isinstance(getattr(exc, "response", None), dict) else None
        return AwsConnectionError(
            f"aws connection {self.conn_id!r}: could not {what}: {code or type(exc).__name__}")

    def options(self) -> dict[str, Any]:
        """Current credentials, region and endpoint as storage options. Never log these."""
        try:
            if self._session is None:
                self._session = self.hook.get_session(region_name=self.hook.region_name)
            credentials = self._session.get_credentials()
            frozen = credentials.get_frozen_credentials() if credentials is not None else None
            region = self.hook.region_name
            endpoint = self.hook.conn_config.get_service_endpoint_url("s3")
        except AwsConnectionError:
            raise
        except Exception as exc:  # the provider's/botocore's message is not ours to show
            raise self._fail("get credentials (role assumption or credential chain)",
                             exc) from None
        opts: dict[str, Any] = {}
        if frozen is not None and frozen.access_key and frozen.secret_key:
            from airflow.sdk.log import mask_secret

            mask_secret(frozen.secret_key)
            opts["key"], opts["secret"] = frozen.access_key, frozen.secret_key
            if frozen.token:
                mask_secret(frozen.token)
                opts["token"] = frozen.token
        if region:
            opts["region_name"] = region
        if endpoint:
            opts["endpoint_url"] = check_endpoint_url(
                endpoint, f"endpoint_url of connection {self.conn_id!r}")
        return opts
