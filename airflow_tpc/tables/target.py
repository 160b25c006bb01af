"""A table target: what the skeleton asks of a table, and what both formats answer alike.

:class:`TableTarget` is one table of one format (Iceberg, Delta).  The sink's
skeleton (:mod:`.base`) and the switch's (:mod:`.switch`) call its verbs; a format
subclass implements the ones that speak to its library (load, create, read the
history, the per-format schema rules) and inherits what is the same for every
format:

* the staged-file check (:meth:`TableTarget.check_staged`): footers read once, the
  ``epoch`` column, the table's layout, each distinct schema once, and for a table
  not created yet one schema a new table can be made from — one order, one message;
* the footer reads (:meth:`TableTarget.read_footers`, through the format's opener);
* the hand-over of the table loaded before the decision to the switch just after it.

Also here: the ``airflow-tpc.*`` properties every epoch commit carries in the
table's own history (Iceberg's snapshot summary, Delta's ``commitInfo``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from ..errors import TpcError
from ..storage.ahead import ahead_pool
from .scope import Scope
from .staged import EPOCH_COLUMN, epoch_column_problems, norm_uri, read_footers, schema_error

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa

    from ..core.manifest import Manifest
    from ..core.promote import Strategy

#: Commit properties (Iceberg snapshot summary / Delta commitInfo) of every epoch commit.
PROP_TXN_ID = "airflow-tpc.txn-id"
PROP_DIGEST = "airflow-tpc.manifest-digest"
PROP_EPOCH = "airflow-tpc.epoch"
PROP_ATTEMPT = "airflow-tpc.attempt"
PROP_NAMESPACE = "airflow-tpc.namespace"

#: The version of the proof, made before a decision, that a table not created yet can
#: be created from the staged files (:meth:`TableTarget._creation_problems`); sealed in
#: :meth:`TableTarget.new_table_key`.
CREATION_PROOF = 1

#: The default scope: the epoch's identity partition.
EPOCH_SCOPE = Scope()

#: ``({uri: Parquet FileMetaData}, problems)``: footers read once (:func:`read_footers`).
Footers = tuple[dict[str, Any], list[str]]


def commit_properties(manifest: Manifest) -> dict[str, str]:
    """What every epoch commit carries in the table's own history."""
    return {PROP_TXN_ID: manifest.txn_id, PROP_DIGEST: manifest.digest,
            PROP_EPOCH: manifest.epoch, PROP_ATTEMPT: str(manifest.attempt),
            PROP_NAMESPACE: manifest.namespace}


