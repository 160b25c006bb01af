"""Iceberg targets: the commit of an epoch is exactly one Iceberg snapshot.

Declaring a target::

    from airflow_tpc.tables import open_table_sink
    sink = open_table_sink("iceberg://local/analytics.daily_counts", "daily_counts",
                           catalog_properties={"type": "sql",
                                               "uri": "sqlite:////data/catalog.db",
                                               "warehouse": "file:///data/warehouse"})

``iceberg://<catalog>/<namespace>.<table>`` names a pyiceberg catalog (its
properties as pyiceberg names them: given here, or from ``~/.pyiceberg.yaml`` /
``PYICEBERG_CATALOG__<NAME>__*`` as ``load_catalog`` reads them) and a table in
it.  The result is an ordinary :class:`~airflow_tpc.Sink` (begin, precommit,
commit, abort, recover, gc) whose target root is the table's location:

    <location>/_tpc/                               ledger and namespace claim, as for folders
    <location>/data/_tpc_staging/epoch=E/attempt=N/ staging: the job writes Parquet here
    <location>/epoch=E/_tpc_published.json          marker: what the last airflow-tpc
                                                    commit of E put in the table

Staging is inside the table's data location because the staged files *become*
the table's data files (``add_files`` semantics, no copy).  Promotion is forced
to ``manifest`` mode: the decision's mode says "the staged files are the data".

What one commit does, after the ledger decision (:class:`IcebergSnapshot`):
one Iceberg transaction with one ``overwrite`` snapshot that removes the data
files of partition ``epoch=E`` and adds the staged files, carrying
``airflow-tpc.*`` properties (txn id, manifest digest, epoch, attempt) in its
summary.  Before committing it looks for the manifest digest in the table's
snapshots, so a crash after the table commit (before the ledger records it)
rolls forward to exactly one snapshot; a higher attempt of E found there means
this lower attempt is never applied.

The sink is :class:`~airflow_tpc.tables.base.TableSink` (the skeleton shared with
Delta): the guarded staging removal (``TableLayout``), the schema checks at
pre-commit and commit, ``table_version`` and attempt numbering come from there;
the switch's protocol is :class:`~airflow_tpc.tables.switch.TableCommit`'s.  What is
Iceberg's own lives beside this module: the table and its catalog
(:mod:`.iceberg_table`), the staged files' checks and statistics
(:mod:`.iceberg_files`), the snapshot commit (:mod:`.iceberg_commit`).

Requirements on the staged files, checked at pre-commit and again at commit
before the decision (:meth:`IcebergTarget.check_staged`): Parquet with
statistics, a string column ``epoch`` holding exactly the epoch's name (the job
writes it: ``add_files`` infers the identity partition from each file's column
statistics, so the files must carry it), a schema the table can take.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlparse

from ..core.manifest import Manifest
from ..core.records import DECISION, CommitDecision
from ..errors import TpcError
from ..storage.ahead import ahead_pool
from .base import TableLayout, TableSink  # noqa: F401  (TableLayout: it lived here first)
from .iceberg_commit import IcebergSnapshot, prepare
from .iceberg_table import IcebergTable
from .scope import Scope
from .staged import TableSchemaError  # noqa: F401  (re-exported)
from .target import (  # noqa: F401  (tests and users read them from here)
    PROP_ATTEMPT,
    PROP_DIGEST,
    PROP_EPOCH,
    PROP_NAMESPACE,
    PROP_TXN_ID,
)

#: Where staging lives below the table location (inside its default data path).
STAGING_DIR = "data/_tpc_staging"


class IcebergTarget(IcebergTable):
    """One Iceberg table in one catalog, ``iceberg://<catalog>/<namespace>.<table>``
    (:class:`~airflow_tpc.tables.iceberg_table.IcebergTable`), with its switch."""

    def strategy(self, scope: dict[str, Any] | None = None) -> IcebergSnapshot:
        """The switch of a decision that replaces ``scope`` (its record's)."""
        return IcebergSnapshot(self, Scope.from_doc(scope))

    def prepare_commit(self, txn_id: str, table: Any, manifest: Manifest, uris: list[str],
                       sealed: dict[str, Any], scope: Scope) -> None:
        """Build the switch's snapshot in the background while the commit verifies and
        decides (:func:`~airflow_tpc.tables.iceberg_commit.prepare`): its CPU and its
        manifest reads off the commit's path; its files are held until it is sent."""
        self._prepared = (txn_id, table, ahead_pool().submit(
            prepare, self, table, manifest, uris, sealed, scope))


class IcebergSink(TableSink):
    """A :class:`~airflow_tpc.Sink` whose target is an Iceberg table: the shared table
    skeleton (:class:`~airflow_tpc.tables.base.TableSink`) with staging in the table's
    data path and :class:`IcebergSnapshot` as the switch."""

    staging_dir = STAGING_DIR
    target_type = IcebergTarget
    table_target: IcebergTarget

    def _switch_catalog(self) -> Any:
        from .iceberg_multi import rest_catalog_key

        return rest_catalog_key(self.table_target.catalog())

    def _prepared_switch(self, epoch: str, attempt: int, known: Manifest | None) -> Any:
        from .iceberg_multi import prepared_change

        decision = self.ledger.read(epoch, attempt, DECISION)
        if not isinstance(decision, CommitDecision):
            return None
        return prepared_change(self, epoch, attempt, decision, known)


def open_table_sink(target: str, namespace: str, **options: Any) -> IcebergSink:
    """A sink for an Iceberg target URI (``iceberg://<catalog>/<namespace>.<table>``);
    :func:`airflow_tpc.tables.open_table_sink` takes every format, with these options."""
    if urlparse(target).scheme == "iceberg":
        return IcebergSink(target, namespace, **options)
    raise TpcError(f"{target!r} is not a table target (supported: iceberg://)")
