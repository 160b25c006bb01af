"""The one skeleton every table format's sink shares (Iceberg, Delta).

A table target differs from a folder in three places only, and each is here once:

* **where staging lives and what may be removed** — :class:`TableLayout`: staging is
  inside the table's location (the staged files *become* the table's data files),
  and every removal of staging (abort, supersession, recover, gc) keeps the files
  any retained table version references;
* **what the staged files must be** — :class:`TableSink` checks them against the
  table at pre-commit and again at commit before the decision (the table may have
  changed in between), so a schema the table cannot take is refused with nothing
  decided;
* **the switch** — the format's own atomic commit, a
  :class:`~airflow_tpc.promote.Strategy` the target hands to
  :func:`~airflow_tpc.promote.strategy_for` through the layout.

A format plugs in a *target* object (:class:`TableTarget`) that knows its table;
the verbs, the ledger and the fencing are the core's, unchanged.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlparse

from ..errors import ManifestError, StorageError, TpcError
from ..faults import crashpoint
from ..ledger import TPC_DIR, Layout, Ledger
from ..sink import Sink
from ..staging import TABLE_STATS_NAME, digest_bytes, list_staged, on_threads
from ..transaction import CommitResult, SinkConfig, Transaction
from .scope import Scope

if TYPE_CHECKING:  # pragma: no cover
    from ..manifest import Manifest
    from ..promote import Strategy
    from ..storage import ObjectInfo, Storage

log = logging.getLogger("airflow_tpc")

#: The partition column: one value (the epoch's name) per data file.
EPOCH_COLUMN = "epoch"
#: Commit properties (Iceberg snapshot summary / Delta commitInfo) of every epoch commit.
PROP_TXN_ID = "airflow-tpc.txn-id"
PROP_DIGEST = "airflow-tpc.manifest-digest"
PROP_EPOCH = "airflow-tpc.epoch"
PROP_ATTEMPT = "airflow-tpc.attempt"
PROP_NAMESPACE = "airflow-tpc.namespace"
#: Optimistic-concurrency retries when another writer commits to the table meanwhile.
COMMIT_RETRIES = 10
#: Footers read at once where they must be read (pre-commit, a fallback): each is one
#: or two ranged GETs, so latency, not CPU, is what the threads overlap.
FOOTER_THREADS = 16
STATS_FORMAT = "airflow-tpc-table-stats"
STATS_VERSION = 1


class TableSchemaError(ManifestError):
    """The staged files are not something the table can take (columns named)."""


def norm_uri(uri: str) -> str:
    """One spelling per file for comparisons: ``file:///x`` and ``/x`` are the same."""
    if uri.startswith("file://"):
        return urlparse(uri).path
    return uri


def commit_properties(manifest: Manifest) -> dict[str, str]:
    """What every epoch commit carries in the table's own history."""
    return {PROP_TXN_ID: manifest.txn_id, PROP_DIGEST: manifest.digest,
            PROP_EPOCH: manifest.epoch, PROP_ATTEMPT: str(manifest.attempt),
            PROP_NAMESPACE: manifest.namespace}


def schema_error(fmt: str, uri: str, epoch: str, problems: list[str],
                 decided: str | None) -> TableSchemaError:
    """One message for staged files a table cannot take: before the decision (nothing
    decided or changed) or at a roll-forward (the decision and staging are kept)."""
    what = "; ".join(problems[:20]) \
        + (f"; and {len(problems) - 20} more" if len(problems) > 20 else "")
    if decided:
        return TableSchemaError(
            f"cannot roll {decided} forward into {fmt} table {uri}, which changed after the "
            f"commit was decided: {what}. Nothing was changed in the table; the decision and "
            "the staged files are kept (recover reports this every time): restore the "
            "table's schema, or commit a new attempt of the epoch, which replaces it.")
    return TableSchemaError(
        f"the staged files of epoch {epoch} cannot go into {fmt} table {uri}: {what}. "
        "Nothing was decided or changed: fix the job's output and run a new attempt of the "
        "epoch.")


def read_footers(open_file: Any, uris: list[str]) -> tuple[dict[str, Any], list[str]]:
    """Each file's Parquet footer (``{uri: FileMetaData}``), read once and in parallel
    (``open_file(uri)`` gives a readable stream), and the problems of unreadable ones."""
    import pyarrow.parquet as pq

    def one(uri: str) -> tuple[str, Any, str | None]:
        try:
            with open_file(uri) as stream:
                return uri, pq.read_metadata(stream), None
        except Exception as exc:
            return uri, None, f"{uri} is not a readable Parquet file ({type(exc).__name__})"

    footers: dict[str, Any] = {}
    problems: list[str] = []
    for uri, md, problem in on_threads(one, uris, FOOTER_THREADS):
        if problem is None:
            footers[uri] = md
        else:
            problems.append(problem)
    return footers, problems