class TableTarget:
    """One table of one format, as the shared skeleton uses it.

    Subclasses set :attr:`label` and implement the verbs that raise
    ``NotImplementedError`` here, plus the check's hooks (``_missing_epoch_column``,
    ``_table_problems``, ``_schema_check``, ``_creatable_problems``)."""

    #: The format's name in messages ("Iceberg", "Delta").
    label = "table"

    # -- what each format answers -------------------------------------------------
    @classmethod
    def for_sink(cls, uri: str, catalog_properties: dict[str, str] | None,
                 storage_options: dict[str, Any] | None) -> TableTarget:
        """The table ``uri`` names, from a table sink's arguments: ``catalog_properties``
        are the format's own (pyiceberg's catalog properties, delta-rs's storage
        options), ``storage_options`` the fsspec options of the table's store."""
        raise NotImplementedError

    @property
    def uri(self) -> str:
        """``iceberg://…`` / ``delta+…://…``: how users and Asset events name the table."""
        raise NotImplementedError

    def location(self, *, placed: str | None = None) -> str:
        """The table's location URI (staging lies below it; the ledger too unless it is
        apart).  ``placed``: where a sink of the same ledger placed a table that is not
        created yet (a catalog may answer otherwise once that place holds files)."""
        raise NotImplementedError

    def placement_is_stable(self) -> bool:
        """Whether every process learns the same :meth:`location` before the table
        exists (a REST catalog's server may not answer the same twice)."""
        raise NotImplementedError

    def load_table(self) -> Any:
        """The table, or None if it does not exist yet (created on the first commit)."""
        raise NotImplementedError

    def strategy(self, scope: dict[str, Any] | None = None) -> Strategy:
        """The promotion strategy whose switch is one commit of the table, replacing
        the rows ``scope`` (a decision record's, :class:`Scope`) names."""
        raise NotImplementedError

    def referenced_files(self) -> set[str]:
        """Every data file (normalised URI) any retained table version references."""
        raise NotImplementedError

    def table_key(self, table: Any, scope: Scope = EPOCH_SCOPE) -> Any:
        """What the staged files were checked against (JSON): equal keys at pre-commit
        and at commit mean the check holds still (no table: :meth:`new_table_key`)."""
        raise NotImplementedError

    def file_stats(self, footers: dict[str, Any], table: Any) -> dict[str, dict[str, Any]]:
        """Per staged URI, what the table commit needs of its footer (JSON)."""
        raise NotImplementedError

    def highest_attempt(self, epoch: str, namespace: str) -> int:
        """The highest attempt of ``epoch`` the table's history holds (0: none)."""
        raise NotImplementedError

    def table_version(self, epoch: str, namespace: str,
                      digest: str) -> dict[str, str] | None:
        """The table version that carries manifest ``digest`` of ``epoch``, or None."""
        raise NotImplementedError

    def _opener(self) -> Callable[[str], Any]:
        """``open(uri)``: a readable stream of a staged file, on the table's own store."""
        raise NotImplementedError

    # -- the hand-over -------------------------------------------------------------
    _handed: tuple[str, Any] | None = None

    def hand_over(self, txn_id: str | None, table: Any) -> None:
        """Keep ``table`` for ``txn_id``'s switch; None forgets it (and the footers).

        The table one commit loaded for its check before the decision goes to its
        switch moments later instead of a second load (a catalog round trip, or a
        Delta log read).  Safe because a table commit never trusts its base:
        Iceberg's asserts the snapshot it was built on, Delta's conflicts on the
        epoch's application transaction; a switch that loses that race reloads, as
        it always did."""
        self._handed = None if txn_id is None or table is None else (txn_id, table)
        if txn_id is None:
            self._handed_footers = None
            self._ahead = None
            if self._prepared is not None:
                self._prepared[2].add_done_callback(_discard)
                self._prepared = None

    _ahead: tuple[str, Future[Any]] | None = None
    #: Whether the table is loaded in the background (a catalog request: Iceberg); a
    #: Delta log read stays on the caller's thread (delta-rs's native handles).
    loads_ahead = False

    def load_ahead(self, txn_id: str) -> None:
        """Start loading the table in the background for ``txn_id``'s check before the
        decision (:meth:`loaded_ahead`), beside the commit's other first reads."""
        if self.loads_ahead:
            self._ahead = (txn_id, ahead_pool().submit(self.load_for_commit))

    def load_for_commit(self) -> Any:
        """The table, loaded for a commit (default: :meth:`load_table`; a format may
        start reading ahead what the commit reads of it next)."""
        return self.load_table()

    def loaded_ahead(self, txn_id: str) -> Any:
        """The table loaded ahead for ``txn_id`` (once), else a load now; a load ahead
        that failed is made again (its error, if any, is this one's)."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None and ahead[0] == txn_id and ahead[1].exception() is None:
            return ahead[1].result()
        return self.load_table()

    #: (txn id, table, future of its prepared commit): :meth:`prepare_commit`.
    _prepared: tuple[str, Any, Future[Any]] | None = None

    def prepare_commit(self, txn_id: str, table: Any, manifest: Manifest, uris: list[str],
                       sealed: dict[str, Any], scope: Scope) -> None:
        """Start building, in the background, the table commit ``txn_id``'s switch will
        send on ``table`` from the sealed statistics (which hold for it), writing nothing
        until the switch sends it (:meth:`take_prepared`).  Default: nothing (the switch
        builds its commit itself)."""

    def decided(self, txn_id: str) -> None:
        """``txn_id``'s commit decision is written: the commit prepared for it may send
        its files now (once built).  Default: nothing prepared, nothing to send."""
        prepared = self._prepared
        if prepared is not None and prepared[0] == txn_id:
            prepared[2].add_done_callback(_send_files)

    def take_prepared(self, txn_id: str, table: Any) -> Any:
        """The commit prepared for ``txn_id`` on this very table object (once), or None
        (none, another table — a reload after a lost race —, or its building failed:
        the switch builds it itself).  One not taken is discarded, never written."""
        prepared, self._prepared = self._prepared, None
        if prepared is None:
            return None
        fut = prepared[2]
        if prepared[0] == txn_id and prepared[1] is table and fut.exception() is None:
            return fut.result()
        # Discarded here, once built, before the caller builds its own commit: a table
        # built from this one (a captured commit) shares its FileIO, whose held files
        # must be gone, and holding over, before it writes.
        _discard(fut)
        return None

    _handed_footers: tuple[str, Footers] | None = None

    def hand_over_footers(self, txn_id: str, footers: Footers | None) -> None:
        """Keep the staged ``footers`` ``txn_id``'s check read before the decision for
        its switch (:meth:`take_footers`): a commit reads each footer once."""
        self._handed_footers = None if footers is None else (txn_id, footers)

    def take_footers(self, txn_id: str) -> Footers | None:
        """The staged footers ``txn_id``'s own check read before the decision (once), or
        None: the switch reads them only if it needs them, once."""
        handed, self._handed_footers = self._handed_footers, None
        return handed[1] if handed is not None and handed[0] == txn_id else None

    def take_table(self, txn_id: str) -> Any:
        """The table handed over by ``txn_id``'s own check (once), else a fresh load."""
        handed, self._handed = self._handed, None
        if handed is not None and handed[0] == txn_id:
            return handed[1]
        return self.load_table()

    # -- what the staged files must be ---------------------------------------------
    def read_footers(self, uris: list[str]) -> Footers:
        """Each staged file's footer, read once, in parallel (see :func:`read_footers`)."""
        if not uris:
            return {}, []
        return read_footers(self._opener(), uris)

    def check_staged(self, uris: list[str], epoch: str, table: Any, *,
                     decided: str | None = None, footers: Footers | None = None,
                     scope: Scope = EPOCH_SCOPE) -> pa.Schema | None:
        """Refuse staged files the table cannot take, naming the files and columns
        (:class:`~airflow_tpc.tables.staged.TableSchemaError`).

        Every file: Parquet; for the epoch layout, an ``epoch`` column holding only
        ``epoch`` (:meth:`_epoch_problems`).  With a table: the table's layout and the
        scope (:meth:`_table_problems`), and each distinct schema once against the
        table's (:meth:`_schema_check`; a commit of 10k files has one or two).
        Without one: one schema for every file, one a new table can be made from.
        Returns that schema (None if there are no files).  ``decided``: the
        transaction id when this is a roll-forward of a decided commit (the error then
        says what is kept), else a check before the decision.  ``footers``: the
        files' footers already read (:meth:`read_footers`)."""
        found, problems = footers if footers is not None else self.read_footers(uris)
        problems = list(problems)
        schemas = {uri: found[uri].schema.to_arrow_schema().remove_metadata()
                   for uri in uris if uri in found}
        if scope.kind == "epoch":
            for uri, schema in schemas.items():
                problems += self._epoch_problems(uri, found[uri], schema, epoch)
        if table is not None:
            problems += self._table_problems(table, scope, found, uris, problems)
            fits = self._schema_check(table, scope)
            verdicts: dict[pa.Schema, list[str]] = {}
            for uri, schema in schemas.items():
                if schema not in verdicts:
                    verdicts[schema] = fits(schema)
                problems += [f"{uri}: {p}" for p in verdicts[schema]]
        else:
            problems += self._new_table_problems(schemas, scope)
            if not problems and schemas:
                problems += self._creation_problems(schemas, scope, found, uris)
        if problems:
            raise schema_error(self.label, self.uri, epoch, problems, decided)
        return next(iter(schemas.values()), None)

    def _epoch_problems(self, uri: str, md: Any, schema: pa.Schema, epoch: str) -> list[str]:
        """A staged file's ``epoch`` column holds only ``epoch``; a file without the
        column is the format's call (:meth:`_missing_epoch_column`)."""
        if EPOCH_COLUMN not in schema.names:
            return self._missing_epoch_column(uri, epoch)
        return epoch_column_problems(uri, md, schema, epoch)

    def _missing_epoch_column(self, uri: str, epoch: str) -> list[str]:
        """A staged file of the epoch layout without an ``epoch`` column: fine here
        (the format takes the value from its own partition metadata)."""
        return []

    def _table_problems(self, table: Any, scope: Scope, found: dict[str, Any],
                        uris: list[str], so_far: list[str]) -> list[str]:
        """What keeps the table from taking these files whatever their schema: its
        layout, the scope (``so_far``: the problems found already, where a costly
        check is not worth making)."""
        raise NotImplementedError

    def _schema_check(self, table: Any, scope: Scope) -> Callable[[pa.Schema], list[str]]:
        """The check of one staged schema against the table's (problems, unprefixed)."""
        raise NotImplementedError

    def _creatable_problems(self, schema: pa.Schema) -> list[str]:
        """Why no table of this format can be created from ``schema`` (none: it can)."""
        raise NotImplementedError

    def _creation_problems(self, schemas: dict[str, pa.Schema], scope: Scope,
                           found: dict[str, Any], uris: list[str]) -> list[str]:
        """Why the switch could not create the table from these files and commit them to
        it (none: it can).  Settled here, before the decision, in full: the table the
        switch would create from the first file's schema is built the way the format's
        library builds it, never written (:meth:`_proposed_table`), and the files are
        checked against it exactly as the switch checks them against the table it
        created (:meth:`_table_problems`, :meth:`_schema_check`), then what the commit
        builds from them (:meth:`_commit_problems`).  A decision is never written that
        no switch can carry out."""
        try:
            with self._proposed_table(next(iter(schemas.values())), scope) as proposed:
                problems = self._table_problems(proposed, scope, found, uris, [])
                fits = self._schema_check(proposed, scope)
                for uri, schema in schemas.items():
                    problems += [f"{uri}: {p}" for p in fits(schema)]
                return problems or self._commit_problems(proposed, found, uris)
        except (TpcError, NotImplementedError):  # a store's failure; a format's gap
            raise
        except Exception as exc:  # the library's refusal: one line, never its traceback
            lines = str(exc).strip().splitlines()  # delta-rs appends its backtrace
            return [f"no {self.label} table can be created from the staged schema: "
                    f"{type(exc).__name__}: {lines[0] if lines else ''}"]

    @contextmanager
    def _proposed_table(self, schema: pa.Schema, scope: Scope) -> Iterator[Any]:
        """The table the switch would create from ``schema`` for ``scope``, built by the
        format's library where nothing reads it (in memory, or a scratch location
        removed on exit); raises the library's error if it cannot be made."""
        raise NotImplementedError
        yield  # pragma: no cover

    def _commit_problems(self, table: Any, found: dict[str, Any], uris: list[str]) -> list[str]:
        """What the first commit would fail on building its commit from these files'
        footers against the new ``table`` (default: nothing)."""
        return []

    def new_table_key(self, scope: Scope) -> dict[str, Any]:
        """The sealed :meth:`table_key` of a table not created yet: the creation proof's
        version, the location it was proven for and the scope.  A seal without it (a
        pre-commit of an earlier release, or under another scope) is checked again
        before the decision, creation proof included."""
        return {"new_table": CREATION_PROOF, "location": norm_uri(self.location()),
                "scope": scope.to_doc()}

    def _data_columns(self, schema: pa.Schema) -> pa.Schema:
        """What must be equal across the staged files a new table is created from."""
        return schema

    def _new_table_problems(self, schemas: dict[str, pa.Schema], scope: Scope) -> list[str]:
        """A table not created yet is created from the staged files' one schema."""
        problems: list[str] = []
        first = next(iter(schemas.values()), None)
        if scope.kind == "where":
            problems.append(f"replace_where needs an existing table, and {self.uri} does "
                            "not exist: create it with the partitioning it should have "
                            "(the epoch layout, without replace_where, creates its own)")
        if first is None:
            return problems
        problems += self._creatable_problems(first)
        for uri, schema in schemas.items():
            if not self._data_columns(schema).equals(self._data_columns(first)):
                cols = sorted({f.name for f in schema} ^ {f.name for f in first}
                              | {f.name for f in schema if f.name in first.names
                                 and first.field(f.name).type != f.type})
                problems.append(f"{uri} has another schema than the first staged file "
                                f"(columns {', '.join(cols)}); a new table is created from "
                                "one schema")
        return problems


def _send_files(fut: Future[Any]) -> None:
    """A prepared commit, decided: its held files go out (see :meth:`decided`)."""
    if not fut.cancelled() and fut.exception() is None and fut.result() is not None:
        fut.result().send_files()


def _discard(fut: Future[Any]) -> None:
    """A prepared commit not taken: its held files are dropped (never written)."""
    if not fut.cancelled() and fut.exception() is None and fut.result() is not None:
        fut.result().discard()
