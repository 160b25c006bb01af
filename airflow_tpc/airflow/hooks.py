"""TpcHook: the one place the Airflow layer turns sink arguments into a core :class:`Sink`
and asks it protocol questions.

Why a hook: every task of the protocol (submit, sensor, trigger, commit, abort, the
admin DAG and the UI plugin) must address the *same* target with the *same*
configuration, and credentials must come from an Airflow connection, never from
operator arguments (those are rendered in the UI and serialised in the DAG).  Why the
queries live here too: the sensor's poke and the trigger's poll must ask the *same*
cheap question (:meth:`TpcHook.check_precommit`), and the abort task and the UI plugin
must agree on which attempts a DAG run owns (:meth:`TpcHook.run_attempts`); as methods of
one class they cannot drift apart, and a regression to an expensive query shows up in
one place.

Like the Amazon provider's ``AwsBaseHookMixin`` + ``aws_conn_id``/``region_name``, the
arguments that say *which* sink (:class:`SinkArgs`) are declared once; the operator and
sensor bases in :mod:`airflow_tpc.airflow.base` and :class:`PrecommitTrigger` all build
their hook from a :class:`SinkArgs`.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import InitVar, asdict, dataclass
from typing import TYPE_CHECKING, Any, Literal

from airflow.sdk import BaseHook

from airflow_tpc import InvalidState, ManifestError, Sink, SinkConfig, Transaction, TxnState
from airflow_tpc.airflow.metrics import (
    ABORTS,
    EXPIRATIONS,
    FENCED,
    PRECOMMIT_DURATION,
    ROLL_FORWARDS,
    TpcMetrics,
)
from airflow_tpc.errors import FencedError, TpcError, TransactionExpired
from airflow_tpc.storage import storage_class
from airflow_tpc.storage.s3 import check_endpoint_url, public_s3_options
from airflow_tpc.tables import open_sink

if TYPE_CHECKING:
    from airflow.sdk.definitions.connection import Connection

    from airflow_tpc.manifest import Manifest, ManifestSummary
    from airflow_tpc.transaction import CommitResult, TxnInfo

#: Storage options that may appear in operator arguments, XComs, trigger kwargs and
#: the Spark conf: everything else (keys, secrets, tokens) comes from the connection.
PUBLIC_STORAGE_KEYS = ("endpoint_url", "region_name")
#: XCom key under which the submit operator publishes the transaction it began.
TXN_XCOM_KEY = "tpc_txn"


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


def sink_config(config: SinkConfig | dict[str, Any] | None) -> SinkConfig:
    if config is None:
        return SinkConfig()
    if isinstance(config, SinkConfig):
        return config
    return SinkConfig(**config)


def sink_config_dict(config: SinkConfig | dict[str, Any] | None) -> dict[str, Any] | None:
    """``config`` as JSON-safe keyword arguments of :class:`SinkConfig` (trigger kwargs, XCom)."""
    if isinstance(config, SinkConfig):
        return asdict(config)
    return dict(config) if config is not None else None


#: Names of the sink arguments, in the order operators, sensor and trigger declare them.
SINK_ARG_NAMES = ("target", "namespace", "storage_conn_id", "storage_options", "sink_config",
                  "catalog_conn_id", "ledger_uri", "replace_where", "write_mode", "add_columns")


def is_table_target(target: str) -> bool:
    """Whether ``target`` names a table (a catalog or table format resolves it) rather than a
    folder: asked of :mod:`airflow_tpc.tables`, which owns the table URI schemes."""
    from airflow_tpc.tables import TABLE_SCHEMES

    return isinstance(target, str) and target.startswith(TABLE_SCHEMES)


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
    only), a Glue catalog's ``glue.access-key-id``/``glue.secret-access-key``.  Other
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
        if key == LEDGER_ROOT_KEY:  # airflow-tpc's own field: see ledger_root_from_connection
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
        return catalog_properties_from_connection(self._conn())

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


@dataclass(frozen=True)
class SinkArgs:
    """Which sink a task addresses: the arguments every protocol task shares.

    Declared once, so the submit, sensor, commit and abort tasks, the trigger (whose
    kwargs are stored in the metadata DB) and the UI plugin cannot disagree about them,
    and one check keeps secrets out: ``storage_options`` holds public options only
    (``endpoint_url``, ``region_name``); credentials come from the *named* connection,
    resolved where the hook runs.

    :param target: ``/abs/path``, ``file:///abs/path`` or ``s3://bucket/prefix``.
    :param namespace: the pipeline's transactional id prefix; one per pipeline and target.
    :param storage_conn_id: connection holding credentials: a generic one (login = access
        key, password = secret; extra ``endpoint_url``/``region_name``/``token``) or, with
        the Amazon provider, an ``aws`` one (:class:`AwsCredentials`: keys, session tokens,
        role assumption). Without it the store's default chain is used (environment,
        profile, instance role).
    :param storage_options: public options only (``endpoint_url``, ``region_name``).
    :param sink_config: :class:`SinkConfig` or its keyword arguments.
    :param catalog_conn_id: for a table target, the ``iceberg_catalog`` connection holding
        the catalog's properties; without it pyiceberg's own configuration is used
        (``~/.pyiceberg.yaml``, ``PYICEBERG_CATALOG__<NAME>__*``).
    :param ledger_uri: for a table target, where its ledger lives apart from the table
        (see :func:`airflow_tpc.tables.open_sink`).
    :param replace_where: for a table target, the rows one epoch owns (a predicate or
        a column mapping; :mod:`airflow_tpc.tables.scope`).
    :param write_mode: ``"replace"`` (default) or ``"append"`` (table targets).
    :param add_columns: an Iceberg target's commit may add the staged files' new columns.
    :param where: who passed them, for the refusal message.
    """

    target: str
    namespace: str
    storage_conn_id: str | None = None
    storage_options: dict[str, Any] | None = None
    sink_config: SinkConfig | dict[str, Any] | None = None
    catalog_conn_id: str | None = None
    ledger_uri: str | None = None
    replace_where: Any = None
    write_mode: str = "replace"
    add_columns: bool = False
    where: InitVar[str] = "SinkArgs"

    def __post_init__(self, where: str) -> None:
        object.__setattr__(self, "storage_options", check_public(self.storage_options, where))

    def serialize(self) -> dict[str, Any]:
        """JSON-safe keyword arguments (trigger kwargs): names and public options only."""
        return {"target": self.target, "namespace": self.namespace,
                "storage_conn_id": self.storage_conn_id,
                "storage_options": dict(self.storage_options or {}),
                "sink_config": sink_config_dict(self.sink_config),
                "catalog_conn_id": self.catalog_conn_id, "ledger_uri": self.ledger_uri,
                "replace_where": self.replace_where, "write_mode": self.write_mode,
                "add_columns": self.add_columns}

    @classmethod
    def from_txn_doc(cls, doc: dict[str, Any], where: str = "transaction XCom") -> SinkArgs:
        """The sink a submit task's ``tpc_txn`` XCom names (target, namespace, connection
        name, public options): how the UI plugin finds a run's transactions."""
        return cls(doc.get("table") or doc["target"], doc["namespace"],
                   doc.get("storage_conn_id") or None, doc.get("storage_options") or None,
                   catalog_conn_id=doc.get("catalog_conn_id") or None,
                   ledger_uri=doc.get("ledger_uri") or None, where=where)

    def hook(self, *, connection: Connection | None = None,
             catalog_connection: Connection | None = None) -> TpcHook:
        return TpcHook(self.target, self.namespace, storage_conn_id=self.storage_conn_id,
                       storage_options=self.storage_options, config=self.sink_config,
                       catalog_conn_id=self.catalog_conn_id, ledger_uri=self.ledger_uri,
                       replace_where=self.replace_where, write_mode=self.write_mode,
                       add_columns=self.add_columns, connection=connection,
                       catalog_connection=catalog_connection)


