"""TpcHook: the one place the Airflow layer turns operator arguments into a core :class:`Sink`.

Why a hook: every task of the protocol (submit, sensor, trigger, commit, abort, the
admin DAG and the UI plugin) must address the *same* target with the *same*
configuration, and credentials must come from an Airflow connection, never from
operator arguments (those are rendered in the UI and serialised in the DAG).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseHook

from airflow_tpc import Sink, SinkConfig, Transaction
from airflow_tpc.storage.s3 import check_endpoint_url, public_s3_options

if TYPE_CHECKING:
    from airflow.sdk.definitions.connection import Connection

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


def options_from_connection(conn: Connection | None) -> dict[str, Any]:
    """fsspec/s3fs style options from a connection (login/password/extra)."""
    if conn is None:
        return {}
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


def sink_config(config: SinkConfig | dict[str, Any] | None) -> SinkConfig:
    if config is None:
        return SinkConfig()
    if isinstance(config, SinkConfig):
        return config
    return SinkConfig(**config)


class TpcHook(BaseHook):
    """Builds the :class:`Sink` of one target from public options plus a connection.

    :param target: ``/abs/path``, ``file:///abs/path`` or ``s3://bucket/prefix``.
    :param namespace: the pipeline's transactional id prefix; one per pipeline and target.
    :param storage_conn_id: optional connection holding credentials (login = access key,
        password = secret; extra ``endpoint_url``/``region_name``). Without it s3fs uses
        its default chain (environment, profile, instance role).
    :param storage_options: public options only (``endpoint_url``, ``region_name``).
    :param config: :class:`SinkConfig` or its keyword arguments.
    """

    conn_name_attr = "storage_conn_id"
    default_conn_name = "tpc_default"
    conn_type = "generic"
    hook_name = "airflow-tpc storage"

    def __init__(self, target: str, namespace: str, *, storage_conn_id: str | None = None,
                 storage_options: dict[str, Any] | None = None,
                 config: SinkConfig | dict[str, Any] | None = None,
                 connection: Connection | None = None) -> None:
        super().__init__()
        self.target = target
        self.namespace = namespace
        self.storage_conn_id = storage_conn_id
        self.public_options = check_public(storage_options, "TpcHook")
        self.config = sink_config(config)
        self._connection = connection
        self._sink: Sink | None = None

    def _conn(self) -> Connection | None:
        if self._connection is None and self.storage_conn_id:
            self._connection = self.get_connection(self.storage_conn_id)
        return self._connection

    def storage_options(self) -> dict[str, Any] | None:
        """All options for this process (public + secrets). Never log or return these."""
        if not str(self.target).startswith(("s3://", "s3a://")):
            return None
        return {**self.public_options, **options_from_connection(self._conn())}

    def get_sink(self) -> Sink:
        if self._sink is None:
            self._sink = Sink(self.target, self.namespace, storage_options=self.storage_options(),
                              config=self.config)
        return self._sink

    def job_env(self) -> dict[str, str]:
        """The connection's credentials for the Spark job, as ``AWS_*`` variables.

        Never returned to a caller that logs, and never passed as SparkSubmitOperator
        ``env_vars`` (on YARN and Kubernetes those become ``--conf`` arguments, visible
        in ``ps``): :class:`StagedSparkSubmitOperator` hands them over in a private file
        or the spark-submit process's environment (see its ``job_credentials``).
        """
        opts = options_from_connection(self._conn())
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
