"""The switch of an Iceberg target: a decided attempt becomes one Iceberg snapshot.

:class:`IcebergSnapshot` is the Iceberg side of the shared switch
(:class:`~airflow_tpc.tables.switch.TableCommit`): where the table stands (its
snapshot summaries), the table's creation from the staged schema, and the one
transaction that replaces the scope's rows with the staged files.
"""

from __future__ import annotations

import logging
import threading
import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import LedgerError, StorageError
from .iceberg_files import data_file_of, epoch_partition_position, iceberg_stats, stats_plan
from .iceberg_partitions import needs_data
from .iceberg_table import IcebergTable, epoch_commits
from .pyiceberg_private import assert_unchanged
from .scope import Scope
from .staged import sealed_or_read
from .switch import Staged, TableCommit
from .target import commit_properties

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa
    from pyiceberg.manifest import DataFile
    from pyiceberg.table import Table

    from ..core.manifest import Manifest

log = logging.getLogger("airflow_tpc")


class IcebergSnapshot(TableCommit):
    """The switch is one Iceberg commit: one ``overwrite`` snapshot that drops partition
    ``epoch=E``'s data files and adds the staged files where they are.

    Idempotent by the table's own history: a snapshot carrying this manifest's
    digest means an earlier run committed it (a crash before the ledger recorded
    it) — only the marker is written then.  A snapshot of a higher attempt of the
    epoch means this attempt is stale: it is never applied (returns False).
    """

    name = "iceberg"
    made = "snapshot"
    target: IcebergTable

    def _lost_race(self) -> tuple[type[Exception], ...]:
        from pyiceberg.exceptions import CommitFailedException

        return (CommitFailedException,)

    def _created(self, schema: pa.Schema) -> Table:
        """Iceberg creates the table first (empty), then commits the epoch to it."""
        return self.target.create_table(schema, self.scope)

    def _on_commit(self, table: Table) -> Table:
        """Each of the table's metadata files read once by this commit (:mod:`.iceberg_io`)."""
        from .iceberg_io import on_commit_io

        return on_commit_io(table)

    def state_of(self, table: Table, manifest: Manifest) -> str:
        """Where the table stands for this decided attempt: ``"done"`` (it holds it),
        ``"superseded"`` (it holds a higher attempt of the epoch) or ``"todo"``; a
        LedgerError when it holds this attempt with another manifest."""
        seen = epoch_commits(table, manifest.epoch, manifest.namespace)
        done = seen.digests.get(manifest.digest)
        if done is not None and done != manifest.attempt:
            raise LedgerError(f"Iceberg table {self.target.uri} holds manifest "
                              f"{manifest.digest} as attempt {done} of epoch "
                              f"{manifest.epoch}, not attempt {manifest.attempt}")
        if done is not None:
            return "done"
        if seen.highest > manifest.attempt:
            log.warning("%s not applied: the table already holds attempt %d of epoch %s",
                        manifest.txn_id, seen.highest, manifest.epoch)
            return "superseded"
        if seen.highest == manifest.attempt:
            raise LedgerError(
                f"Iceberg table {self.target.uri} holds attempt {manifest.attempt} of "
                f"epoch {manifest.epoch} with another manifest than {manifest.digest}; the "
                "attempt number was reused after the ledger was lost. Nothing was changed.")
        return "todo"

    def _commit(self, table: Table, staged: Staged) -> None:
        """One transaction, one snapshot: remove the epoch's files, add the staged ones
        (:meth:`_transaction`, or the same transaction built before the decision:
        :func:`prepare`).  Every file the snapshot names (its manifests and manifest
        list, uploaded side by side as pyiceberg closes them: :mod:`.iceberg_io`) is in
        the store before the catalog is asked to commit."""
        from .iceberg_io import flush

        prepared = self.target.take_prepared(staged.manifest.txn_id, table) \
            if staged.usable else None
        if prepared is not None and not prepared.serves(staged, self.scope):
            prepared.discard()
            prepared = None

        def run() -> None:
            tx = prepared.tx if prepared is not None else self._transaction(table, staged)
            flush(table)
            tx.commit_transaction()

        self.target._call("commit to", run)
        log.info("Iceberg %s: epoch %s is attempt %d (%d files)%s", self.target.uri,
                 staged.manifest.epoch, staged.manifest.attempt, len(staged.uris),
                 " (built before the decision)" if prepared is not None else "")

    def _transaction(self, table: Table, staged: Staged) -> Any:
        """The transaction of :meth:`_commit`, built, not committed.

        The DataFiles come from the sealed statistics where they hold for this table
        (no footer read), else from the footers the check read (once, in parallel) —
        never from a per-file read."""
        from pyiceberg.table import TableProperties
        from pyiceberg.table.update import AssertCurrentSchemaId, AssertDefaultSpecId

        from .iceberg_io import settle

        # pyiceberg would retry a commit that lost a race by re-applying the same
        # snapshot on the new base (after a sleep): our file list and schema check
        # were made against the old base.  Switch that off for this in-memory table
        # only (the table's stored properties are untouched): the caller's loop
        # reloads, re-checks and recomputes instead.
        meta = table.metadata
        table.metadata = meta.model_copy(update={"properties": {
            **meta.properties, TableProperties.COMMIT_NUM_RETRIES: "0"}})
        manifest, uris = staged.manifest, staged.uris
        sealed = staged.sealed if staged.usable else None
        footers = None if staged.usable else staged.footers
        sizes = {u: f.size for u, f in zip(uris, manifest.files, strict=True)}

        def data_files(tmeta: Any) -> list[DataFile]:
            got, found = sealed_or_read(self.target.read_footers, uris,
                                        [f.path for f in manifest.files], sealed, "iceberg",
                                        staged.footers)
            by_uri: dict[str, dict[str, Any] | None] = {u: got.get(u) for u in uris}
            plan = stats_plan(tmeta) if found else None
            parts: dict[str, list[Any]] = {}
            if plan is not None and needs_data(tmeta.spec()):
                parts, problems = self.target.partitions_from_data(
                    [u for u, md in found.items() if md.num_rows], tmeta)
                if problems:
                    raise StorageError("; ".join(problems[:5]))
            for uri, md in found.items():  # a statistic that did not serialise, or none sealed
                by_uri[uri] = iceberg_stats(md, tmeta, plan, parts.get(uri))
                if by_uri[uri] is None:
                    raise StorageError(f"cannot read the statistics of {uri}")
            return [data_file_of(uri, sizes[uri], st, tmeta.default_spec_id)
                    for uri, st in by_uri.items() if st and st["record_count"] > 0]

        def build(tx: Any) -> None:
            meta = tx.table_metadata
            # Iceberg lets an append commit over a concurrent schema or partition
            # change; ours was checked against this schema and spec, so a change of
            # either must fail the commit (and the caller's loop re-checks).
            assert_unchanged(tx, (
                AssertCurrentSchemaId(current_schema_id=meta.current_schema_id),
                AssertDefaultSpecId(default_spec_id=meta.default_spec_id)))
            if meta.name_mapping() is None:  # as add_files: files carry no field ids
                tx.set_properties(**{TableProperties.DEFAULT_NAME_MAPPING:
                                     meta.schema().name_mapping.model_dump_json()})
            if self.scope.add_columns and footers is not None:
                _add_new_columns(tx, footers[0])
            # A file without rows (Spark writes one for an empty task) has no
            # statistics to infer its partition from, and adds nothing: not added.
            new = data_files(tx.table_metadata)
            props = commit_properties(manifest)
            if self.scope.kind == "epoch":
                old = _epoch_files(table, manifest.epoch)
                with tx.update_snapshot(snapshot_properties=props).overwrite() as ow:
                    for data_file in old:
                        ow.delete_data_file(data_file)
                    for data_file in new:
                        ow.append_data_file(data_file)
                return
            # replace_where: Iceberg's overwrite by filter — files wholly inside the
            # predicate are dropped, files partly inside are rewritten without those
            # rows (copy-on-write); then the staged files are added.  All in this one
            # transaction: one catalog commit, every snapshot carrying our summary.
            if self.scope.kind == "where":
                with warnings.catch_warnings():  # an epoch's first commit deletes none
                    warnings.filterwarnings("ignore", "Delete operation did not match")
                    tx.delete(delete_filter=self.scope.expression(),
                              snapshot_properties=props)
            with tx.update_snapshot(snapshot_properties=props).fast_append() as fa:
                for data_file in new:
                    fa.append_data_file(data_file)

        tx = table.transaction()
        try:
            build(tx)
        except BaseException:
            settle(table)  # no upload of it outlives it, and nothing held is written
            raise
        return tx