PrecommitStatus = Literal["ready", "waiting", "failed"]


@dataclass(frozen=True)
class PrecommitCheck:
    """One look at an attempt for the sensor or the trigger (:meth:`TpcHook.check_precommit`).

    ``sealed`` is what the attempt pre-committed when ``status == "ready"``: the validated
    manifest while staged, or the commit decision's digest and totals once committed,
    so the pointer is built from it without reading storage again.
    """

    status: PrecommitStatus
    message: str
    txn: Transaction
    sealed: Manifest | ManifestSummary | None = None


@dataclass(frozen=True)
class CommitOutcome:
    """What :meth:`TpcHook.commit_pointer` did, and whether readers already saw the attempt
    before it (a rerun after a try that published: the Asset event may still be owed)."""

    txn: Transaction
    result: CommitResult
    was_published: bool


class TpcHook(BaseHook):
    """Builds the :class:`Sink` of one target from public options plus a connection, and asks
    it the protocol questions the tasks need.

    :param target: ``/abs/path``, ``file:///abs/path`` or ``s3://bucket/prefix``.
    :param namespace: the pipeline's transactional id prefix; one per pipeline and target.
    :param storage_conn_id: optional connection holding credentials: generic (login =
        access key, password = secret; extra ``endpoint_url``/``region_name``/``token``) or
        the Amazon provider's ``aws`` type (:class:`AwsCredentials`). Without it s3fs uses
        its default chain (environment, profile, instance role).
    :param storage_options: public options only (``endpoint_url``, ``region_name``).
    :param config: :class:`SinkConfig` or its keyword arguments.
    :param catalog_conn_id: a table target's ``iceberg_catalog`` connection
        (:class:`IcebergCatalogHook`); None: pyiceberg's own configuration.
    :param ledger_uri: a table target's ledger apart from the table (managed storage).
    :param replace_where, write_mode: which rows of a table an epoch owns.
    :param add_columns: an Iceberg target's commit may add the staged files' new columns.
    """

    conn_name_attr = "storage_conn_id"
    default_conn_name = "tpc_default"
    conn_type = "generic"
    hook_name = "airflow-tpc storage"

    def __init__(self, target: str, namespace: str, *, storage_conn_id: str | None = None,
                 storage_options: dict[str, Any] | None = None,
                 config: SinkConfig | dict[str, Any] | None = None,
                 catalog_conn_id: str | None = None,
                 ledger_uri: str | None = None,
                 replace_where: Any = None,
                 write_mode: str = "replace",
                 add_columns: bool = False,
                 connection: Connection | None = None,
                 catalog_connection: Connection | None = None) -> None:
        super().__init__()
        self.target = target
        self.catalog_conn_id = catalog_conn_id
        self.ledger_uri = ledger_uri
        self.replace_where = replace_where
        self.write_mode = write_mode
        self.add_columns = add_columns
        self._catalog_connection = catalog_connection
        self.namespace = namespace
        self.storage_conn_id = storage_conn_id
        self.public_options = check_public(storage_options, "TpcHook")
        self.config = sink_config(config)
        self._connection = connection
        self._aws: AwsCredentials | None = None
        self._sink: Sink | None = None
        self._sink_options: dict[str, Any] | None = None
        self.metrics = TpcMetrics(namespace, target)

    def _conn(self) -> Connection | None:
        if self._connection is None and self.storage_conn_id:
            self._connection = self.get_connection(self.storage_conn_id)
        return self._connection

    def storage_options(self) -> dict[str, Any] | None:
        """All options for this process (public + secrets). Never log or return these.

        Only a store that takes credentials gets them (the store class says so, the URI
        is not sniffed): a local target never sees a connection's secret.
        """
        if self.is_table:
            # The table's store is known only once its catalog is opened: a named
            # connection's credentials are meant for it; LocalStorage takes none anyway.
            return {**self.public_options, **self._connection_options()} or None
        if not storage_class(str(self.target)).takes_credentials:
            return None
        return {**self.public_options, **self._connection_options()}

    def _connection_options(self) -> dict[str, Any]:
        """The connection's options; an ``aws`` connection's provider session is kept, so
        every call gives its *current* (refreshed) credentials without a new STS call."""
        conn = self._conn()
        if conn is not None and conn.conn_type == AWS_CONN_TYPE:
            if self._aws is None:
                self._aws = AwsCredentials(conn)
            return self._aws.options()
        return options_from_connection(conn)

    @property
    def is_table(self) -> bool:
        """A table target (``iceberg://...``): a catalog resolves it, not a folder."""
        return is_table_target(str(self.target))

    @property
    def epoch_layout(self) -> bool:
        """Whether a table target's files carry the ``epoch`` column (no
        ``replace_where``, no append): what the job is told to write."""
        return self.replace_where is None and self.write_mode == "replace"

    def _catalog_hook(self) -> IcebergCatalogHook | None:
        if not self.catalog_conn_id and self._catalog_connection is None:
            return None
        return IcebergCatalogHook(self.catalog_conn_id or IcebergCatalogHook.default_conn_name,
                                  connection=self._catalog_connection)

    def catalog_properties(self) -> dict[str, str] | None:
        """The catalog connection's properties (secrets included: never log or return them
        to a task); None without ``catalog_conn_id`` (pyiceberg's own configuration)."""
        hook = self._catalog_hook()
        return None if hook is None else hook.catalog_properties()

    def resolved_ledger_uri(self) -> str | None:
        """Where the table's ledger lives apart from it: ``ledger_uri`` as given, else the
        catalog connection's ``tpc.ledger-root`` plus ``/<namespace>.<table>``; None: in
        the table's location.  What the submit task records in its XCom, so the sensor,
        abort and the run page find the same ledger."""
        if self.ledger_uri or not str(self.target).startswith("iceberg://"):
            return self.ledger_uri or None
        hook = self._catalog_hook()
        root = None if hook is None else hook.ledger_root()
        if root is None:
            return None
        from airflow_tpc.tables.iceberg import IcebergTarget

        return f"{root}/{IcebergTarget.parse(str(self.target)).identifier}"

    def get_sink(self) -> Sink:
        """The core sink of the target: a folder's :class:`Sink`, or a table's (through
        :func:`airflow_tpc.tables.open_sink`, with the catalog connection's properties);
        rebuilt when the connection's credentials changed since it was built
        (assumed-role credentials refreshed by botocore during a long poke or poll)."""
        if self.catalog_conn_id and not self.is_table:
            raise ValueError(f"catalog_conn_id={self.catalog_conn_id!r} is given, but "
                             f"target {self.target!r} is a folder, not a table")
        for name in ("ledger_uri", "replace_where"):
            if getattr(self, name) and not self.is_table:
                raise ValueError(f"{name}={getattr(self, name)!r} is given, but target "
                                 f"{self.target!r} is a folder, not a table")
        options = self.storage_options()
        if self._sink is None or options != self._sink_options:
            self._sink = open_sink(self.target, self.namespace, storage_options=options,
                                   config=self.config,
                                   catalog_properties=self.catalog_properties()
                                   if self.is_table else None,
                                   ledger_uri=self.resolved_ledger_uri(),
                                   replace_where=self.replace_where,
                                   mode=self.write_mode or "replace",
                                   add_columns=bool(self.add_columns))
            self._sink_options = options
        return self._sink

    def committed_files(self, epochs: Any = None) -> dict[str, list[str]]:
        """``{epoch: [file URI, ...]}`` of the committed epochs, as the sink lists them (a
        table's through its library): what ``airflow_tpc.spark.read_committed(spark,
        target, committed=...)`` reads on the job side, which opens no catalog."""
        return self.get_sink().committed_files(epochs)

    def table_check(self, txn: Transaction) -> None:
        """For a table target, the table's check of a sealed attempt (raises
        :class:`~airflow_tpc.tables.TableSchemaError`, a ``ManifestError``): the job side
        seals with the core alone (it never imports a table library), so the sensor runs
        the table sink's pre-commit — which checks the staged files' footers against the
        table, then returns the sealed manifest unchanged.  A folder target: nothing."""
        sink = self.get_sink()
        if getattr(sink, "table_target", None) is not None:
            sink.precommit(txn)

    def job_env(self) -> dict[str, str]:
        """The connection's credentials for the Spark job, as ``AWS_*`` variables.

        For an ``aws`` connection these are the provider's credentials *now* (with role
        assumption: temporary ones and their session token); the job cannot refresh them,
        so they must outlive it (see docs/airflow.md, "Amazon connections").

        Never returned to a caller that logs, and never passed as SparkSubmitOperator
        ``env_vars`` (on YARN and Kubernetes those become ``--conf`` arguments, visible
        in ``ps``): :class:`StagedSparkSubmitOperator` hands them over in a private file
        or the spark-submit process's environment (see its ``job_credentials``).
        """
        opts = self._connection_options()
        env: dict[str, str] = {}
        if opts.get("key") and opts.get("secret"):
            env["AWS_ACCESS_KEY_ID"] = opts["key"]
            env["AWS_SECRET_ACCESS_KEY"] = opts["secret"]
            if opts.get("token"):
                env["AWS_SESSION_TOKEN"] = opts["token"]
        return env

    def job_public_options(self) -> dict[str, Any]:
        """The options the job may see in its Spark conf: endpoint and region only."""
        return public_options(self.storage_options() or self.public_options)

    def transaction(self, txn_doc: dict[str, Any] | str) -> Transaction:
        """Re-load a transaction named in an XCom *from the ledger* (the XCom is not trusted)."""
        doc = json.loads(txn_doc) if isinstance(txn_doc, str) else txn_doc
        claimed = Transaction.from_dict(doc)
        return self.get_sink().transaction(claimed.epoch, claimed.attempt)

    # -- the protocol questions of the tasks --------------------------------------------

    def check_precommit(self, txn_doc: dict[str, Any] | str) -> PrecommitCheck:
        """Is the attempt pre-committed?  One look at storage, blocking; the sensor's poke
        and the trigger's poll both ask exactly this.

        Cheap on purpose, since it runs every ``poke_interval``: the begin record, then
        :meth:`Sink.poll` (one listing of the epoch's ledger, the attempt's decision or
        its manifest), never :meth:`Sink.describe` (which lists and reads every attempt's
        staging).  Failure signals are the ledger's: the attempt was aborted, expired or
        abandoned (the job, an operator or a person gave up on it), a higher attempt has
        begun (this one is fenced: its manifest would never be committed), or it passed
        its timeout.
        """
        sink = self.get_sink()
        txn = self.transaction(txn_doc)
        try:
            status = sink.poll(txn)
        except ManifestError as exc:
            return PrecommitCheck("failed", f"invalid pre-commit manifest for {txn.txn_id}: "
                                            f"{exc}", txn)
        if status.state is TxnState.COMMITTED:
            # A cleared sensor re-running after the commit: the pre-commit it waits for
            # happened (the decision records its digest and totals). Rare: one more read.
            return PrecommitCheck("ready", f"{txn.txn_id} is already COMMITTED", txn,
                                  sink.sealed(txn))
        if status.state in (TxnState.ABORTED, TxnState.EXPIRED, TxnState.ABANDONED):
            if status.state is TxnState.EXPIRED:
                self.metrics.incr(EXPIRATIONS)
            return PrecommitCheck(
                "failed", f"{txn.txn_id} was {status.state} ({status.reason}): the job failed "
                          "or the attempt was given up", txn)
        if status.highest_attempt > txn.attempt:
            self.metrics.incr(FENCED)
            return PrecommitCheck(
                "failed", f"{txn.txn_id} is fenced: attempt {status.highest_attempt} of epoch "
                          f"{txn.epoch} has begun since, so this attempt can never be committed",
                txn)
        manifest = status.manifest
        if manifest is not None:
            try:
                self.table_check(txn)
            except ManifestError as exc:
                return PrecommitCheck("failed", f"{txn.txn_id} cannot go into the table: {exc}",
                                      txn)
            return PrecommitCheck("ready", f"{txn.txn_id} pre-committed: {manifest.total_files} "
                                           f"files, digest {manifest.digest}", txn, manifest)
        if txn.expired():
            self.metrics.incr(EXPIRATIONS)
            return PrecommitCheck("failed", f"{txn.txn_id} passed its {txn.timeout_s:.0f} s "
                                            "transaction timeout without a pre-commit", txn)
        return PrecommitCheck("waiting", f"{txn.txn_id} not pre-committed yet", txn)

    def precommit_pointer(self, check: PrecommitCheck) -> dict[str, Any]:
        """The sensor's XCom: a few hundred bytes naming what a "ready" check saw (manifest
        URI, digest, counts), built without another storage request; the commit re-reads
        and re-verifies the manifest against this digest."""
        sealed = check.sealed
        if check.status != "ready" or sealed is None:
            raise InvalidState(f"{check.txn.txn_id} is not pre-committed ({check.message})")
        txn = check.txn
        created_at = getattr(sealed, "created_at", None)  # a Manifest: sealed, not decided
        if created_at is not None:
            self.metrics.timing(PRECOMMIT_DURATION, created_at - txn.started_at)
        return {"txn_id": txn.txn_id, "epoch": txn.epoch, "attempt": txn.attempt,
                "manifest_uri": self.get_sink().manifest_uri(txn), "digest": sealed.digest,
                "files": sealed.total_files, "bytes": sealed.total_bytes,
                "rows": sealed.total_rows}

    def commit_pointer(self, pointer: dict[str, Any], *, force: bool = False) -> CommitOutcome:
        """Commit the attempt a sensor pointer names, against the digest it validated.

        The transaction is re-loaded from the ledger (the XCom is not trusted) and the
        core re-verifies staging against ``pointer["digest"]`` before its one
        put-if-absent decision.  ``was_published`` (asked before the commit) tells the
        operator whether this call made the data visible or a previous try had.
        """
        sink = self.get_sink()
        txn = sink.transaction(pointer["epoch"], int(pointer["attempt"]))
        was_published = sink.is_published(txn)  # one ledger listing, not describe()
        started = time.monotonic()
        try:
            result = sink.commit(txn, expected_digest=pointer["digest"], force=force)
        except FencedError:
            self.metrics.incr(FENCED)
            raise
        except TransactionExpired:
            self.metrics.incr(EXPIRATIONS)
            raise
        self._commit_metrics(result, was_published, time.monotonic() - started)
        return CommitOutcome(txn, result, was_published)

    def _commit_metrics(self, result: CommitResult, was_published: bool,
                        seconds: float) -> None:
        """Count what this commit call made visible, once: a fresh commit, or this
        attempt's promotion rolled forward after a try that decided and died before
        publishing (that try emitted nothing); never a no-op rerun after a publish.
        Other attempts' pending promotions it finished are roll-forwards too."""
        rolled_here = result.outcome == "already_committed" and not was_published
        if result.outcome == "committed" or rolled_here:
            manifest = result.manifest
            self.metrics.committed(seconds, manifest.total_files, manifest.total_bytes,
                                   manifest.total_rows)
        rolled = len(result.rolled_forward) + (1 if rolled_here else 0)
        if rolled:
            self.metrics.incr(ROLL_FORWARDS, rolled)

    def run_attempts(self, txn_doc: dict[str, Any], dag_id: str, run_id: str) -> list[TxnInfo]:
        """The attempts of the XCom's epoch that this DAG run owns: the one the XCom names,
        and every attempt whose begin record names this run (earlier tries, whose XCom
        a retry replaced).  The abort task and the UI plugin both use this."""
        claimed = Transaction.from_dict(txn_doc)
        return [info for info in self.get_sink().describe(claimed.epoch)
                if info.attempt == claimed.attempt
                or ((info.owner or {}).get("dag_id"), (info.owner or {}).get("run_id"))
                == (dag_id, run_id)]

    def abort_run(self, txn_doc: dict[str, Any], dag_id: str, run_id: str,
                  reason: str) -> dict[str, list[str]]:
        """Abort every undecided attempt this run owns (:meth:`run_attempts`); finish the
        cleanup of aborted ones that left staging (a try killed between the abort decision
        and the cleanup; aborting again is idempotent).  Committed attempts are never
        touched: they are returned under ``committed`` (a commit that failed after its
        decision must be rolled forward, not thrown away)."""
        sink = self.get_sink()
        aborted: list[str] = []
        committed: list[str] = []
        for info in self.run_attempts(txn_doc, dag_id, run_id):
            if info.state is TxnState.COMMITTED:
                committed.append(info.txn_id)
                continue
            finished = info.state in (TxnState.ABORTED, TxnState.EXPIRED)
            if finished and not info.staging_files:
                continue
            try:
                sink.abort(sink.transaction(info.epoch, info.attempt), reason)
            except InvalidState as exc:  # committed concurrently
                committed.append(info.txn_id)
                self.log.warning("%s", exc)
                continue
            if finished:
                self.log.info("%s was already %s; removed the %d staged file(s) it left",
                              info.txn_id, info.state.value, info.staging_files)
            else:
                aborted.append(info.txn_id)
        if aborted:
            self.metrics.incr(ABORTS, len(aborted))
        return {"aborted": aborted, "committed": committed}

    def abort_quietly(self, txn: Transaction, reason: str) -> bool:
        """Abort ``txn`` now if possible; a failure is logged, never raised (the next attempt
        fences it and the abort task or ``recover`` cleans it).  True when aborted."""
        try:
            self.get_sink().abort(txn, reason)
        except Exception as exc:
            self.log.warning("Could not abort %s (%s); the next attempt fences it and the "
                             "abort task or recover cleans it", txn.txn_id, exc)
            return False
        self.metrics.incr(ABORTS)
        self.log.info("Aborted %s: %s", txn.txn_id, reason)
        return True

    def emit_health(self, now: float | None = None) -> dict[str, Any]:
        """Compute the target's health (:class:`~airflow_tpc.health.TargetHealth`: one
        ``describe``) and send it as gauges; returns it.  For a monitoring task run every
        few minutes (the admin DAG's ``status`` does it), not for the commit path."""
        from airflow_tpc.health import TargetHealth

        health = TargetHealth.of(self.get_sink().describe(now=now), now)
        self.metrics.health(health)
        return health.to_dict()
