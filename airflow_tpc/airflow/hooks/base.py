"""The shared base of :class:`~airflow_tpc.airflow.hooks.tpc.TpcHook`: sink arguments plus a
connection turned into the core :class:`Sink` of one target.

Like the Amazon provider's ``AwsBaseHook`` under its service hooks: this base owns the
connection, the credentials and the sink it builds (rebuilt when refreshed credentials
change), and nothing of the protocol; the questions the tasks ask of the sink are
:class:`~airflow_tpc.airflow.hooks.tpc.TpcHook`'s.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseHook

from airflow_tpc import Sink, SinkConfig, Transaction
from airflow_tpc.airflow.hooks.azure_credentials import AZURE_CONN_TYPES, azure_job_env
from airflow_tpc.airflow.hooks.catalog import IcebergCatalogHook
from airflow_tpc.airflow.hooks.credentials import (
    AWS_CONN_TYPE,
    AwsCredentials,
    check_public,
    options_from_connection,
    public_options,
)
from airflow_tpc.airflow.utils.metrics import TpcMetrics
from airflow_tpc.storage import storage_class
from airflow_tpc.tables import open_sink

if TYPE_CHECKING:
    from airflow.sdk.definitions.connection import Connection


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


def is_table_target(target: str) -> bool:
    """Whether ``target`` names a table (a catalog or table format resolves it) rather than a
    folder: asked of :mod:`airflow_tpc.tables`, which owns the table URI schemes."""
    from airflow_tpc.tables import TABLE_SCHEMES

    return isinstance(target, str) and target.startswith(TABLE_SCHEMES)


class TpcBaseHook(BaseHook):
    """Builds the :class:`Sink` of one target from public options plus a connection
    (:class:`~airflow_tpc.airflow.hooks.tpc.TpcHook` documents the arguments)."""

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
        the table sink's pre-commit — which checks the staged files' footers (those the
        job kept) against the table, seals the statistics the commit builds from (once:
        a later check reads no footer), and returns the sealed manifest unchanged.  A
        folder target: nothing."""
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
        conn = self._conn()
        if conn is not None and conn.conn_type in AZURE_CONN_TYPES:
            return azure_job_env(opts)  # AZURE_STORAGE_* (docs/storage.md)
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
