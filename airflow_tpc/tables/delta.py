"""Delta Lake targets through delta-rs (``deltalake``): an epoch's commit is exactly one
Delta version.

Declaring a target::

    from airflow_tpc.tables import open_table_sink
    sink = open_table_sink("delta+file:///data/tables/daily_counts", "daily_counts")
    sink = open_table_sink("delta+s3://bucket/tables/daily_counts", "daily_counts",
                           storage_options={"endpoint_url": ..., "region_name": ...})

``delta+<location>`` names the table by its location (Delta has no catalog):
``delta+file:///abs/path`` or ``delta+s3://bucket/prefix``.  ``storage_options``
are airflow-tpc's (fsspec's names, as for a folder target); they are translated
once into delta-rs's object-store options (``AWS_ENDPOINT_URL``,
``AWS_ACCESS_KEY_ID`` ...) and into pyarrow's S3 filesystem for reading footers.
``catalog_properties``, for a Delta target, are extra delta-rs storage options
merged over the translated ones (e.g. ``AWS_S3_LOCKING_PROVIDER``).  None of them
is ever logged or put in an error.

Layout (the sink's root is the table location)::

    <table>/_delta_log/                         Delta's log: what readers read
    <table>/_tpc/                               ledger and namespace claim
    <table>/_tpc_staging/epoch=E/attempt=N/     staging: the job writes Parquet here
    <table>/epoch=E/_tpc_published.json         marker: what the last airflow-tpc
                                                commit of E put in the table

Delta readers read only the files the log names, so staged, aborted and displaced
files are invisible to them.  What one commit does, after the ledger decision
(:class:`DeltaCommit`): one Delta commit of ``remove`` actions for the epoch's
current files (partition ``epoch=E``) and ``add`` actions for the staged files where
they are (relative paths, ``partitionValues={"epoch": E}``, ``numRecords``
statistics), with an application transaction ``txn(appId="airflow-tpc/<namespace>/
<epoch>", version=<attempt>)`` and ``airflow-tpc.*`` keys (txn id, manifest digest,
epoch, attempt, namespace) in its ``commitInfo``.  The ``txn`` makes the commit
idempotent: a roll-forward that finds the epoch's ``txn`` version at this attempt
commits nothing again; one that finds a higher attempt is stale and never applied.
The first commit creates the table (version 0) from the staged files' schema,
partitioned by ``epoch``.

The staged files may or may not hold the ``epoch`` column: Delta takes a partition
column's value from the log's ``partitionValues``; if a file holds the column too,
every row must hold the epoch's name (checked from its statistics), and readers
(delta-rs, pyarrow over :meth:`DeltaTarget.pyarrow_dataset`, DuckDB over that) see
the same value either way.

The sink is :class:`~airflow_tpc.tables.base.TableSink` and the switch's protocol
:class:`~airflow_tpc.tables.switch.TableCommit`'s, as for Iceberg.  What is Delta's
own lives beside this module: the table (:mod:`.delta_table`), its store and log
(:mod:`.delta_store`), the staged files' schema rules (:mod:`.delta_files`), the
commit (:mod:`.delta_commit`) and a ``replace_where`` commit's rewrites
(:mod:`.delta_scope`, :mod:`.delta_rewrite`).
"""

from __future__ import annotations

from typing import Any

from ..core.ledger import epoch_sort_key
from ..errors import TpcError
from .base import TableSink
from .delta_commit import DeltaCommit
from .delta_store import delta_storage_options  # noqa: F401  (re-exported)
from .delta_table import DeltaLakeTable, app_id
from .scope import Scope
from .staged import EPOCH_COLUMN, TableSchemaError  # noqa: F401  (TableSchemaError: re-exported)

__all__ = ["DeltaCommit", "DeltaSink", "DeltaTarget", "TableSchemaError", "app_id"]

#: Staging's folder below the table location: ``_``-prefixed, so Delta's vacuum (and
#: every Delta reader) leaves it alone.
STAGING_DIR = "_tpc_staging"


class DeltaTarget(DeltaLakeTable):
    """One Delta table, ``delta+file:///path`` or ``delta+s3://bucket/prefix``
    (:class:`~airflow_tpc.tables.delta_table.DeltaLakeTable`), with its switch."""

    def strategy(self, scope: dict[str, Any] | None = None) -> DeltaCommit:
        """The switch of a decision that replaces ``scope`` (its record's)."""
        return DeltaCommit(self, Scope.from_doc(scope))


class DeltaSink(TableSink):
    """A :class:`~airflow_tpc.Sink` whose target is a Delta table: the shared table
    skeleton (:class:`~airflow_tpc.tables.base.TableSink`) with staging in
    ``<table>/_tpc_staging`` and :class:`DeltaCommit` as the switch."""

    staging_dir = STAGING_DIR
    target_type = DeltaTarget
    table_target: DeltaTarget

    def _check_scope(self, scope: Scope) -> None:
        if scope.add_columns:
            raise TpcError("add_columns is supported for Iceberg targets; a Delta target "
                           "refuses a column its table lacks")

    def committed_files(self, epochs: Any = None) -> dict[str, list[str]]:
        """Read-committed view from the table's log (what Delta readers read): epoch ->
        URIs of its current data files, for the epochs this pipeline committed (its
        ``txn`` is in the table).  Not from the markers: Delta's full vacuum deletes
        files under ``epoch=E/`` that the log does not name, markers included (the
        next recover writes them again)."""
        import pyarrow as pa

        table = self.table_target.load_table()
        if table is None:
            return {}
        wanted = None if epochs is None else {str(e) for e in epochs}
        actions = pa.table(self.table_target._call("list the files of", table.get_add_actions,
                                                   flatten=True))
        col = f"partition.{EPOCH_COLUMN}"
        by_epoch: dict[str, list[str]] = {}
        for row in actions.select(["path", col]).to_pylist():
            epoch = row[col]
            if epoch is not None and (wanted is None or epoch in wanted):
                by_epoch.setdefault(epoch, []).append(self.table_target.file_uri(row["path"]))
        out = {e: sorted(files) for e, files in by_epoch.items()
               if table.transaction_version(app_id(self.namespace, e))}
        return dict(sorted(out.items(), key=lambda kv: epoch_sort_key(kv[0])))