def stats_bytes(table_key: Any, files: dict[str, dict[str, Any]]) -> bytes:
    """The ``_tpc_table_stats.json`` sidecar: what pre-commit learned from the footers
    (per file: size, rows, format statistics) and the table state it checked them
    against (``table_key``; null: no table yet)."""
    return json.dumps({"format": STATS_FORMAT, "version": STATS_VERSION, "table": table_key,
                       "files": files}, sort_keys=True, separators=(",", ":")).encode()


def read_sealed_stats(storage: Storage, seal: str,
                      manifest: Manifest) -> dict[str, Any] | None:
    """The sidecar sealed with ``manifest``, if its sha256 is the one the manifest names
    and it describes exactly the manifest's files and sizes; else None (the caller then
    reads the footers: an unchecked sidecar is never used)."""
    if not manifest.table_stats:
        return None
    where = storage.uri(storage.join(seal, TABLE_STATS_NAME))
    raw = _SEALED_STATS.get((where, manifest.table_stats))
    if raw is None:
        try:
            raw = storage.read_bytes(storage.join(seal, TABLE_STATS_NAME))
        except StorageError as exc:
            log.warning("cannot read the table statistics of %s (%s); reading the footers",
                        manifest.txn_id, exc)
            return None
    if raw is None or digest_bytes(raw) != manifest.table_stats:
        log.warning("the table statistics sealed with %s (%s) are missing or changed after "
                    "pre-commit: not used, the footers are read instead", manifest.txn_id,
                    TABLE_STATS_NAME)
        return None
    try:
        doc = json.loads(raw)
        files = doc["files"]
        ok = doc.get("format") == STATS_FORMAT and doc.get("version") == STATS_VERSION \
            and {p: e["size"] for p, e in files.items()} \
            == {f.path: f.size for f in manifest.files}
    except (ValueError, TypeError, KeyError, AttributeError):
        ok = False
    if not ok:
        log.warning("the table statistics of %s do not describe its sealed files: not used",
                    manifest.txn_id)
        return None
    _SEALED_STATS.clear()  # the last one only: a commit reads it before and after deciding
    _SEALED_STATS[(where, manifest.table_stats)] = raw
    return doc  # type: ignore[no-any-return]


#: The last sidecar read, by location and the sha256 its manifest names: content
#: addressed, so a hit is exactly the bytes a read would return when it is not stale.
_SEALED_STATS: dict[tuple[str, str], bytes] = {}


class HandOver:
    """The table one commit loaded for its check before the decision, handed to its
    switch moments later instead of a second load (a catalog round trip, or a Delta
    log read).  Safe because a table commit never trusts its base: Iceberg's asserts
    the snapshot it was built on, Delta's conflicts on the epoch's application
    transaction; a switch that loses that race reloads, as it always did."""

    _handed: tuple[str, Any] | None = None

    def hand_over(self, txn_id: str | None, table: Any) -> None:
        self._handed = None if txn_id is None or table is None else (txn_id, table)

    def take_table(self, txn_id: str) -> Any:
        """The table handed over by ``txn_id``'s own check (once), else a fresh load."""
        handed, self._handed = self._handed, None
        if handed is not None and handed[0] == txn_id:
            return handed[1]
        return self.load_table()  # type: ignore[attr-defined]


