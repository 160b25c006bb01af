"""The one skeleton every table format's sink shares (Iceberg, Delta).

A table target differs from a folder in three places only, and each is here once:

* **where staging lives and what may be removed** — :class:`TableLayout`: staging is
  inside the table's location (the staged files *become* the table's data files),
  and every removal of staging (abort, supersession, recover, gc) keeps the files
  any retained table version references;
* **what the staged files must be** — :class:`TableSink` checks them against the
  table at pre-commit and again at commit before the decision (the table may have
  changed in between), so a schema the table cannot take is refused with nothing
  decided (the check is one for every format:
  :meth:`~airflow_tpc.tables.target.TableTarget.check_staged`);
* **the switch** — the format's own atomic commit on one skeleton,
  :class:`~airflow_tpc.tables.switch.TableCommit`, which the target hands to
  :func:`~airflow_tpc.core.promote.strategy_for` through the layout.

A format plugs in a *target* object (:class:`~airflow_tpc.tables.target.TableTarget`,
named as :attr:`TableSink.target_type`; it reads its own URI) that knows its table and
a switch (a ``TableCommit``) that commits to it; the verbs,
the ledger and the fencing are the core's, unchanged.  Where the pieces live:
:mod:`.staged` (footers, the sealed statistics), :mod:`.target`, :mod:`.switch`, and
this module (the sink and its layout).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from ..core.faults import crashpoint
from ..core.ledger import TPC_DIR, Layout, Ledger, check_epoch
from ..core.manifest import MANIFEST_NAME
from ..core.records import BEGIN
from ..core.sink import Sink
from ..core.staging import TABLE_STATS_NAME, list_staged
from ..core.transaction import CommitResult, SinkConfig, Transaction
from ..errors import StorageError, TpcError
from ..storage.ahead import reading_ahead
from .scope import Scope
from .staged import (
    TableSchemaError,  # noqa: F401  (re-exported: it lived here first)
    check_sealed,
    forget_sealed_stats,
    norm_uri,
    read_sealed_stats,
    stats_bytes,
)
from .target import (  # noqa: F401  (re-exported: they lived here first)
    PROP_ATTEMPT,
    PROP_DIGEST,
    PROP_EPOCH,
    PROP_NAMESPACE,
    PROP_TXN_ID,
    TableTarget,
)

if TYPE_CHECKING:  # pragma: no cover
    from ..core.ledger import AttemptRecords
    from ..core.manifest import Manifest
    from ..core.records import CommitDecision
    from ..storage import ObjectInfo

log = logging.getLogger("airflow_tpc")


@dataclass(frozen=True)
class TableLayout(Layout):
    """A table target's layout: staging is removed only where the table does not
    reference it.  Every removal of staging in the sink (abort, supersession, recover,
    gc) goes through :meth:`remove_staging`, so this one check covers them all."""

    table: Any = None  # a TableTarget; read by promote.strategy_for

    def remove_staging(self, epoch: str, attempt: int) -> None:
        path = self.check_staging(epoch, attempt)
        files = self.storage.list(path)
        if self.table is None or not files:
            super().remove_staging(epoch, attempt)
            return
        referenced = self.table.referenced_files()  # fails closed: nothing deleted
        keep = [o for o in files if norm_uri(self.storage.uri(o.path)) in referenced]
        if not keep:
            super().remove_staging(epoch, attempt)
            return
        if any(o.is_symlink for o in files):
            raise StorageError(f"staging {self.storage.uri(path)} holds a symlink; not cleaned")
        crashpoint("tables.before_remove_staging")
        self.storage.delete_files([o.path for o in files if o not in keep])
        self.remove_seal(epoch, attempt)
        log.info("kept %d staged files of epoch %s attempt %d: retained versions of %s "
                 "reference them (the format's expiry, then gc, removes them)", len(keep),
                 epoch, attempt, self.table.uri)


class TableSink(Sink):
    """A :class:`~airflow_tpc.Sink` whose target is a table (the shared skeleton).

    The verbs are the core's; what differs is the layout (staging inside the table,
    removal guarded by the table's references), the promotion strategy (the
    target's, through the layout) and a check of the staged files against the table
    at pre-commit and at commit before the decision.  Subclasses parse their URI
    (:attr:`target_type`) and say where staging goes below the table location
    (``staging_dir``).

    ``target``: the table's URI or target; ``catalog_properties``: the format's
    (see :func:`airflow_tpc.tables.open_table_sink`); ``replace_where`` / ``mode`` /
    ``add_columns``: which rows an epoch owns (:meth:`.scope.Scope.of`).
    """

    #: Staging's folder below the table location.
    staging_dir = "_tpc_staging"
    #: The format's table (:meth:`TableTarget.for_sink` reads a target URI).
    target_type: type[TableTarget] = TableTarget

    def __init__(self, target: TableTarget | str, namespace: str, *,
                 catalog_properties: dict[str, str] | None = None,
                 storage_options: dict[str, Any] | None = None,
                 config: SinkConfig | None = None,
                 ledger_uri: str | None = None,
                 replace_where: Any = None, mode: str = "replace",
                 add_columns: bool = False) -> None:
        #: Which rows of the table an epoch's commit replaces (:mod:`.scope`).
        self.scope = Scope.of(replace_where, mode, add_columns)
        self._check_scope(self.scope)
        if isinstance(target, str):
            target = self.target_type.for_sink(target, catalog_properties, storage_options)
        config = config or SinkConfig()
        if config.staging_root:
            raise TpcError(f"a {self.format} target places its own staging (inside the "
                           "table's location); do not set staging_root")
        #: Where the ledger, the namespace claim and the markers live: the table's
        #: location by default, else ``ledger_uri`` (managed table storage lets only
        #: the table's own files into its location).
        self.ledger_apart = bool(ledger_uri)
        if ledger_uri:
            ledger_uri = ledger_uri.rstrip("/")
            location = target.location(
                placed=_placed_location(ledger_uri, storage_options, target.uri))
            root = _ledger_root(self.format, target.uri, location, ledger_uri)
        else:
            if not target.placement_is_stable():
                raise TpcError(
                    f"{self.format} table {target.uri} does not exist yet, and its catalog "
                    "decides where a new table goes only when it is created: set ledger_uri "
                    "(operators: ledger_uri=, CLI: --ledger-uri), a folder on the table's "
                    "store, whose ledger remembers the place until the first commit creates "
                    "the table there; or create the table first")
            location = root = target.location()
        config = replace(config, promotion="manifest",
                         staging_root=f"{location}/{self.staging_dir}")
        super().__init__(root, namespace, storage_options=storage_options, config=config)
        self.table_target = target
        self.table_location = location
        # Managed table storage takes only data files in the table's location: the seals
        # (manifests and sidecars) go beside the ledger then.
        # (the same rule as Sink._adopt's, known here before any claim is read).
        seal_root = self.storage.join(self._root, TPC_DIR, "sealed") if self.ledger_apart \
            else ""
        self.layout = TableLayout(self.storage, self._root, self._configured_staging,
                                  seal_root=seal_root, table=target)
        self.ledger = Ledger(self.layout)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.table_target.uri!r}, namespace={self.namespace!r})"

    @property
    def format(self) -> str:
        """The format's name, for messages: its table's :attr:`TableTarget.label`."""
        return self.target_type.label

    def _check_scope(self, scope: Scope) -> None:
        """Refuse a scope the format cannot commit (default: every scope is fine)."""

    def _decision_scope(self) -> dict[str, Any] | None:
        """The decision names the rows it replaces: a roll-forward in a later run (with
        another ``replace_where`` rendered) applies exactly what was decided."""
        return self.scope.to_doc()

    def _claim_fields(self) -> dict[str, Any]:
        """A ledger apart from its table names the table's location in its claim: one
        ledger serves one table (two tables' epochs in one ledger would fence and
        supersede each other)."""
        return {"table": self.table_target.uri, "table_location": self.table_location} \
            if self.ledger_apart else {}

    def _adopt(self, claim: dict[str, Any] | None) -> None:
        if claim is not None and self.ledger_apart:
            recorded = claim.get("table_location")
            if not isinstance(recorded, str) or norm_uri(recorded.rstrip("/")) \
                    != norm_uri(self.table_location):
                what = f"the ledger of table location {recorded}" \
                    if isinstance(recorded, str) else "the ledger of a folder target"
                raise TpcError(
                    f"ledger_uri {self.target} holds {what}, not of {self.table_target.uri} "
                    f"(at {self.table_location}); give each table its own ledger_uri")
        super()._adopt(claim)

    def _prepare_begin(self, epoch: str) -> int:
        """The core's checks before a begin (its first write is the claim); where the
        store refuses airflow-tpc's own files inside the table's location (managed
        table storage), one error says to set ``ledger_uri``."""
        try:
            return super()._prepare_begin(epoch)
        except StorageError as exc:
            if self.ledger_apart or not exc.denied:
                raise
            raise StorageError(
                f"the store refused airflow-tpc's ledger and markers inside the location "
                f"{self.table_location} of {self.format} table {self.table_target.uri} "
                f"({exc}). Managed table storage lets only the table's own files be written "
                "there: set ledger_uri (operators: ledger_uri=, CLI: --ledger-uri) to a "
                "folder or bucket on the same store that the pipeline may write. Nothing was "
                "written.") from None

    def _highest_attempt_seen(self, epoch: str) -> int:
        """Also above every attempt of the epoch the table's history names: with the
        ledger (and the marker) lost, a reused fencing number would be refused at
        promotion as a reuse, or worse, fenced by the table as a stale attempt."""
        return max(super()._highest_attempt_seen(epoch),
                   self.table_target.highest_attempt(epoch, self.namespace))

    def table_version(self, epoch: str, digest: str) -> dict[str, str] | None:
        """The table version whose commit carries this manifest's digest (None: not in
        the table, e.g. expired, or the commit has not reached the table yet)."""
        return self.table_target.table_version(epoch, self.namespace, digest)

    def _staged_uris(self, txn: Transaction, paths: list[str]) -> list[str]:
        staging = self.layout.staging(txn.epoch, txn.attempt)
        return [self.storage.uri(self.storage.join(staging, p)) for p in paths]

    def precommit(self, txn: Transaction, *, rows: dict[str, int] | None = None,
                  checksums: dict[str, str] | None = None) -> Manifest:
        """Check the staged files fit the table before sealing them (the sensor's step).

        Each footer is read once, in parallel; what the table commit needs of them
        (sizes, rows, the format's column statistics) and the table state they were
        checked against are sealed beside the manifest (``_tpc_table_stats.json``,
        its sha256 in the manifest), so the commit reads no footer again.  One the job
        sealed: :func:`~.staged.check_sealed` checks it and seals its statistics once."""
        self._check_own(txn)
        if self.read_manifest(txn) is not None:
            manifest = super().precommit(txn)  # the core's refusals; else it, unchanged
            check_sealed(self, txn, manifest)
            return manifest
        staging = self.layout.check_staging(txn.epoch, txn.attempt)
        staged = list_staged(self.storage, staging)
        uris = self._staged_uris(txn, sorted(staged))
        footers = self.table_target.read_footers(uris)
        table = self.table_target.load_table()
        self.table_target.check_staged(uris, txn.epoch, table, footers=footers,
                                       scope=self.scope)
        per_uri = self.table_target.file_stats(footers[0], table)
        files = {rel: {**per_uri.get(uri, {}), "size": staged[rel].size}
                 for rel, uri in zip(sorted(staged), uris, strict=True)}
        self._pending_stats = (txn.txn_id, {r: i.size for r, i in staged.items()},
                               stats_bytes(self.table_target.table_key(table, self.scope),
                                           files))
        # The footers count the rows: the manifest says them when the job did not.
        counted = {rel: per_uri[uri]["rows"] for rel, uri in zip(sorted(staged), uris,
                                                                  strict=True)
                   if "rows" in per_uri.get(uri, {})}
        try:
            return super().precommit(txn, rows=rows or counted, checksums=checksums)
        finally:
            self._pending_stats = None

    _pending_stats: tuple[str, dict[str, int], bytes] | None = None

    def _table_stats_doc(self, txn: Transaction, staged: dict[str, ObjectInfo]) -> bytes | None:
        """The sidecar computed above, if the files sealed are the ones it describes (a
        file written meanwhile: no sidecar, and the commit reads the footers)."""
        pending = self._pending_stats
        if pending is None or pending[0] != txn.txn_id \
                or pending[1] != {r: i.size for r, i in staged.items()}:
            return None
        return pending[2]

    def sealed_stats(self, txn: Transaction, manifest: Manifest) -> dict[str, Any] | None:
        """The checked sidecar of a sealed attempt (None: read the footers)."""
        return read_sealed_stats(self.storage, self.layout.sealed(txn.epoch, txn.attempt),
                                 manifest)

    def _check_before_decision(self, txn: Transaction, manifest: Manifest) -> None:
        """Check the sealed files against the table as it is now, before the decision:
        the table may have changed since pre-commit.  The check holds still, and is not
        redone, when the table is as the sealed statistics say pre-commit checked it
        (same schema, partitioning, location: :meth:`TableTarget.table_key`); the table
        commit's own requirements then refuse a change after this point.  A decided
        attempt is not checked again here (its roll-forward checks before the table
        commit).  The table loaded here is handed to this commit's switch, which then
        loads it only if its commit loses a race."""
        table = self.table_target.loaded_ahead(txn.txn_id)
        sealed = self.sealed_stats(txn, manifest)
        uris = self._staged_uris(txn, [f.path for f in manifest.files])
        footers = None  # read here at most once, and handed to the switch with the table
        if sealed is None or sealed["table"] != self.table_target.table_key(table, self.scope):
            footers = self.table_target.read_footers(uris)
            self.table_target.check_staged(uris, txn.epoch, table, footers=footers,
                                           scope=self.scope)
        self.table_target.hand_over(txn.txn_id, table)
        self.table_target.hand_over_footers(txn.txn_id, footers)
        if table is not None and sealed is not None and not self.scope.add_columns \
                and sealed["table"] == self.table_target.table_key(table, self.scope):
            # The switch would build its commit from these very statistics: built now,
            # beside the rest of the commit, and sent only after the decision.
            self.table_target.prepare_commit(txn.txn_id, table, manifest, uris, sealed,
                                             self.scope)

    def _decide_commit(self, txn: Transaction, attempts: dict[int, AttemptRecords],
                       expected_digest: str | None, force: bool
                       ) -> tuple[Manifest, CommitDecision, bool]:
        """The core's decision; once it is written, the table commit built beside it
        sends its files (:meth:`TableTarget.decided`) while the switch reads the marker:
        nothing reaches the table's store before the decision, as before."""
        decided = super()._decide_commit(txn, attempts, expected_digest, force)
        self.table_target.decided(txn.txn_id)
        return decided

    def commit(self, txn: Transaction, *, expected_digest: str | None = None,
               force: bool = False) -> CommitResult:
        """The core's commit, with its reads before the decision made side by side: the
        begin record, the epoch's ledger listing, the sealed manifest and statistics,
        the staging listing (:mod:`airflow_tpc.storage.ahead`: each served once, and
        none after the commit's first write) and the table (:meth:`TableTarget.
        load_ahead`).  Behind object-store latency they were six round trips in a row;
        the checks and every write keep their order."""
        forget_sealed_stats()
        try:
            with reading_ahead(self.storage, self._reads_before_decision(txn)):
                self.table_target.load_ahead(txn.txn_id)
                return super().commit(txn, expected_digest=expected_digest, force=force)
        finally:
            self._release()

    def _reads_before_decision(self, txn: Transaction) -> list[tuple[str, str]]:
        """What a commit of ``txn`` reads before it decides (the paths the core's own
        reads name; none for a transaction the commit will refuse unread)."""
        if txn.target.rstrip("/") != self.target.rstrip("/"):
            return []
        try:
            epoch = check_epoch(txn.epoch)
        except TpcError:
            return []
        layout, join = self.layout, self.storage.join
        seal = layout.sealed(epoch, txn.attempt)
        return [("read", layout.record(epoch, txn.attempt, BEGIN)),
                ("list", join(layout.ledger_root, f"epoch={epoch}")),
                ("read", join(seal, MANIFEST_NAME)),
                ("read", join(seal, TABLE_STATS_NAME)),
                ("list", layout.staging(epoch, txn.attempt))]

    def _release(self) -> None:
        self.table_target.hand_over(None, None)  # never outlives the commit


def _placed_location(ledger_uri: str, storage_options: dict[str, Any] | None,
                     table_uri: str) -> str | None:
    """The table location the claim at ``ledger_uri`` records for this table (None: no
    claim yet, or the claim of another table, which the claim check then refuses).
    Tables are compared by name without the catalog's (one catalog may be named
    differently by an operator's connection and by the CLI)."""
    from ..core.ledger import claim_path
    from ..storage import open_storage

    storage, root = open_storage(ledger_uri, storage_options)
    path = claim_path(storage, root)
    try:
        raw = storage.read_bytes(path)
    except StorageError as exc:
        if exc.denied:  # a ledger_uri no pipeline may use: refused, and why, next
            return None
        raise
    claim = Ledger.decode_at(storage, path, raw) or {}
    recorded, table = claim.get("table_location"), claim.get("table")
    if not (isinstance(recorded, str) and recorded and isinstance(table, str)):
        return None
    return recorded if urlparse(table).path == urlparse(table_uri).path else None


def _ledger_root(fmt: str, table_uri: str, location: str, ledger_uri: str) -> str:
    """``ledger_uri``, refused unless it lies apart from the table's location (not in it,
    not holding it) on the table's store."""
    from ..storage import open_storage

    ledger_store, ledger_path = open_storage(ledger_uri)
    table_store, table_path = open_storage(location)
    if ledger_store.scheme != table_store.scheme:
        raise TpcError(f"ledger_uri {ledger_uri} is on another store than {fmt} table "
                       f"{table_uri} ({location}): the ledger and the staged data files are "
                       "written with one set of storage options, so put the ledger on the "
                       f"table's store ({table_store.scheme}://)")
    a, b = ledger_path.rstrip("/") + "/", table_path.rstrip("/") + "/"
    if a.startswith(b) or b.startswith(a):
        raise TpcError(f"ledger_uri {ledger_uri} must lie apart from {fmt} table {table_uri}: "
                       f"it {'is inside' if a.startswith(b) else 'holds'} the table's location "
                       f"{location}. Without ledger_uri the ledger lives in the table's location "
                       "itself; with it, choose a folder outside the table")
    return ledger_uri
