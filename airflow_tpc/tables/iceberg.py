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
pre-commit and commit, ``table_version`` and attempt numbering come from there.

Requirements on the staged files, checked at pre-commit and again at commit
before the decision (:meth:`IcebergTarget.check_staged`): Parquet with
statistics, a string column ``epoch`` holding exactly the epoch's name (the job
writes it: ``add_files`` infers the identity partition from each file's column
statistics, so the files must carry it), a schema the table can take.
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from ..errors import LedgerError, StorageError, TpcError
from ..faults import crashpoint
from ..ledger import Layout
from ..manifest import Manifest
from ..promote import Strategy, _rel_to_root, _swap_marker
from ..records import DECISION, CommitDecision
from ..transaction import SinkConfig
from .base import (
    COMMIT_RETRIES,
    EPOCH_COLUMN,
    PROP_ATTEMPT,
    PROP_DIGEST,
    PROP_EPOCH,
    PROP_NAMESPACE,
    PROP_TXN_ID,  # noqa: F401  (tests and users read it from here)
    HandOver,
    TableLayout,  # noqa: F401  (re-exported: it lived here first)
    TableSchemaError,
    TableSink,
    commit_properties,
    epoch_column_problems,
    norm_uri,
    read_footers,
    read_sealed_stats,
    schema_error,
)
from .catalogs import ensure_namespace, open_catalog
from .iceberg_partitions import needs_data, partitions_from_data
from .scope import Scope, proves

#: The default scope: the epoch's identity partition.
EPOCH_SCOPE = Scope()

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa
    from pyiceberg.catalog import Catalog
    from pyiceberg.manifest import DataFile
    from pyiceberg.table import Table

log = logging.getLogger("airflow_tpc")

#: Where staging lives below the table location (inside its default data path).
STAGING_DIR = "data/_tpc_staging"


def _need_pyiceberg() -> None:
    try:
        import pyiceberg  # noqa: F401
    except ImportError:  # pragma: no cover - the extra is installed in dev
        raise TpcError("Iceberg targets need pyiceberg: pip install 'airflow-tpc[tables]'") \
            from None


_norm = norm_uri