@dataclass
class Prepared:
    """A table commit built before its decision, its files held unwritten until the
    decision is written (:meth:`send_files`)."""

    tx: Any
    table: Any
    #: What it was built from: the switch takes it only if its own inputs are these.
    staged: Staged
    scope: Scope
    #: The files uploaded once the commit was decided (:meth:`send_files`).
    sent: list[str] = field(default_factory=list)
    #: Sending (a pool thread, once the build is done) and discarding (the switch) may
    #: meet: one at a time, and nothing is sent once discarded.
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _discarded: bool = False

    def send_files(self) -> None:
        """The commit is decided: upload its held files now, in the background, while
        the switch reads the published marker (one round trip less on the commit's
        path); :meth:`IcebergSnapshot._commit` waits for them before the catalog
        commit.  Files of a commit then never sent (a higher attempt won meanwhile)
        are unreferenced metadata files, as a failed Iceberg commit leaves."""
        from .iceberg_io import release

        with self._lock:
            if not self._discarded:
                self.sent = release(self.table)

    def serves(self, staged: Staged, scope: Scope) -> bool:
        """Whether the switch would build this very commit: the same manifest, files,
        sealed statistics (usable for the table) and scope."""
        return staged.usable and staged.manifest.digest == self.staged.manifest.digest \
            and staged.uris == self.staged.uris and staged.sealed == self.staged.sealed \
            and scope.to_doc() == self.scope.to_doc()

    def discard(self) -> None:
        """Never sent: its held files are never written (those sent after the decision
        are waited for and forgotten)."""
        from .iceberg_io import discard_held

        with self._lock:
            self._discarded = True
            discard_held(self.table, self.sent)