class TableTarget(Protocol):
    """What a table format supplies to the shared skeleton."""

    #: ``iceberg://…`` / ``delta+…://…``: how users and Asset events name the table.
    uri: str

    def location(self, *, placed: str | None = None) -> str:
        """The table's location URI (staging lies below it; the ledger too unless it is
        apart).  ``placed``: where a sink of the same ledger placed a table that is not
        created yet (a catalog may answer otherwise once that place holds files)."""

    def placement_is_stable(self) -> bool:
        """Whether every process learns the same :meth:`location` before the table
        exists (a REST catalog's server may not answer the same twice)."""

    def load_table(self) -> Any:
        """The table, or None if it does not exist yet (created on the first commit)."""

    def hand_over(self, txn_id: str | None, table: Any) -> None:
        """Keep ``table`` for ``txn_id``'s switch (:class:`HandOver`); None forgets it."""

    def take_table(self, txn_id: str) -> Any:
        """The table handed over for ``txn_id`` (once), else :meth:`load_table`."""

    def strategy(self, scope: dict[str, Any] | None = None) -> Strategy:
        """The promotion strategy whose switch is one commit of the table, replacing
        the rows ``scope`` (a decision record's, :class:`Scope`) names."""

    def check_staged(self, uris: list[str], epoch: str, table: Any, *,
                     decided: str | None = None,
                     footers: tuple[dict[str, Any], list[str]] | None = None,
                     scope: Scope = ...) -> Any:
        """Raise :class:`TableSchemaError` naming files and columns the table cannot take."""

    def referenced_files(self) -> set[str]:
        """Every data file (normalised URI) any retained table version references."""

    def table_key(self, table: Any, scope: Scope = ...) -> Any:
        """What the staged files were checked against (JSON): equal keys at pre-commit
        and at commit mean the check holds still (None: no table)."""

    def read_footers(self, uris: list[str]) -> tuple[dict[str, Any], list[str]]:
        """Each staged file's footer, read once, in parallel (see :func:`read_footers`)."""

    def file_stats(self, footers: dict[str, Any], table: Any) -> dict[str, dict[str, Any]]:
        """Per staged URI, what the table commit needs of its footer (JSON)."""

    def highest_attempt(self, epoch: str, namespace: str) -> int:
        """The highest attempt of ``epoch`` the table's history holds (0: none)."""

    def table_version(self, epoch: str, namespace: str,
                      digest: str) -> dict[str, str] | None:
        """The table version that carries manifest ``digest`` of ``epoch``, or None."""


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
    at pre-commit and at commit before the decision.  Subclasses parse their URI and
    say where staging goes below the table location (``staging_dir``).
    """

    #: The format's name, for messages.
    format = "table"
    #: Staging's folder below the table location.
    staging_dir = "_tpc_staging"

    def __init__(self, target: TableTarget, namespace: str, *,
                 storage_options: dict[str, Any] | None = None,
                 config: SinkConfig | None = None,
                 ledger_uri: str | None = None,
                 scope: Scope | None = None) -> None:
        config = config or SinkConfig()
        #: Which rows of the table an epoch's commit replaces (:mod:`.scope`).
        self.scope = scope or Scope()
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
        its sha256 in the manifest), so the commit reads no footer again."""
        self._check_own(txn)
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
        table = self.table_target.load_table()
        sealed = self.sealed_stats(txn, manifest)
        if sealed is None or sealed["table"] != self.table_target.table_key(table, self.scope):
            self.table_target.check_staged(
                self._staged_uris(txn, [f.path for f in manifest.files]), txn.epoch,
                table, scope=self.scope)
        self.table_target.hand_over(txn.txn_id, table)

    def commit(self, txn: Transaction, *, expected_digest: str | None = None,
               force: bool = False) -> CommitResult:
        try:
            return super().commit(txn, expected_digest=expected_digest, force=force)
        finally:
            self._release()

    def _release(self) -> None:
        self.table_target.hand_over(None, None)  # never outlives the commit


def _placed_location(ledger_uri: str, storage_options: dict[str, Any] | None,
                     table_uri: str) -> str | None:
    """The table location the claim at ``ledger_uri`` records for this table (None: no
    claim yet, or the claim of another table, which the claim check then refuses).
    Tables are compared by name without the catalog's (one catalog may be named
    differently by an operator's connection and by the CLI)."""
    from ..ledger import claim_path
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


def column_statistics(md: Any, name: str) -> Iterator[tuple[int, Any]]:
    """``(rows, statistics)`` of column ``name`` in each non-empty row group of a Parquet
    footer (statistics None where the writer kept none)."""
    for rg in range(md.num_row_groups):
        group = md.row_group(rg)
        if group.num_rows == 0:
            continue
        col = next(group.column(i) for i in range(group.num_columns)
                   if group.column(i).path_in_schema == name)
        yield group.num_rows, col.statistics


def epoch_column_problems(uri: str, md: Any, schema: Any, epoch: str) -> list[str]:
    """The staged file's ``epoch`` column (present) is a string holding only ``epoch``,
    judged from the footer's row-group statistics (no data read).  Shared by the
    table formats; each decides what a file *without* the column means."""
    import pyarrow as pa

    typ = schema.field(EPOCH_COLUMN).type
    if not (pa.types.is_string(typ) or pa.types.is_large_string(typ)):
        return [f"{uri}: column {EPOCH_COLUMN!r} is {typ}, not a string"]
    for _rows, stats in column_statistics(md, EPOCH_COLUMN):
        if stats is None or not stats.has_min_max or stats.null_count:
            return [f"{uri}: column {EPOCH_COLUMN!r} has nulls or no statistics; every row "
                    f"must hold {epoch!r}"]
        if stats.min != epoch or stats.max != epoch:
            return [f"{uri}: column {EPOCH_COLUMN!r} holds {stats.min!r}..{stats.max!r}, "
                    f"not only this epoch {epoch!r}"]
    return []
