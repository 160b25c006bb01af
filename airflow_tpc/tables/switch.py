"""The switch every table format shares: a decided attempt becomes one table commit.

:class:`TableCommit` is the promotion strategy of a table target
(:func:`airflow_tpc.core.promote.strategy_for` takes it from the target).  Its
:meth:`~TableCommit.switch` is one protocol for every format:

1. load the table (the one handed over by the check before the decision, if any);
   none yet: check the staged files, and the format creates the table from their
   schema (Iceberg now; Delta in the commit itself);
2. ask the table's own history where it stands for this attempt
   (:meth:`~TableCommit.state_of`): already holds it (a crash after the table
   commit, before the ledger recorded it: only the marker is written), holds a
   higher attempt (this one is stale: never applied), or not yet;
3. check the staged files against the table as it is now, unless the statistics
   sealed at pre-commit were checked against this very table state;
4. one table commit (:meth:`~TableCommit._commit`); one that loses a race to another
   writer (its base changed) is not retried by the format's library but here, from
   step 1, so the check and the files it removes are made against the new base;
5. the published marker.

A format's strategy supplies the verbs in between: :meth:`~TableCommit.state_of`,
:meth:`~TableCommit._commit`, :meth:`~TableCommit._lost_race`, and where it needs
them :meth:`~TableCommit._created` and :meth:`~TableCommit._on_commit`.  Each
format's crashpoints are ``<name>.before_table_commit`` and
``<name>.after_table_commit``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..core.faults import crashpoint
from ..core.promote import Strategy, _rel_to_root, _swap_marker
from ..errors import StorageError
from .scope import Scope
from .staged import job_footers, read_sealed_stats
from .target import EPOCH_SCOPE, Footers, TableTarget

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa

    from ..core.ledger import Layout
    from ..core.manifest import Manifest
    from ..storage import Storage

log = logging.getLogger("airflow_tpc")

#: Optimistic-concurrency retries when another writer commits to the table meanwhile.
COMMIT_RETRIES = 10


@dataclass
class Staged:
    """One decided attempt's staged files as its table commit takes them."""

    manifest: Manifest
    #: Each file's URI, in the manifest's order.
    uris: list[str]
    #: The statistics sealed with the manifest (checked by its digest), or None.
    sealed: dict[str, Any] | None
    #: The files' footers, once read (:meth:`footers_of`).
    footers: Footers | None = None
    #: Whether :attr:`sealed` holds for the table as it is now (the table state
    #: pre-commit checked the files against): the commit may build from it.
    usable: bool = False
    #: The files' schema, when the table does not exist yet (it is created from it).
    schema: pa.Schema | None = None
    #: Where the attempt's seal lies (``(storage, folder)``): the footers the job kept.
    seal: tuple[Storage, str] | None = None

    def footers_of(self, target: TableTarget) -> Footers:
        """The footers the first time they are needed: those the job kept when it
        sealed (:func:`~.staged.job_footers`), else read once, in parallel."""
        if self.footers is None:
            if self.seal is None:
                self.footers = target.read_footers(self.uris)
            else:
                self.footers = job_footers(target.read_footers, *self.seal, self.manifest,
                                           self.uris)
        return self.footers


