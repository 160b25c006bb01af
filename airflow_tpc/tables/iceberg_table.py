"""One Iceberg table in one catalog, as the table skeleton asks of it.

:class:`IcebergTable` is everything :class:`~airflow_tpc.tables.target.TableTarget`
asks of a table but its switch: the catalog (opened once, every client error one
StorageError), where the table lies or will be made, its creation, the files its
snapshots reference, the epoch's commits in its snapshot summaries, and the format's
side of the staged-file check (:mod:`.iceberg_files`).  The target users name,
:class:`~airflow_tpc.tables.iceberg.IcebergTarget`, adds the switch
(:class:`~airflow_tpc.tables.iceberg_commit.IcebergSnapshot`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlparse

from ..errors import StorageError, TpcError
from .catalogs import ensure_namespace, open_catalog
from .iceberg_create import new_table_parts, proposed_table, stats_problems
from .iceberg_files import (
    creatable_problems,
    epoch_partition_position,
    iceberg_stats,
    schema_problems,
    scope_problems,
    stats_plan,
)
from .iceberg_partitions import needs_data, partitions_from_data
from .scope import Scope
from .staged import EPOCH_COLUMN, TableSchemaError, norm_uri
from .target import (
    EPOCH_SCOPE,
    PROP_ATTEMPT,
    PROP_DIGEST,
    PROP_EPOCH,
    PROP_NAMESPACE,
    TableTarget,
)

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

log = logging.getLogger("airflow_tpc")

T = TypeVar("T", bound="IcebergTable")


def _need_pyiceberg() -> None:
    try:
        import pyiceberg  # noqa: F401
    except ImportError:  # pragma: no cover - the extra is installed in dev
        raise TpcError("Iceberg targets need pyiceberg: pip install 'airflow-tpc[tables]'") \
            from None


class IcebergTable(TableTarget):
    """One Iceberg table in one catalog: ``iceberg://<catalog>/<namespace>.<table>``.

    ``catalog_properties`` are pyiceberg's catalog properties (``type``, ``uri``,
    ``warehouse``, ``s3.endpoint`` ...); with none, ``load_catalog`` reads the
    catalog's configuration from ``~/.pyiceberg.yaml`` or the environment.
    ``location``: where to create the table if it does not exist (default: the
    catalog's default location for it).  The catalog is opened on first use.
    """

    label = "Iceberg"
    loads_ahead = True

    def __init__(self, catalog_name: str, identifier: str,
                 catalog_properties: dict[str, str] | None = None,
                 location: str | None = None) -> None:
        parts = identifier.split(".")
        if not catalog_name or len(parts) < 2 or not all(parts):
            raise TpcError(f"invalid Iceberg table {catalog_name!r}/{identifier!r}: use "
                           "iceberg://<catalog>/<namespace>.<table>")
        self.catalog_name = catalog_name
        self.identifier = identifier
        self.namespace = tuple(parts[:-1])
        self.catalog_properties = dict(catalog_properties or {})
        self._location = location.rstrip("/") if location else None
        self._catalog: Catalog | None = None
        #: Partitions computed from staged files' values by the last check (a spec with
        #: a ``bucket`` field: :mod:`.iceberg_partitions`), reused for their statistics.
        self._data_partitions: dict[str, list[Any]] = {}
        #: Whether the table existed when :meth:`location` first looked (None: not yet).
        self._existed: bool | None = None

    @classmethod
    def for_sink(cls, uri: str, catalog_properties: dict[str, str] | None,
                 storage_options: dict[str, Any] | None) -> TableTarget:
        """``catalog_properties``: pyiceberg's, for the catalog the URI names."""
        return cls.parse(uri, catalog_properties)

    @classmethod
    def parse(cls: type[T], uri: str, catalog_properties: dict[str, str] | None = None,
              location: str | None = None) -> T:
        """``iceberg://<catalog>/<namespace>.<table>`` (namespaces may be nested: a.b.t)."""
        parsed = urlparse(uri)
        if parsed.scheme != "iceberg" or parsed.query or parsed.fragment:
            raise TpcError(f"{uri!r} is not an Iceberg target: use "
                           "iceberg://<catalog>/<namespace>.<table>")
        return cls(parsed.netloc, parsed.path.strip("/"), catalog_properties, location)

    @property
    def uri(self) -> str:
        return f"iceberg://{self.catalog_name}/{self.identifier}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.uri!r})"

    # -- the catalog ------------------------------------------------------------
    def catalog(self) -> Catalog:
        """The catalog, opened once; failing to reach it is a StorageError (retryable,
        and a roll-forward keeps its decision), never a driver's traceback."""
        if self._catalog is None:
            _need_pyiceberg()
            try:
                self._catalog = open_catalog(self.catalog_name, self.catalog_properties)
            except Exception as exc:  # sqlalchemy, requests, boto: one clear message
                raise StorageError(f"cannot open Iceberg catalog {self.catalog_name!r} for "
                                   f"{self.uri}: {type(exc).__name__}: {exc}") from None
        return self._catalog

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """Run a catalog call, turning a client's error into one StorageError."""
        from pyiceberg.exceptions import (
            CommitFailedException,
            NoSuchTableError,
            TableAlreadyExistsError,
        )

        try:
            return fn(*args, **kwargs)
        except (NoSuchTableError, TableAlreadyExistsError, CommitFailedException, TpcError):
            raise  # answers the caller acts on
        except Exception as exc:
            raise StorageError(f"Iceberg catalog {self.catalog_name!r} failed to {what} "
                               f"{self.identifier}: {type(exc).__name__}: {exc}") from None

    def load_table(self) -> Table | None:
        """The table, or None if it does not exist yet (it is created on first commit)."""
        from pyiceberg.exceptions import NoSuchTableError

        try:
            return self._call("load", self.catalog().load_table, self.identifier)
        except NoSuchTableError:
            return None

    def location(self, *, placed: str | None = None) -> str:
        """The table's location (a URI): its own if it exists, else where it will be made:
        ``placed`` (where an earlier sink of the same ledger placed it), else where the
        catalog says it would go now."""
        if self._location is None:
            table = self.load_table()
            self._existed = table is not None
            if table is not None:
                self._location = table.location().rstrip("/")
            elif placed:
                self._location = placed.rstrip("/")
            else:
                cat = self.catalog()
                self._call("create namespace for", ensure_namespace, cat, self.namespace)
                # The catalog's own answer to "where would this table go?", through
                # public API: a staged create (a REST catalog's stage-create; locally
                # computed by the others) that is never committed.  The table is later
                # created exactly there.
                staged = self._call("resolve the location of", cat.create_table_transaction,
                                    self.identifier, schema=_placeholder_schema())
                self._location = staged.table_metadata.location.rstrip("/")
        return self._location

    def load_for_commit(self) -> Table | None:
        """The table, and its current snapshot's manifest list and manifests read from
        now on in the background (:meth:`hand_over` says why): started as soon as the
        table is loaded, beside the commit's other reads, not after them.  Immutable
        files, so reading them early is exact; a commit refused before its decision
        has read two or three small files for nothing."""
        table = self.load_table()
        if table is not None:
            from .iceberg_io import on_commit_io

            on_commit_io(table).io.prefetch_snapshot(table)
        return table

    def hand_over(self, txn_id: str | None, table: Any) -> None:
        """Keep the table for the switch, and start reading what its commit reads next
        (the current snapshot's manifest list and manifests: immutable files) in the
        background, while the commit still verifies and decides (:mod:`.iceberg_io`)."""
        super().hand_over(txn_id, table)
        if txn_id is not None and table is not None:
            from .iceberg_io import on_commit_io

            on_commit_io(table).io.prefetch_snapshot(table)

    def placement_is_stable(self) -> bool:
        """Whether every process learns the same location for this table before it is
        created: true once it exists, and for catalogs whose client computes a new
        table's location from the warehouse (SQL, Glue, Hive); a REST catalog's server
        decides, and may pick another place once the first has files in it (staging)."""
        from pyiceberg.catalog import MetastoreCatalog

        if isinstance(self.catalog(), MetastoreCatalog):
            return True
        if self._existed is None:  # asked without a stage-create (which may leave files)
            self._existed = self.load_table() is not None
        return self._existed

    def file_io(self) -> Any:
        from pyiceberg.io import load_file_io

        return load_file_io(self.catalog().properties, self.location())

    # -- the table ----------------------------------------------------------------
    def create_table(self, schema: pa.Schema, scope: Scope = EPOCH_SCOPE) -> Table:
        """Create the table from the staged files' schema at :meth:`location`,
        identity-partitioned by epoch (an ``append`` scope: unpartitioned): exactly the
        table the check before the decision proved (:mod:`.iceberg_create`); a
        concurrent creator's table is loaded instead."""
        from pyiceberg.exceptions import TableAlreadyExistsError

        ice, spec = new_table_parts(schema, scope)
        cat = self.catalog()
        self._call("create namespace for", ensure_namespace, cat, self.namespace)
        try:
            table = self._call("create", cat.create_table, self.identifier, schema=ice,
                               partition_spec=spec, location=self.location())
            log.info("created Iceberg table %s at %s, %s", self.identifier, self.location(),
                     f"partitioned by {EPOCH_COLUMN}" if scope.kind == "epoch"
                     else "unpartitioned")
            return table
        except TableAlreadyExistsError:
            table = self.load_table()
            if table is None:  # pragma: no cover - dropped in between
                raise StorageError(f"{self.uri} was created and dropped meanwhile") from None
            return table

    def referenced_files(self) -> set[str]:
        """Every data file any retained snapshot references (time travel keeps working)."""
        table = self.load_table()
        if table is None:
            return set()

        def read() -> set[str]:
            out: set[str] = set()
            seen: set[str] = set()
            for snap in table.snapshots():
                for mf in snap.manifests(table.io):
                    if mf.manifest_path in seen:
                        continue
                    seen.add(mf.manifest_path)
                    for entry in mf.fetch_manifest_entry(table.io, discard_deleted=True):
                        out.add(norm_uri(entry.data_file.file_path))
            return out

        # A StorageError: the sink's best-effort cleanup logs it and deletes nothing.
        return self._call("read the snapshots of", read)  # type: ignore[no-any-return]

    def highest_attempt(self, epoch: str, namespace: str) -> int:
        table = self.load_table()
        return 0 if table is None else epoch_commits(table, epoch, namespace).highest

    def table_version(self, epoch: str, namespace: str,
                      digest: str) -> dict[str, str] | None:
        """The snapshot whose summary carries this manifest's digest."""
        table = self.load_table()
        if table is None:
            return None
        for snap in table.snapshots():
            summary = snap.summary
            if summary is not None and summary[PROP_DIGEST] == digest \
                    and summary[PROP_EPOCH] == epoch and summary[PROP_NAMESPACE] == namespace:
                return {"table": self.uri, "format": "iceberg",
                        "snapshot_id": str(snap.snapshot_id)}
        return None

    def table_key(self, table: Table | None,
                  scope: Scope = EPOCH_SCOPE) -> dict[str, Any] | None:
        """What a check and the column statistics depend on: the table's identity,
        location, current schema and default spec (ids), format version and metrics
        properties, and the scope checked.  Equal keys: the pre-commit check and
        statistics still hold."""
        if table is None:
            return self.new_table_key(scope)
        meta = table.metadata
        return {"uuid": str(meta.table_uuid),
                "location": norm_uri(table.location().rstrip("/")),
                **({"scope": scope.to_doc()} if scope.kind != "epoch" else {}),
                "schema_id": meta.current_schema_id, "spec_id": meta.default_spec_id,
                "format_version": meta.format_version,
                "metrics": {k: v for k, v in sorted(meta.properties.items())
                            if k.startswith("write.metadata.metrics")}}

    def file_stats(self, footers: dict[str, Any], table: Table | None
                   ) -> dict[str, dict[str, Any]]:
        """Per file: rows and, with a table, the Iceberg DataFile statistics its footer
        gives against the table's schema and spec (JSON: ids as strings, bounds hex)."""
        if table is None:
            return {uri: {"rows": md.num_rows} for uri, md in footers.items()}
        plan = stats_plan(table.metadata)
        parts = self._data_partitions if needs_data(table.spec()) else {}
        return {uri: {"rows": md.num_rows,
                      "iceberg": iceberg_stats(md, table.metadata, plan, parts.get(uri))}
                for uri, md in footers.items()}

    def partitions_from_data(self, uris: list[str], meta: Any
                             ) -> tuple[dict[str, list[Any]], list[str]]:
        """Each file's partition from its values (a spec footers cannot decide)."""
        found, problems = partitions_from_data(self._opener(), uris, meta)
        self._data_partitions = found
        return found, problems

    # -- what the staged files must be (the hooks of TableTarget.check_staged) -------
    def _opener(self) -> Callable[[str], Any]:
        """Staged files are read through the table's FileIO (its credentials)."""
        io = self.file_io()
        return lambda uri: io.new_input(uri).open()

    def _missing_epoch_column(self, uri: str, epoch: str) -> list[str]:
        return [f"{uri} has no column {EPOCH_COLUMN!r} (the job writes it, holding the epoch "
                f"{epoch!r}: Iceberg infers each file's partition from it)"]

    def _table_problems(self, table: Table, scope: Scope, found: dict[str, Any],
                        uris: list[str], so_far: list[str]) -> list[str]:
        """The table at this sink's location; for the epoch layout, identity-partitioned
        by ``epoch``; a spec footers cannot decide (``bucket``): each file's partition
        from its values; another scope: each file in one partition of the table's spec
        and, for ``replace_where``, proven inside the predicate (:func:`scope_problems`).
        A ``replace_where`` needs the table to exist (its partitioning is the table
        owner's choice)."""
        out = []
        if norm_uri(table.location().rstrip("/")) != norm_uri(self.location()):
            out.append(f"the table's location is {table.location()}, not {self.location()} "
                       "where this sink stages (the table was re-created or moved)")
        if scope.kind == "epoch":
            try:
                epoch_partition_position(table, table.spec().spec_id)
            except TableSchemaError as exc:
                out.append(f"{exc}; or give the target replace_where (any partitioning)")
        if needs_data(table.spec()) and not (so_far or out):
            out += self.partitions_from_data(
                [u for u in uris if u in found and found[u].num_rows], table.metadata)[1]
        if scope.kind != "epoch" and not (so_far or out):
            out += scope_problems(found, uris, table, scope)
        return out

    def _schema_check(self, table: Table, scope: Scope) -> Callable[[pa.Schema], list[str]]:
        """No unknown column (unless ``add_columns``), no required column missing, no
        type the table cannot read."""
        return lambda schema: schema_problems(schema, table, scope.add_columns)

    def _creatable_problems(self, schema: pa.Schema) -> list[str]:
        return creatable_problems(schema)

    @contextmanager
    def _proposed_table(self, schema: pa.Schema, scope: Scope) -> Iterator[Table]:
        """The table :meth:`create_table` would make, in memory (:mod:`.iceberg_create`)."""
        yield proposed_table(self.namespace + (self.identifier.split(".")[-1],),
                             self.location(), schema, scope, self.file_io(), self.catalog())

    def _commit_problems(self, table: Table, found: dict[str, Any],
                         uris: list[str]) -> list[str]:
        """The first commit builds each file's DataFile statistics against the new table."""
        return stats_problems(table, found, uris)


def _placeholder_schema() -> Any:
    """A schema for asking a catalog where a new table would go (never committed)."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import NestedField, StringType

    return Schema(NestedField(field_id=1, name=EPOCH_COLUMN, field_type=StringType(),
                              required=False))


@dataclass(frozen=True)
class EpochCommits:
    """What the table's retained snapshots say about one epoch's airflow-tpc commits."""

    digests: dict[str, int]  # manifest digest -> attempt
    highest: int  # the highest attempt committed into the table (0: none)


def epoch_commits(table: Table, epoch: str, namespace: str) -> EpochCommits:
    """Read the epoch's commits from snapshot summaries (namespace-scoped)."""
    digests: dict[str, int] = {}
    for snap in table.snapshots():
        summary = snap.summary
        if summary is None or summary[PROP_EPOCH] != epoch \
                or summary[PROP_NAMESPACE] != namespace:
            continue
        try:
            attempt = int(summary[PROP_ATTEMPT] or "")
        except ValueError:
            continue
        digest = summary[PROP_DIGEST]
        if digest:
            digests[digest] = attempt
    return EpochCommits(digests, max(digests.values(), default=0))