def prepare(target: IcebergTable, table: Table, manifest: Manifest, uris: list[str],
            sealed: dict[str, Any], scope: Scope) -> Prepared | None:
    """The transaction the switch of ``manifest`` would build on ``table`` from the sealed
    statistics, built now (in the background, while the commit verifies and decides)
    with every file it writes held in memory: nothing reaches the store before the
    decision is written (:meth:`Prepared.send_files`); the switch sends it
    (:meth:`IcebergSnapshot._commit`, which takes it only for this very table object
    and the same sealed statistics).  None: the table needs no commit of it (it holds
    it, or a higher attempt)."""
    from .iceberg_io import hold

    strategy = IcebergSnapshot(target, scope)
    table = strategy._on_commit(table)
    if strategy.state_of(table, manifest) != "todo":
        return None
    hold(table)
    staged = Staged(manifest, uris, sealed, usable=True)
    return Prepared(strategy._transaction(table, staged), table, staged, scope)


def _add_new_columns(tx: Any, footers: dict[str, Any]) -> None:
    """Add the staged files' columns the table lacks (``add_columns``): nullable, by
    name (``union_by_name``), in the commit's own transaction — the name mapping is
    updated with them, so readers find them in the files."""
    import pyarrow as pa

    known = set(tx.table_metadata.schema().column_names)
    new: dict[str, pa.Field] = {}
    for md in footers.values():
        for f in md.schema.to_arrow_schema():
            if f.name not in known and f.name not in new:
                new[f.name] = f.with_nullable(True)
    if new:
        with tx.update_schema() as update:
            update.union_by_name(pa.schema(list(new.values())))
        log.info("adding columns %s to the table, as add_columns allows", ", ".join(new))


def _epoch_files(table: Table, epoch: str) -> list[DataFile]:
    """The data files of partition ``epoch`` in the table's current snapshot."""
    from pyiceberg.manifest import ManifestContent

    snap = table.current_snapshot()
    if snap is None:
        return []
    out = []
    for mf in snap.manifests(table.io):
        if mf.content != ManifestContent.DATA:
            continue
        pos = epoch_partition_position(table, mf.partition_spec_id)
        for entry in mf.fetch_manifest_entry(table.io, discard_deleted=True):
            if entry.data_file.partition[pos] == epoch:
                out.append(entry.data_file)
    return out
