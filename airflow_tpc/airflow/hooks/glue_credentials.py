"""A Glue catalog's AWS credentials from an Amazon ``aws`` connection.

An ``iceberg_catalog`` connection of type glue may name an ``aws`` connection in its extra
(``tpc.aws-conn-id``). Why: the team's AWS identity (static keys, a session token, a
role to assume, the region, private endpoints) already lives in an ``aws`` connection
that the S3 storage uses (``storage_conn_id``); copying its keys into the catalog
connection would keep two copies of one secret and could not assume a role at all. The
Amazon provider's own hook resolves it (:class:`~airflow_tpc.airflow.hooks.credentials.
AwsCredentials`, as for storage), and the result becomes pyiceberg's Glue *and* S3
properties (the table's files are read and written by pyiceberg's FileIO with the same
identity). The values exist only in the catalog properties of the process that opens
the catalog: masked at once, never in an XCom, a rendered field or the Spark conf (the
job side never opens the catalog), and no error message repeats one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow_tpc.airflow.hooks.credentials import AWS_CONN_TYPE, AwsConnectionError, AwsCredentials

if TYPE_CHECKING:
    from airflow.sdk.definitions.connection import Connection

#: The extra key of a glue ``iceberg_catalog`` connection naming its ``aws`` connection.
AWS_CONN_KEY = "tpc.aws-conn-id"

#: Credential properties the ``aws`` connection supplies; giving any of them in the
#: catalog connection as well would leave two identities to choose from.
_CREDENTIALS = tuple(f"{p}.{k}" for p in ("glue", "s3", "client")
                     for k in ("access-key-id", "secret-access-key", "session-token",
                               "profile-name", "role-arn"))


def aws_conn_id_of(conn: Connection, kind: str) -> str | None:
    """The ``tpc.aws-conn-id`` a catalog connection names, checked; None when absent.

    Refused (one message naming fields, never values): on a catalog that is not glue,
    beside login/password, or beside credential properties in extra.
    """
    extra = conn.extra_dejson if conn.extra else {}
    value = extra.get(AWS_CONN_KEY) if isinstance(extra, dict) else None
    if value is None or value == "":
        return None
    where = f"connection {conn.conn_id!r}"
    if not isinstance(value, str):
        raise ValueError(f"{where}: {AWS_CONN_KEY} must be the id of an aws connection")
    if kind != "glue":
        raise ValueError(f"{where}: {AWS_CONN_KEY} gives a Glue catalog its AWS credentials; "
                         f"this catalog's type is {kind or 'not set'!r}, not 'glue'")
    twice = [k for k in _CREDENTIALS if k in extra]
    if conn.login or conn.password:
        twice.insert(0, "login/password")
    if twice:
        raise ValueError(f"{where}: credentials come from the aws connection {value!r} "
                         f"({AWS_CONN_KEY}) and also from {twice}: keep one")
    return value


def glue_properties(catalog_conn_id: str, aws_conn_id: str, aws_conn: Connection
                    ) -> dict[str, str]:
    """pyiceberg Glue and S3 properties from a resolved ``aws`` connection.

    ``glue.*`` for the catalog, ``s3.*`` for the table's FileIO: access key, secret and
    session token as the provider resolves them *now* (role assumption included), the
    region, and each service's endpoint when the connection sets one (``endpoint_url``
    of its extra, or ``service_config.<glue|s3>.endpoint_url``).
    """
    where = f"connection {catalog_conn_id!r}: its {AWS_CONN_KEY} {aws_conn_id!r}"
    if aws_conn.conn_type != AWS_CONN_TYPE:
        raise ValueError(f"{where} is a {aws_conn.conn_type!r} connection, not an Amazon Web "
                         f"Services ({AWS_CONN_TYPE!r}) one")
    creds = AwsCredentials(aws_conn)
    opts: dict[str, Any] = creds.options()  # masks the secret and the token
    try:
        glue_endpoint = creds.hook.conn_config.get_service_endpoint_url("glue")
    except Exception as exc:  # the provider's message is not ours to show
        raise AwsConnectionError(f"{where}: could not read its Glue endpoint: "
                                 f"{type(exc).__name__}") from None
    props: dict[str, str] = {}
    for ours, name in (("key", "access-key-id"), ("secret", "secret-access-key"),
                       ("token", "session-token"), ("region_name", "region")):
        if opts.get(ours):
            props[f"glue.{name}"] = props[f"s3.{name}"] = str(opts[ours])
    if glue_endpoint:
        props["glue.endpoint"] = str(glue_endpoint)
    if opts.get("endpoint_url"):
        props["s3.endpoint"] = str(opts["endpoint_url"])
    return props
