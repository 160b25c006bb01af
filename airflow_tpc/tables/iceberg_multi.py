"""Several Iceberg tables of one REST catalog switched by one atomic catalog call.

A group (:mod:`airflow_tpc.group`) whose members are all Iceberg tables of one REST
catalog can make every member's table commit in one request,
``POST /v1/{prefix}/transactions/commit`` (the REST spec's multi-table commit): the
catalog applies every table's changes or none, so even engine readers — Trino, Spark,
DuckDB on the catalog — see the tables move together.

Each member's table commit is built exactly as its own switch builds it
(:class:`~airflow_tpc.tables.iceberg_commit.IcebergSnapshot`: the same checks, the same
snapshot), on a copy of the table whose catalog *captures* the commit (its
requirements and updates) instead of sending it; the captured commits are sent
together.  Every member's own switch still runs afterwards and finds its snapshot in
the table (idempotent by the snapshot's summary), so a refused or unsupported
multi-table commit — or a crash before or after it — costs nothing but the
atomicity for engines: each member then switches on its own, as it always could.

pyiceberg (0.12) has no client call for this endpoint: the request is sent on the
REST catalog's own authenticated session (``RestCatalog._session``, private: through
:func:`~airflow_tpc.tables.pyiceberg_private.rest_session`) to the
URL its public ``url()`` builds.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from ..core.manifest import Manifest
from ..core.records import CommitDecision
from ..core.staging import verify_against_storage
from ..errors import StorageError, TpcError
from .base import TableSink
from .pyiceberg_private import rest_session
from .staged import read_sealed_stats
from .switch import Staged

log = logging.getLogger("airflow_tpc")


class _Captured(TpcError):
    """Raised by :class:`_CapturingCatalog` instead of sending a table commit (a
    TpcError, so the target's catalog-call wrapper passes it through)."""

    def __init__(self, requirements: Any, updates: Any) -> None:
        super().__init__("table commit captured")
        self.requirements, self.updates = requirements, updates


class _CapturingCatalog:
    """A table's catalog for building one commit: ``commit_table`` captures the
    commit's requirements and updates and sends nothing; anything else is the real
    catalog's."""

    def __init__(self, catalog: Any) -> None:
        self._catalog = catalog

    def commit_table(self, table: Any, requirements: Any, updates: Any) -> Any:
        raise _Captured(requirements, updates)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._catalog, name)


class NotSupported(TpcError):
    """The catalog does not answer the multi-table commit."""


def rest_catalog_key(catalog: Any) -> tuple[str, ...] | None:
    """Which REST catalog (its URI, and the prefix its config named) a table lives in;
    None for another kind of catalog (no multi-table commit)."""
    from pyiceberg.catalog.rest import RestCatalog

    if not isinstance(catalog, RestCatalog):
        return None
    return ("rest", str(catalog.uri).rstrip("/"), str(catalog.properties.get("prefix", "")))


@dataclass(frozen=True)
class TableChange:
    """One member's table commit, built and checked, not sent."""

    catalog_key: tuple[str, ...]
    catalog: Any
    request: Any  # pyiceberg's CommitTableRequest
    table: str

    @staticmethod
    def commit_together(changes: list[TableChange]) -> None:
        """Send every change in one multi-table commit: all applied, or none.

        Raises CommitFailedException (409: a requirement failed, e.g. a concurrent
        commit to one of the tables; nothing was applied), :class:`NotSupported`, or
        StorageError (the outcome is unknown: each member's switch finds out)."""
        from pyiceberg.exceptions import CommitFailedException

        if len({c.catalog_key for c in changes}) != 1:
            raise TpcError("a multi-table commit takes tables of one catalog")
        catalog = changes[0].catalog
        body = ('{"table-changes":['
                + ",".join(c.request.model_dump_json() for c in changes) + "]}")
        session = rest_session(catalog)  # no public client call for this endpoint
        try:
            response = session.post(catalog.url("transactions/commit", prefixed=True),
                                    data=body.encode("utf-8"), headers=session.headers)
        except Exception as exc:  # requests' errors: the outcome is unknown
            raise StorageError(f"multi-table commit of {', '.join(c.table for c in changes)} "
                               f"failed: {type(exc).__name__}: {exc}") from None
        if response.status_code == 409:
            raise CommitFailedException(response.text[:500])
        if response.status_code in (400, 404, 405, 406, 501):
            raise NotSupported(f"the catalog answered {response.status_code} to a multi-table "
                               f"commit: {response.text[:300]}")
        if response.status_code >= 300:
            raise StorageError(f"multi-table commit of {', '.join(c.table for c in changes)}: "
                               f"HTTP {response.status_code}: {response.text[:300]}")


def prepared_change(sink: TableSink, epoch: str, attempt: int, decision: CommitDecision,
                    known: Manifest | None) -> TableChange | None:
    """The table commit ``sink``'s switch would make for a decided attempt, built and
    checked the same way, captured instead of sent; None when there is nothing to send
    (the table holds it or a higher attempt already, or does not exist yet)."""
    from pyiceberg.table import CommitTableRequest, Table, TableIdentifier

    target = sink.table_target
    key = rest_catalog_key(target.catalog())
    if key is None:
        return None
    layout, storage = sink.layout, sink.storage
    fresh = known is not None and known.attempt == attempt \
        and known.digest == decision.manifest_digest
    manifest = known if fresh else sink._decided_manifest(epoch, attempt, decision)
    staging = layout.check_staging(epoch, attempt)
    if not fresh:  # as promotion does: a straggler must not slip into the table
        verify_against_storage(storage, staging, manifest, decision.verify,
                               seal=layout.sealed(epoch, attempt))
    table = target.take_table(manifest.txn_id)
    if table is None:
        return None
    strategy = target.strategy(decision.scope)
    table = strategy._on_commit(table)
    if strategy.state_of(table, manifest) != "todo":
        return None
    staged = Staged(manifest, [storage.uri(storage.join(staging, f.path))
                               for f in manifest.files],
                    read_sealed_stats(storage, layout.sealed(epoch, attempt), manifest))
    strategy.check(table, staged)
    capturing = Table(table.name(), table.metadata, table.metadata_location, table.io,
                      _CapturingCatalog(table.catalog))
    try:
        strategy._commit(capturing, staged)
    except _Captured as captured:
        name = table.name()
        return TableChange(key, target.catalog(), CommitTableRequest(
            identifier=TableIdentifier(namespace=name[:-1], name=name[-1]),
            requirements=captured.requirements, updates=captured.updates), target.uri)
    raise TpcError(f"the commit of {manifest.txn_id} to {target.uri} was not captured")