class IcebergTarget(HandOver):
    """One Iceberg table in one catalog: ``iceberg://<catalog>/<namespace>.<table>``.

    ``catalog_properties`` are pyiceberg's catalog properties (``type``, ``uri``,
    ``warehouse``, ``s3.endpoint`` ...); with none, ``load_catalog`` reads the
    catalog's configuration from ``~/.pyiceberg.yaml`` or the environment.
    ``location``: where to create the table if it does not exist (default: the
    catalog's default location for it).  The catalog is opened on first use.
    """

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
    def parse(cls, uri: str, catalog_properties: dict[str, str] | None = None,
              location: str | None = None) -> IcebergTarget:
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
        return f"IcebergTarget({self.uri!r})"

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

    def strategy(self, scope: dict[str, Any] | None = None) -> IcebergSnapshot:
        """The switch of a decision that replaces ``scope`` (its record's)."""
        return IcebergSnapshot(self, Scope.from_doc(scope))

    # -- the table ----------------------------------------------------------------
    def create_table(self, schema: pa.Schema, scope: Scope = EPOCH_SCOPE) -> Table:
        """Create the table from the staged files' schema at :meth:`location`,
        identity-partitioned by epoch (an ``append`` scope: unpartitioned); a concurrent
        creator's table is loaded instead."""
        from pyiceberg.catalog import Catalog
        from pyiceberg.exceptions import TableAlreadyExistsError
        from pyiceberg.partitioning import PartitionField, PartitionSpec
        from pyiceberg.transforms import IdentityTransform

        ice = Catalog._convert_schema_if_needed(schema)
        spec = PartitionSpec()
        if scope.kind == "epoch":
            field = ice.find_field(EPOCH_COLUMN)
            spec = PartitionSpec(PartitionField(source_id=field.field_id, field_id=1000,
                                                transform=IdentityTransform(),
                                                name=EPOCH_COLUMN))
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
                        out.add(_norm(entry.data_file.file_path))
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

    # -- what the staged files must be ---------------------------------------------
    def read_footers(self, uris: list[str]) -> tuple[dict[str, Any], list[str]]:
        """Each file's footer, once, in parallel, through the table's FileIO."""
        if not uris:
            return {}, []
        io = self.file_io()
        return read_footers(lambda uri: io.new_input(uri).open(), uris)

    def table_key(self, table: Table | None,
                  scope: Scope = EPOCH_SCOPE) -> dict[str, Any] | None:
        """What a check and the column statistics depend on: the table's identity,
        location, current schema and default spec (ids), format version and metrics
        properties, and the scope checked.  Equal keys: the pre-commit check and
        statistics still hold."""
        if table is None:
            return None
        meta = table.metadata
        return {"uuid": str(meta.table_uuid), "location": _norm(table.location().rstrip("/")),
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
        plan = _stats_plan(table.metadata)
        parts = self._data_partitions if needs_data(table.spec()) else {}
        return {uri: {"rows": md.num_rows,
                      "iceberg": _iceberg_stats(md, table.metadata, plan, parts.get(uri))}
                for uri, md in footers.items()}

    def partitions_from_data(self, uris: list[str], meta: Any
                             ) -> tuple[dict[str, list[Any]], list[str]]:
        """Each file's partition from its values (a spec footers cannot decide)."""
        io = self.file_io()
        found, problems = partitions_from_data(lambda uri: io.new_input(uri).open(), uris,
                                               meta)
        self._data_partitions = found
        return found, problems

    def check_staged(self, uris: list[str], epoch: str, table: Table | None, *,
                     decided: str | None = None,
                     footers: tuple[dict[str, Any], list[str]] | None = None,
                     scope: Scope = EPOCH_SCOPE) -> pa.Schema | None:
        """Refuse staged files the table cannot take, naming the files and columns.

        Every file: Parquet, a string ``epoch`` column whose statistics say every row
        is ``epoch`` (``add_files`` infers the partition from them).  With a table:
        identity-partitioned by ``epoch``, at this sink's location, and every file's
        schema compatible (no unknown column, no required column missing, no type it
        cannot read).  Without one: every file has the same schema (the table is
        created from it).  Returns that schema (None if there are no files).
        ``decided``: the transaction id when this is a roll-forward of a decided
        commit (the error then says what is kept), else a check before the decision.
        ``footers``: the files' footers already read (:meth:`read_footers`).
        ``scope`` other than the epoch layout (:mod:`airflow_tpc.tables.scope`): no
        ``epoch`` column or partition is asked for; instead each file must lie in one
        partition of the table's spec and, for ``replace_where``, its statistics must
        prove every row inside the predicate.  A ``replace_where`` needs the table to
        exist (its partitioning is the table owner's choice).
        """
        found, problems = footers if footers is not None else self.read_footers(uris)
        problems = list(problems)
        schemas: dict[str, pa.Schema] = {}
        for uri in uris:
            md = found.get(uri)
            if md is None:
                continue
            schema = md.schema.to_arrow_schema().remove_metadata()
            schemas[uri] = schema
            if scope.kind == "epoch":
                problems += _epoch_problems(uri, md, schema, epoch)
        if table is not None:
            problems += self._table_problems(table, scope)
            if needs_data(table.spec()) and not problems:
                problems += self.partitions_from_data(
                    [u for u in uris if u in found and found[u].num_rows], table.metadata)[1]
            if scope.kind != "epoch" and not problems:
                problems += _scope_problems(found, uris, table, scope)
            # Each distinct schema is checked once (a commit of 10k files has one or two).
            verdicts: dict[pa.Schema, list[str]] = {}
            for uri, schema in schemas.items():
                if schema not in verdicts:
                    verdicts[schema] = _schema_problems(schema, table, scope.add_columns)
                problems += [f"{uri}: {p}" for p in verdicts[schema]]
        else:
            first = next(iter(schemas.values()), None)
            if scope.kind == "where":
                problems.append(f"replace_where needs an existing table, and {self.uri} does "
                                "not exist: create it with the partitioning it should have "
                                "(the epoch layout, without replace_where, creates its own)")
            if first is not None:
                problems += _creatable_problems(first)
            for uri, schema in schemas.items():
                if first is not None and not schema.equals(first):
                    cols = sorted({f.name for f in schema} ^ {f.name for f in first}
                                  | {f.name for f in schema if f.name in first.names
                                     and first.field(f.name).type != f.type})
                    problems.append(f"{uri} has another schema than the first staged file "
                                    f"(columns {', '.join(cols)}); a new table is created from "
                                    "one schema")
        if problems:
            raise schema_error("Iceberg", self.uri, epoch, problems, decided)
        return next(iter(schemas.values()), None)

    def _table_problems(self, table: Table, scope: Scope) -> list[str]:
        out = []
        if _norm(table.location().rstrip("/")) != _norm(self.location()):
            out.append(f"the table's location is {table.location()}, not {self.location()} "
                       "where this sink stages (the table was re-created or moved)")
        if scope.kind == "epoch":
            try:
                _epoch_partition_position(table, table.spec().spec_id)
            except TableSchemaError as exc:
                out.append(f"{exc}; or give the target replace_where (any partitioning)")
        return out


def _scope_problems(footers: dict[str, Any], uris: list[str], table: Table,
                    scope: Scope) -> list[str]:
    """Each staged file lies in one partition of the table's spec (so it can be added
    as it is) and, for ``replace_where``, its footer statistics prove every row inside
    the predicate — files that straddle epochs are refused, never half-replaced."""
    from pyiceberg.conversions import from_bytes
    from pyiceberg.io.pyarrow import data_file_statistics_from_parquet_metadata

    meta = table.metadata
    schema, spec, columns, mapping = _stats_plan(
        meta, [md.schema.to_arrow_schema() for md in footers.values()]
        if scope.add_columns else None)
    bound = None
    if scope.kind == "where":
        from pyiceberg.expressions.visitors import bind

        try:
            bound = bind(schema, scope.expression(), case_sensitive=True)
        except TpcError:
            raise
        except Exception as exc:  # a column the table lacks, a literal of the wrong type
            return [f"replace_where {scope.where!r} does not fit the table's schema: {exc}"]
    problems: list[str] = []
    for uri in uris:
        md = footers.get(uri)
        if md is None or md.num_rows == 0:
            continue
        try:
            stats = data_file_statistics_from_parquet_metadata(
                parquet_metadata=md, stats_columns=columns, parquet_column_mapping=mapping)
            if not needs_data(spec):  # else checked from the values (check_staged)
                stats.partition(spec, schema)
        except Exception as exc:
            problems.append(f"{uri} does not lie in one partition of the table's spec {spec} "
                            f"({' '.join(str(exc).split())}): write one file per partition "
                            "(Spark: repartition or partitionBy the partition columns)")
            continue
        if bound is None:
            continue
        raw = stats.to_serialized_dict()

        def values(key: str, raw: dict[str, Any] = raw) -> dict[int, Any]:
            return {fid: from_bytes(schema.find_field(fid).field_type, b)
                    for fid, b in raw[key].items()}

        evidence = {"rows": md.num_rows, "lower": values("lower_bounds"),
                    "upper": values("upper_bounds"), "nulls": raw["null_value_counts"]}
        if not proves(bound, evidence):
            problems.append(f"{uri}: its statistics do not prove every row inside "
                            f"replace_where {scope.where!r} (it holds rows of another epoch, "
                            "or the table keeps no bounds for those columns)")
    return problems


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


def _placeholder_schema() -> Any:
    """A schema for asking a catalog where a new table would go (never committed)."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import NestedField, StringType

    return Schema(NestedField(field_id=1, name=EPOCH_COLUMN, field_type=StringType(),
                              required=False))


def _epoch_problems(uri: str, md: Any, schema: pa.Schema, epoch: str) -> list[str]:
    if EPOCH_COLUMN not in schema.names:
        return [f"{uri} has no column {EPOCH_COLUMN!r} (the job writes it, holding the epoch "
                f"{epoch!r}: Iceberg infers each file's partition from it)"]
    return epoch_column_problems(uri, md, schema, epoch)


def _stats_plan(meta: Any, adding: list[pa.Schema] | None = None
                ) -> tuple[Any, Any, Any, Any]:
    """What every file's statistics are computed with (once per table state).
    ``adding``: staged schemas whose columns the table lacks are about to be added
    (``add_columns``): they get the ids the table would give them next."""
    from pyiceberg.io.pyarrow import (
        _pyarrow_to_schema_without_ids,
        compute_statistics_plan,
        parquet_path_to_id_mapping,
    )
    from pyiceberg.schema import Schema
    from pyiceberg.types import NestedField

    schema = meta.schema()
    if adding:
        fields, next_id = list(schema.fields), meta.last_column_id
        known = set(schema.column_names)
        for arrow in adding:
            for name in arrow.names:
                if name in known:
                    continue
                known.add(name)
                typ = _pyarrow_to_schema_without_ids(pa_schema_of(arrow, name)).fields[0]
                if not typ.field_type.is_primitive:
                    continue  # no statistics for it here; the commit adds it whole
                next_id += 1
                fields.append(NestedField(next_id, name, typ.field_type, required=False))
        schema = Schema(*fields, schema_id=schema.schema_id)
    return (schema, meta.spec(), compute_statistics_plan(schema, meta.properties),
            parquet_path_to_id_mapping(schema))


def _iceberg_stats(md: Any, meta: Any, plan: tuple[Any, Any, Any, Any] | None = None,
                   partition: list[Any] | None = None) -> dict[str, Any] | None:
    """A footer's DataFile statistics and partition (as pyiceberg's ``add_files`` infers
    them, or ``partition`` computed from the values), JSON-ready; None if they do not
    serialise (the commit then reads it)."""
    from pyiceberg.io.pyarrow import data_file_statistics_from_parquet_metadata

    try:
        schema, spec, columns, mapping = plan or _stats_plan(meta)
        stats = data_file_statistics_from_parquet_metadata(
            parquet_metadata=md, stats_columns=columns, parquet_column_mapping=mapping)
        if partition is None and md.num_rows:
            if needs_data(spec):
                return None  # the caller computes it from the values
            partition = list(stats.partition(spec, schema))
    except Exception:  # a file the check refuses anyway, or a value not to infer
        return None
    if partition is not None and not all(v is None or isinstance(v, (str, int))
                                         for v in partition):
        return None
    out = stats.to_serialized_dict()
    return {"partition": partition,
            **{k: ({str(i): (v.hex() if isinstance(v, bytes) else v) for i, v in d.items()}
                   if isinstance(d, dict) else d) for k, d in out.items()}}


def _data_file(uri: str, size: int, stats: dict[str, Any], spec_id: int) -> DataFile:
    """A DataFile from sealed statistics (what ``add_files`` would build from the footer)."""
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
    from pyiceberg.typedef import Record

    def ints(d: dict[str, int]) -> dict[int, int]:
        return {int(k): int(v) for k, v in d.items()}

    def raw(d: dict[str, str]) -> dict[int, bytes]:
        return {int(k): bytes.fromhex(v) for k, v in d.items()}

    return DataFile.from_args(
        content=DataFileContent.DATA, file_path=uri, file_format=FileFormat.PARQUET,
        partition=Record(*(stats["partition"] or [])), file_size_in_bytes=size,
        sort_order_id=None, spec_id=spec_id, equality_ids=None, key_metadata=None,
        record_count=int(stats["record_count"]), column_sizes=ints(stats["column_sizes"]),
        value_counts=ints(stats["value_counts"]),
        null_value_counts=ints(stats["null_value_counts"]),
        nan_value_counts=ints(stats["nan_value_counts"]),
        lower_bounds=raw(stats["lower_bounds"]), upper_bounds=raw(stats["upper_bounds"]),
        split_offsets=stats["split_offsets"])


def _creatable_problems(schema: pa.Schema) -> list[str]:
    """A new table is made from the staged schema: refuse one Iceberg has no type for
    (e.g. ``timestamp[ns]`` from Spark's default INT96 timestamps: write
    ``spark.sql.parquet.outputTimestampType=TIMESTAMP_MICROS``) before the decision,
    not at table creation after it."""
    from pyiceberg.catalog import Catalog

    try:
        Catalog._convert_schema_if_needed(schema)
    except Exception as exc:
        return [f"no Iceberg table can be created from the staged schema: {exc}"]
    return []


def _schema_problems(schema: pa.Schema, table: Table, add_columns: bool = False) -> list[str]:
    """Name the columns of a staged file that do not fit the table's schema.
    ``add_columns``: a column the table lacks is fine if Iceberg has a type for it (the
    commit adds it); the others are checked as always."""
    from pyiceberg.io.pyarrow import (
        _check_pyarrow_schema_compatible,
        _pyarrow_to_schema_without_ids,
    )

    want = table.schema()
    fields = {f.name: f for f in want.fields}
    if add_columns:
        extra = [name for name in schema.names if name not in fields]
        typeless = []
        for name in extra:
            try:
                _pyarrow_to_schema_without_ids(pa_schema_of(schema, name))
            except Exception:
                typeless.append(f"{name} ({schema.field(name).type})")
        if typeless:
            return [f"columns Iceberg has no type for, so they cannot be added: "
                    f"{', '.join(typeless)}"]
        schema = pa_schema_of_all(schema, [n for n in schema.names if n in fields])
    have = set(schema.names)
    unknown = sorted(have - set(fields))
    missing = sorted(f.name for f in want.fields if f.required and f.name not in have)
    detail = ""
    try:
        _check_pyarrow_schema_compatible(want, schema,
                                         format_version=table.metadata.format_version)
    except ValueError as exc:
        detail = " ".join(str(exc).split())
    if not (detail or unknown or missing):
        return []  # compatible (possibly through type promotion)
    # A column the table does not have is refused even where pyiceberg would take the
    # file (a stale name mapping still naming a dropped column): readers would drop
    # it silently, and the job meant to store it.
    mismatched = []
    for name in sorted(have & set(fields)) if detail else []:
        try:
            got = _pyarrow_to_schema_without_ids(pa_schema_of(schema, name)).fields[0]
        except Exception:  # a type Iceberg has no name for
            mismatched.append(f"{name} ({schema.field(name).type} in the file)")
            continue
        if got.field_type != fields[name].field_type:
            mismatched.append(f"{name} ({got.field_type} in the file, "
                              f"{fields[name].field_type} in the table)")
    parts = []
    if unknown:
        parts.append(f"columns not in the table: {', '.join(unknown)} (to let a commit add "
                     "them, give the target add_columns=True)")
    if missing:
        parts.append(f"required columns missing: {', '.join(missing)}")
    if mismatched:
        parts.append(f"columns of another type: {', '.join(mismatched)}")
    if not parts:
        parts.append(detail)
    return ["; ".join(parts)]


def pa_schema_of(schema: pa.Schema, name: str) -> pa.Schema:
    return pa_schema_of_all(schema, [name])


def pa_schema_of_all(schema: pa.Schema, names: list[str]) -> pa.Schema:
    import pyarrow as pa

    return pa.schema([schema.field(name) for name in names])


def _epoch_partition_position(table: Table, spec_id: int) -> int:
    """Position of the identity(epoch) field in partition spec ``spec_id``: the epoch's
    files are replaced whole, which is exact only when each file holds one epoch."""
    spec = table.specs()[spec_id]
    source = table.schema().find_field(EPOCH_COLUMN).field_id \
        if EPOCH_COLUMN in {f.name for f in table.schema().fields} else None
    for pos, field in enumerate(spec.fields):
        if field.source_id == source and str(field.transform) == "identity":
            return pos
    raise TableSchemaError(f"table {table.name()} is not partitioned by identity({EPOCH_COLUMN}) "
                           f"(spec {spec_id}: {spec}); airflow-tpc replaces an epoch by whole "
                           "files, so each file must hold one epoch")


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
        pos = _epoch_partition_position(table, mf.partition_spec_id)
        for entry in mf.fetch_manifest_entry(table.io, discard_deleted=True):
            if entry.data_file.partition[pos] == epoch:
                out.append(entry.data_file)
    return out


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


summary_properties = commit_properties


class IcebergSnapshot(Strategy):
    """The switch is one Iceberg commit: one ``overwrite`` snapshot that drops partition
    ``epoch=E``'s data files and adds the staged files where they are.

    Idempotent by the table's own history: a snapshot carrying this manifest's
    digest means an earlier run committed it (a crash before the ledger recorded
    it) — only the marker is written then.  A snapshot of a higher attempt of the
    epoch means this attempt is stale: it is never applied (returns False).
    """

    name = "iceberg"

    def __init__(self, target: IcebergTarget, scope: Scope = EPOCH_SCOPE) -> None:
        self.target = target
        self.scope = scope

    def switch(self, layout: Layout, manifest: Manifest, staging: str, dst: str,
               version: str | None) -> bool:
        from pyiceberg.exceptions import CommitFailedException

        from .iceberg_io import on_commit_io

        storage = layout.storage
        uris = [storage.uri(storage.join(staging, f.path)) for f in manifest.files]
        sealed = read_sealed_stats(storage, layout.sealed(manifest.epoch, manifest.attempt),
                                   manifest)
        footers: tuple[dict[str, Any], list[str]] | None = None
        for _ in range(COMMIT_RETRIES):
            table = self.target.take_table(manifest.txn_id)
            if table is None:
                footers = footers or self.target.read_footers(uris)
                schema = self.target.check_staged(uris, manifest.epoch, None,
                                                  decided=manifest.txn_id, footers=footers,
                                                  scope=self.scope)
                if schema is None:
                    break  # nothing staged and no table: nothing to replace
                table = self.target.create_table(schema, self.scope)
            table = on_commit_io(table)
            state = self.state_of(table, manifest)
            if state == "done":
                log.info("%s is already in %s (a commit finished before the ledger recorded "
                         "it): no second snapshot", manifest.txn_id, self.target.uri)
                break
            if state == "superseded":
                return False
            usable, footers = self.checked(table, manifest, uris, sealed, footers)
            crashpoint("iceberg.before_table_commit")
            try:
                self._commit(table, manifest, uris, sealed if usable else None,
                             None if usable else footers)
            except CommitFailedException as exc:
                log.info("Iceberg commit of %s lost a race (%s); retrying on the new snapshot",
                         manifest.txn_id, exc)
                continue
            crashpoint("iceberg.after_table_commit")
            break
        else:
            raise StorageError(f"Iceberg table {self.target.uri} kept changing under "
                               f"{COMMIT_RETRIES} commits of {manifest.txn_id}; the decision is "
                               "kept and the next commit or recover tries again")
        paths = [_rel_to_root(layout, storage.join(staging, f.path)) for f in manifest.files]
        crashpoint("promote.before_marker")
        return _swap_marker(layout, manifest, self.name, paths, version)

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

    def checked(self, table: Table, manifest: Manifest, uris: list[str],
                sealed: dict[str, Any] | None,
                footers: tuple[dict[str, Any], list[str]] | None
                ) -> tuple[bool, tuple[dict[str, Any], list[str]] | None]:
        """Whether the sealed statistics serve this table (the table as pre-commit
        checked it: same schema, spec, location — the check holds, and the commit's
        requirements refuse a change from here on); otherwise the staged files are
        checked again against it, from footers read once (returned)."""
        usable = sealed is not None \
            and sealed["table"] == self.target.table_key(table, self.scope) \
            and not self.scope.add_columns  # new columns: metrics from the footers
        if not usable:
            footers = footers or self.target.read_footers(uris)
            self.target.check_staged(uris, manifest.epoch, table, decided=manifest.txn_id,
                                     footers=footers, scope=self.scope)
        return usable, footers

    def _commit(self, table: Table, manifest: Manifest, uris: list[str],
                sealed: dict[str, Any] | None,
                footers: tuple[dict[str, Any], list[str]] | None) -> None:
        """One transaction, one snapshot: remove the epoch's files, add the staged ones.

        The DataFiles come from the sealed statistics (no footer read), else from the
        footers the caller read (once, in parallel) — never from a per-file read."""
        from pyiceberg.table import TableProperties
        from pyiceberg.table.update import AssertCurrentSchemaId, AssertDefaultSpecId

        # pyiceberg would retry a commit that lost a race by re-applying the same
        # snapshot on the new base (after a sleep): our file list and schema check
        # were made against the old base.  Switch that off for this in-memory table
        # only (the table's stored properties are untouched): the caller's loop
        # reloads, re-checks and recomputes instead.
        meta = table.metadata
        table.metadata = meta.model_copy(update={"properties": {
            **meta.properties, TableProperties.COMMIT_NUM_RETRIES: "0"}})
        sizes = {u: f.size for u, f in zip(uris, manifest.files, strict=True)}

        def data_files(tmeta: Any) -> list[DataFile]:
            found = footers[0] if footers is not None else {}
            by_uri: dict[str, dict[str, Any] | None] = {}
            for uri, f in zip(uris, manifest.files, strict=True):
                entry = sealed["files"][f.path] if sealed is not None else None
                by_uri[uri] = entry.get("iceberg") if entry is not None else None
            missing = [u for u, st in by_uri.items() if st is None and u not in found]
            if missing:  # a statistic that did not serialise, or no sidecar
                more, problems = self.target.read_footers(missing)
                if problems:
                    raise StorageError("; ".join(problems[:5]))
                found = {**found, **more}
            plan = _stats_plan(tmeta) if any(st is None for st in by_uri.values()) else None
            parts: dict[str, list[Any]] = {}
            if plan is not None and needs_data(tmeta.spec()):
                parts, problems = self.target.partitions_from_data(
                    [u for u, st in by_uri.items() if st is None and found[u].num_rows], tmeta)
                if problems:
                    raise StorageError("; ".join(problems[:5]))
            for uri, st in list(by_uri.items()):
                if st is None:
                    by_uri[uri] = _iceberg_stats(found[uri], tmeta, plan, parts.get(uri))
                    if by_uri[uri] is None:
                        raise StorageError(f"cannot read the statistics of {uri}")
            return [_data_file(uri, sizes[uri], st, tmeta.default_spec_id)
                    for uri, st in by_uri.items() if st and st["record_count"] > 0]

        def run() -> None:
            with table.transaction() as tx:
                meta = tx.table_metadata
                # Iceberg lets an append commit over a concurrent schema or partition
                # change; ours was checked against this schema and spec, so a change of
                # either must fail the commit (and the caller's loop re-checks).
                tx._apply((), (AssertCurrentSchemaId(current_schema_id=meta.current_schema_id),
                               AssertDefaultSpecId(default_spec_id=meta.default_spec_id)))
                if meta.name_mapping() is None:  # as add_files: files carry no field ids
                    tx.set_properties(**{TableProperties.DEFAULT_NAME_MAPPING:
                                         meta.schema().name_mapping.model_dump_json()})
                if self.scope.add_columns and footers is not None:
                    _add_new_columns(tx, footers[0])
                # A file without rows (Spark writes one for an empty task) has no
                # statistics to infer its partition from, and adds nothing: not added.
                new = data_files(tx.table_metadata)
                props = summary_properties(manifest)
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

        self.target._call("commit to", run)
        log.info("Iceberg %s: epoch %s is attempt %d (%d files)", self.target.uri,
                 manifest.epoch, manifest.attempt, len(uris))

    def clean(self, layout: Layout, epoch: str, attempt: int, manifest: Manifest | None,
              current: dict[str, Any] | None) -> None:
        # Nothing to delete here: the displaced attempt's files are referenced by the
        # table's earlier snapshots (time travel).  Its staging is removed by the sink
        # through TableLayout.remove_staging, which keeps every referenced file.
        crashpoint("promote.before_cleanup")


class IcebergSink(TableSink):
    """A :class:`~airflow_tpc.Sink` whose target is an Iceberg table: the shared table
    skeleton (:class:`~airflow_tpc.tables.base.TableSink`) with staging in the table's
    data path and :class:`IcebergSnapshot` as the switch."""

    format = "Iceberg"
    staging_dir = STAGING_DIR

    def __init__(self, target: IcebergTarget | str, namespace: str, *,
                 catalog_properties: dict[str, str] | None = None,
                 storage_options: dict[str, Any] | None = None,
                 config: SinkConfig | None = None,
                 ledger_uri: str | None = None,
                 replace_where: Any = None, mode: str = "replace",
                 add_columns: bool = False) -> None:
        scope = Scope.of(replace_where, mode, add_columns)
        if isinstance(target, str):
            target = IcebergTarget.parse(target, catalog_properties)
        super().__init__(target, namespace, storage_options=storage_options, config=config,
                         ledger_uri=ledger_uri, scope=scope)
        self.table_target: IcebergTarget = target

    def _switch_catalog(self) -> Any:
        from .iceberg_multi import rest_catalog_key

        return rest_catalog_key(self.table_target.catalog())

    def _prepared_switch(self, epoch: str, attempt: int, known: Manifest | None) -> Any:
        from .iceberg_multi import prepared_change

        decision = self.ledger.read(epoch, attempt, DECISION)
        if not isinstance(decision, CommitDecision):
            return None
        return prepared_change(self, epoch, attempt, decision, known)


def open_table_sink(target: str, namespace: str, *,
                    catalog_properties: dict[str, str] | None = None,
                    storage_options: dict[str, Any] | None = None,
                    config: SinkConfig | None = None,
                    ledger_uri: str | None = None,
                    replace_where: Any = None, mode: str = "replace",
                    add_columns: bool = False) -> IcebergSink:
    """A sink for a table target URI (``iceberg://<catalog>/<namespace>.<table>``)."""
    scheme = urlparse(target).scheme
    if scheme == "iceberg":
        return IcebergSink(target, namespace, catalog_properties=catalog_properties,
                           storage_options=storage_options, config=config,
                           ledger_uri=ledger_uri, replace_where=replace_where, mode=mode,
                           add_columns=add_columns)
    raise TpcError(f"{target!r} is not a table target (supported: iceberg://)")
