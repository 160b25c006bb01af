"""The switch of a Delta target: a decided attempt becomes one Delta version.

:class:`DeltaCommit` is the Delta side of the shared switch
(:class:`~airflow_tpc.tables.switch.TableCommit`): where the table stands (the epoch's
application transaction, its ``commitInfo``), and the one commit of ``remove`` and
``add`` actions — the first one creating the table.  ``replace_where`` commits also
remove or rewrite the table's files the predicate selects rows of
(:mod:`.delta_rewrite`).
"""

from __future__ import annotations

import json
import logging
import time
from typing import TYPE_CHECKING, Any

from ..errors import LedgerError, StorageError
from .delta_rewrite import scope_actions
from .delta_table import DeltaLakeTable, TableCreatedMeanwhile, app_id
from .staged import EPOCH_COLUMN, sealed_or_read
from .switch import Staged, TableCommit
from .target import PROP_ATTEMPT, PROP_EPOCH, PROP_NAMESPACE, Footers, commit_properties

if TYPE_CHECKING:  # pragma: no cover
    from deltalake import DeltaTable

    from ..core.manifest import Manifest

log = logging.getLogger("airflow_tpc")


class DeltaCommit(TableCommit):
    """The switch is one Delta commit: ``remove`` the epoch's current files, ``add`` the
    staged ones where they are, with the epoch's ``txn`` at this attempt.

    Idempotent through the ``txn``: the epoch's ``txn`` version at this attempt means
    an earlier run committed it (a crash before the ledger recorded it) — only the
    marker is written then.  A higher version means this attempt is stale: never
    applied (returns False).  Another writer's commit meanwhile makes ours fail on
    its stale base (delta-rs's own retry is off): we reload, re-check and recompute.
    """

    name = "delta"
    made = "version"
    target: DeltaLakeTable

    def _lost_race(self) -> tuple[type[Exception], ...]:
        from deltalake.exceptions import CommitFailedError

        return (CommitFailedError, TableCreatedMeanwhile)

    def state_of(self, table: DeltaTable, manifest: Manifest) -> str:
        """Where the table stands for this decided attempt, by the epoch's ``txn``:
        ``"superseded"`` above this attempt, ``"done"`` at it (if it is this manifest:
        :meth:`_check_same`), else ``"todo"``."""
        seen = int(self.target._call("read the txn of", table.transaction_version,
                                     app_id(manifest.namespace, manifest.epoch)) or 0)
        if seen > manifest.attempt:
            log.warning("%s not applied: Delta table %s already holds attempt %d of "
                        "epoch %s", manifest.txn_id, self.target.uri, seen, manifest.epoch)
            return "superseded"
        if seen == manifest.attempt:
            self._check_same(table, manifest)
            return "done"
        return "todo"

    def _check_same(self, table: DeltaTable, manifest: Manifest) -> None:
        """The epoch's txn is at this attempt: it must be this manifest (a number reused
        after the ledger was lost, with other files, is refused and changes nothing)."""
        commits = self.target.commits_of(manifest.epoch, manifest.namespace)
        if manifest.digest in commits:
            return
        for info in self.target.commit_infos():
            if info.get(PROP_EPOCH) == manifest.epoch \
                    and info.get(PROP_NAMESPACE) == manifest.namespace \
                    and info.get(PROP_ATTEMPT) == str(manifest.attempt):
                raise LedgerError(
                    f"Delta table {self.target.uri} holds attempt {manifest.attempt} of epoch "
                    f"{manifest.epoch} with another manifest than {manifest.digest}; the "
                    "attempt number was reused after the ledger was lost. Nothing was changed.")
        # The commitInfo was dropped with old log files; the txn alone says it is done.

    def _commit(self, table: DeltaTable | None, staged: Staged) -> None:
        """One Delta commit: remove the epoch's files, add the staged ones (no copy);
        no table yet: the commit that creates it (version 0) with them.

        Each add's ``numRecords`` comes from the sealed statistics (checked by the
        manifest's digest), else the footers already read, else one parallel read."""
        from deltalake import CommitProperties, Transaction
        from deltalake.transaction import AddAction

        manifest, uris, sealed, footers = (staged.manifest, staged.uris, staged.sealed,
                                           staged.footers)
        # Rows are the file's own, whatever the table: sealed ones serve any table state.
        got, found = sealed_or_read(self.target.read_footers, uris,
                                    [f.path for f in manifest.files], sealed, "rows", footers)
        rows = {**{u: int(n) for u, n in got.items()},
                **{u: md.num_rows for u, md in found.items()}}
        now = int(time.time() * 1000)
        sizes = {u: f.size for u, f in zip(uris, manifest.files, strict=True)}
        layout = self.scope.kind == "epoch"
        parts = {u: {EPOCH_COLUMN: manifest.epoch} for u in uris} if layout \
            else self._partitions(table, manifest, uris, sealed, footers)
        # A file without rows (Spark writes one for an empty task) adds nothing.
        adds = [AddAction(self.target.relative(u), sizes[u], parts[u],
                          now, True, json.dumps({"numRecords": rows[u]}))
                for u in uris if rows[u] > 0]
        props = CommitProperties(
            custom_metadata=commit_properties(manifest), max_commit_retries=0,
            app_transactions=[Transaction(app_id(manifest.namespace, manifest.epoch),
                                          manifest.attempt)])
        if table is None:
            assert staged.schema is not None
            self.target.create_table(staged.schema, adds, props, layout=layout)
        elif layout:
            removes = self._epoch_removes(table, manifest.epoch, now)
            self.target._call("commit to", table.create_write_transaction,
                              [*removes, *adds], "append", table.schema(),
                              partition_by=[EPOCH_COLUMN], commit_properties=props)
        else:
            bound = self.target.scope_for(table, self.scope)
            removes, rewritten = scope_actions(self.target, table, bound, now,
                                               manifest.txn_id)
            self.target._call("commit to", table.create_write_transaction,
                              [*removes, *rewritten, *adds], "append", table.schema(),
                              partition_by=bound.partition_columns or None,
                              commit_properties=props)
        log.info("Delta %s: epoch %s is attempt %d (%d files)", self.target.uri,
                 manifest.epoch, manifest.attempt, len(adds))

    def _partitions(self, table: DeltaTable | None, manifest: Manifest, uris: list[str],
                    sealed: dict[str, Any] | None,
                    footers: Footers | None
                    ) -> dict[str, dict[str, str | None]]:
        """Each staged file's ``partitionValues`` for a table of its own partitioning:
        sealed at pre-commit, else from the footers (read once)."""
        if table is None:  # an append creating the table: unpartitioned
            return {u: {} for u in uris}
        if sealed is not None and all("partition" in sealed["files"][f.path]
                                      for f in manifest.files if sealed["files"][f.path]
                                      .get("rows", 1)):
            return {u: sealed["files"][f.path].get("partition", {})
                    for u, f in zip(uris, manifest.files, strict=True)}
        found, problems = footers if footers is not None else self.target.read_footers(uris)
        out, more = self.target.partitions(found, uris, self.target.scope_for(table,
                                                                               self.scope))
        if problems or more:
            raise StorageError("; ".join([*problems, *more][:5]))
        return {u: out.get(u, {}) for u in uris}

    def _epoch_removes(self, table: DeltaTable, epoch: str, now: int) -> list[Any]:
        """``remove`` actions for the data files of partition ``epoch`` now in the table."""
        import pyarrow as pa
        from deltalake.transaction import RemoveAction

        actions = pa.table(self.target._call("list the files of", table.get_add_actions,
                                             flatten=True))
        col = f"partition.{EPOCH_COLUMN}"
        out = []
        for row in actions.select(["path", "size_bytes", col]).to_pylist():
            if row[col] == epoch:
                out.append(RemoveAction(row["path"], True, now, row["size_bytes"],
                                        {EPOCH_COLUMN: epoch}))
        return out