class TableCommit(Strategy):
    """The switch is one commit of the table (see the module): the skeleton, with the
    format's verbs left to a subclass."""

    #: What one commit of the table is called in messages ("snapshot", "version").
    made = "version"

    def __init__(self, target: TableTarget, scope: Scope = EPOCH_SCOPE) -> None:
        self.target = target
        self.scope = scope

    def switch(self, layout: Layout, manifest: Manifest, staging: str, dst: str,
               version: str | None) -> bool:
        storage = layout.storage
        staged = Staged(manifest,
                        [storage.uri(storage.join(staging, f.path)) for f in manifest.files],
                        read_sealed_stats(storage, layout.sealed(manifest.epoch,
                                                                 manifest.attempt), manifest),
                        footers=self.target.take_footers(manifest.txn_id),
                        seal=(storage, layout.sealed(manifest.epoch, manifest.attempt)))
        lost_race = self._lost_race()
        for _ in range(COMMIT_RETRIES):
            table = self.target.take_table(manifest.txn_id)
            staged.usable, staged.schema = False, None
            if table is None:
                staged.schema = self.target.check_staged(
                    staged.uris, manifest.epoch, None, decided=manifest.txn_id,
                    footers=staged.footers_of(self.target), scope=self.scope)
                if staged.schema is None:
                    break  # nothing staged and no table: nothing to replace
                table = self._created(staged.schema)
            if table is not None:
                table = self._on_commit(table)
                state = self.state_of(table, manifest)
                if state == "done":
                    log.info("%s is already in %s (a commit finished before the ledger "
                             "recorded it): no second %s", manifest.txn_id, self.target.uri,
                             self.made)
                    break
                if state == "superseded":
                    return False
                self.check(table, staged)
            crashpoint(f"{self.name}.before_table_commit")
            try:
                self._commit(table, staged)
            except lost_race as exc:
                log.info("%s commit of %s lost a race (%s); retrying on the new %s",
                         self.target.label, manifest.txn_id, exc, self.made)
                continue
            crashpoint(f"{self.name}.after_table_commit")
            break
        else:
            raise StorageError(f"{self.target.label} table {self.target.uri} kept changing "
                               f"under {COMMIT_RETRIES} commits of {manifest.txn_id}; the "
                               "decision is kept and the next commit or recover tries again")
        paths = [_rel_to_root(layout, storage.join(staging, f.path)) for f in manifest.files]
        crashpoint("promote.before_marker")
        return _swap_marker(layout, manifest, self.name, paths, version)

    def check(self, table: Any, staged: Staged) -> None:
        """Whether the sealed statistics serve this table (the table as pre-commit
        checked it: :meth:`TableTarget.table_key` — the check holds, and the commit's
        own requirements refuse a change from here on); otherwise the staged files
        are checked again against it, from footers read once.  Sets
        :attr:`Staged.usable`."""
        staged.usable = staged.sealed is not None \
            and staged.sealed["table"] == self.target.table_key(table, self.scope) \
            and not self.scope.add_columns  # new columns: metrics from the footers
        if not staged.usable:
            self.target.check_staged(staged.uris, staged.manifest.epoch, table,
                                     decided=staged.manifest.txn_id,
                                     footers=staged.footers_of(self.target), scope=self.scope)

    def clean(self, layout: Layout, epoch: str, attempt: int, manifest: Manifest | None,
              current: dict[str, Any] | None) -> None:
        # Nothing to delete here: the displaced attempt's files are referenced by the
        # table's earlier versions (time travel).  Its staging is removed by the sink
        # through TableLayout.remove_staging, which keeps every referenced file.
        crashpoint("promote.before_cleanup")

    # -- the format's verbs ----------------------------------------------------------
    def state_of(self, table: Any, manifest: Manifest) -> str:
        """Where the table stands for this decided attempt: ``"done"`` (it holds it),
        ``"superseded"`` (it holds a higher attempt of the epoch) or ``"todo"``; a
        LedgerError when it holds this attempt with another manifest."""
        raise NotImplementedError

    def _commit(self, table: Any, staged: Staged) -> None:
        """One commit of the table: replace the scope's rows with the staged files
        (``table`` None: create the table with them, from :attr:`Staged.schema`).
        Raises one of :meth:`_lost_race` when another writer committed meanwhile."""
        raise NotImplementedError

    def _lost_race(self) -> tuple[type[Exception], ...]:
        """The format's errors of a commit whose base changed under it."""
        raise NotImplementedError

    def _created(self, schema: pa.Schema) -> Any:
        """The table, created from the staged schema; None (the default): the format's
        commit creates it."""
        return None

    def _on_commit(self, table: Any) -> Any:
        """The table as this commit works on it (default: as loaded)."""
        return table
