"""The ``iceberg_catalog`` connection type (:class:`IcebergCatalogHook`): a table target's
catalog properties and ledger root, read from a connection.

Apart from :class:`~airflow_tpc.airflow.hooks.tpc.TpcHook` because it is a connection type of
its own (registered in the provider info, with its own form and *Test* button), and only
table targets need it; the sink hook asks it for the properties where it runs.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from airflow.sdk import BaseHook

from airflow_tpc.airflow.hooks.glue_credentials import AWS_CONN_KEY, aws_conn_id_of, glue_properties

if TYPE_CHECKING:
    from airflow.sdk.definitions.connection import Connection

#: The one key of an ``iceberg_catalog`` connection's extra that is not a pyiceberg
#: property: the folder under which each table of the catalog keeps its ledger apart
#: (``<root>/<namespace>.<table>``), for catalogs in managed table storage.
LEDGER_ROOT_KEY = "tpc.ledger-root"

#: Catalog property names whose values are secrets (masked in logs as soon as they are read).
_SECRET_PROPERTY = re.compile(r"(?i)secret|passw|token|credential|private|session|key(?!-id)")


def catalog_properties_from_connection(conn: Connection) -> dict[str, str]:
    """pyiceberg catalog properties from an ``iceberg_catalog`` connection.

    ``extra`` holds the properties exactly as pyiceberg names them (``type``, ``uri``,
    ``warehouse``, ``s3.endpoint``, ``credential`` ...).  The form fields fill what
    ``extra`` leaves out: host (+ port) is ``uri``, schema is ``warehouse``; login and
    password are the catalog's credentials where pyiceberg has a name for them: a REST
    catalog's OAuth2 ``credential`` (``login:password``) or bearer ``token`` (password
    only), a Glue catalog's ``glue.access-key-id``/``glue.secret-access-key`` (or, with
    ``tpc.aws-conn-id`` in extra, none: :meth:`IcebergCatalogHook.catalog_properties`
    takes them from that ``aws`` connection).  Other
    catalog types take their secrets in ``extra`` (or their ``uri``); a login/password
    there is refused rather than dropped.  Every secret-looking value is handed to
    Airflow's secrets masker before it can reach a log line.
    """
    extra = conn.extra_dejson if conn.extra else {}
    if not isinstance(extra, dict):
        raise ValueError(f"connection {conn.conn_id!r}: extra must be a JSON object of pyiceberg "
                         "catalog properties")
    props: dict[str, str] = {}
    for key, value in extra.items():
        if key in (LEDGER_ROOT_KEY, AWS_CONN_KEY):  # airflow-tpc's own fields
            continue
        if isinstance(value, (dict, list)):
            raise ValueError(f"connection {conn.conn_id!r}: catalog property {key!r} must be a "
                             "string, number or boolean (pyiceberg properties are strings)")
        if value is None:
            continue
        props[str(key)] = str(value).lower() if isinstance(value, bool) else str(value)
    if conn.host and "uri" not in props:
        uri = conn.host
        if conn.port and "://" in uri:
            scheme, rest = uri.split("://", 1)
            netloc, slash, path = rest.partition("/")
            if ":" not in netloc:
                uri = f"{scheme}://{netloc}:{conn.port}{slash}{path}"
        props["uri"] = uri
    if conn.schema and "warehouse" not in props:
        props["warehouse"] = conn.schema
    kind = props.get("type", "").lower()
    if not kind and props.get("uri", "").lower().startswith(("http://", "https://")):
        kind = "rest"
    aws_conn_id_of(conn, kind)  # a glue catalog's aws connection: checked here
    if conn.login or conn.password:
        if kind == "rest":
            if conn.login and conn.password:
                props.setdefault("credential", f"{conn.login}:{conn.password}")
            elif conn.password:
                props.setdefault("token", conn.password)
            else:
                raise ValueError(f"connection {conn.conn_id!r}: a REST catalog's login needs a "
                                 "password (client id and secret of its OAuth2 credential)")
        elif kind == "glue":
            if conn.login:
                props.setdefault("glue.access-key-id", conn.login)
            if conn.password:
                props.setdefault("glue.secret-access-key", conn.password)
        else:
            raise ValueError(
                f"connection {conn.conn_id!r}: login/password are used for REST (OAuth2 "
                "credential or token) and Glue (access key) catalogs only; give a "
                f"{kind or 'catalog of this'} type's secrets in extra under pyiceberg's "
                "property names")
    _mask(props)
    return props


def ledger_root_from_connection(conn: Connection) -> str | None:
    """The connection's ``tpc.ledger-root`` (extra), or None.

    Why a connection field: in managed table storage (S3 Tables and other table buckets)
    *every* table of the catalog needs its ledger apart, so the place for ledgers is a
    property of the catalog, set once by whoever sets up the connection, rather than an
    argument every DAG must repeat.  Each table's ledger is ``<root>/<namespace>.<table>``
    (an identifier is unique in its catalog; the claim there names the table, so two
    tables can never share one).  An operator's own ``ledger_uri`` wins over it.
    """
    extra = conn.extra_dejson if conn.extra else {}
    root = extra.get(LEDGER_ROOT_KEY) if isinstance(extra, dict) else None
    if root is None or root == "":
        return None
    if not isinstance(root, str) or "://" not in root and not root.startswith("/"):
        raise ValueError(f"connection {conn.conn_id!r}: {LEDGER_ROOT_KEY} must be a folder URI "
                         f"(scheme://bucket/prefix) or an absolute path, not {root!r}")
    return root.rstrip("/")


def _mask(props: dict[str, str]) -> None:
    """Hand every secret-looking property (and a password in a ``uri``) to the masker."""
    from urllib.parse import urlsplit

    try:
        from airflow.sdk.log import mask_secret
    except ImportError:  # pragma: no cover - older task SDKs
        return
    for key, value in props.items():
        if value and _SECRET_PROPERTY.search(key):
            mask_secret(value)
    uri = props.get("uri")
    if uri:
        try:
            password = urlsplit(uri).password
        except ValueError:
            password = None
        if password:
            mask_secret(password)


class IcebergCatalogHook(BaseHook):
    """The ``iceberg_catalog`` connection type: the properties of one pyiceberg catalog.

    Why a connection: a catalog's properties hold secrets (a REST catalog's OAuth2
    credential or token, a database password, object-store keys), and operator
    arguments are rendered in the UI and serialised with the DAG.  The protocol tasks
    take the connection's *name* (``catalog_conn_id``) and resolve it where they run;
    the properties never reach an XCom, a rendered field, a trigger row or the Spark
    conf (the job side never opens the catalog).  See
    :func:`catalog_properties_from_connection` for how the fields map.
    """

    conn_name_attr = "catalog_conn_id"
    default_conn_name = "iceberg_catalog_default"
    conn_type = "iceberg_catalog"
    hook_name = "Iceberg catalog (airflow-tpc)"

    def __init__(self, catalog_conn_id: str = default_conn_name, *,
                 connection: Connection | None = None) -> None:
        super().__init__()
        self.catalog_conn_id = catalog_conn_id
        self._connection = connection

    def get_conn(self) -> dict[str, str]:
        """The catalog properties (with secrets: never log or return them to a task)."""
        return self.catalog_properties()

    def _conn(self) -> Connection:
        if self._connection is None:
            self._connection = self.get_connection(self.catalog_conn_id)
        return self._connection

    def catalog_properties(self) -> dict[str, str]:
        """The connection's properties; for a glue catalog naming an ``aws`` connection
        (``tpc.aws-conn-id``), plus its Glue and S3 credentials, region and endpoints
        (a region or endpoint the catalog connection gives itself wins)."""
        conn = self._conn()
        props = catalog_properties_from_connection(conn)
        aws_id = aws_conn_id_of(conn, props.get("type", "").lower())
        if aws_id:
            for key, value in glue_properties(conn.conn_id, aws_id,
                                              self._aws_conn(conn.conn_id, aws_id)).items():
                props.setdefault(key, value)
            _mask(props)
        return props

    def _aws_conn(self, catalog_conn_id: str, aws_conn_id: str) -> Connection:
        from airflow.sdk.exceptions import AirflowNotFoundException

        try:
            return self.get_connection(aws_conn_id)
        except AirflowNotFoundException:
            raise ValueError(f"connection {catalog_conn_id!r}: its {AWS_CONN_KEY} "
                             f"{aws_conn_id!r} is not a defined connection") from None

    def ledger_root(self) -> str | None:
        """Where this catalog's tables keep their ledgers apart (``tpc.ledger-root``)."""
        return ledger_root_from_connection(self._conn())

    def test_connection(self) -> tuple[bool, str]:
        """Open the catalog and list its namespaces (the UI's *Test* button)."""
        try:
            from airflow_tpc.tables.catalogs import open_catalog

            catalog = open_catalog(self.catalog_conn_id, self.catalog_properties())
            found = len(catalog.list_namespaces())
        except Exception as exc:
            return False, f"{type(exc).__name__}: {exc}"
        return True, f"catalog reachable: {found} top-level namespace(s)"
