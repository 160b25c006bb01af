"""What staged files are to an Iceberg table: the checks that refuse them, and the
DataFile statistics their footers give.

Pure functions of footers, schemas and table metadata (no catalog call, no write):
:class:`~airflow_tpc.tables.iceberg_table.IcebergTable` checks staged files with
them, and :class:`~airflow_tpc.tables.iceberg_commit.IcebergSnapshot` builds the
commit's DataFiles with them — from the statistics sealed at pre-commit, which are
:func:`iceberg_stats` of the footers, or from the footers themselves.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import TpcError
from .iceberg_partitions import needs_data
from .iceberg_schema import iceberg_field_of, iceberg_schema_of
from .pyiceberg_private import check_arrow_schema_compatible
from .scope import Scope, nan_note, proves
from .staged import EPOCH_COLUMN, TableSchemaError

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa
    from pyiceberg.manifest import DataFile
    from pyiceberg.table import Table


def scope_problems(footers: dict[str, Any], uris: list[str], table: Table,
                    scope: Scope) -> list[str]:
    """Each staged file lies in one partition of the table's spec (so it can be added
    as it is) and, for ``replace_where``, its footer statistics prove every row inside
    the predicate — files that straddle epochs are refused, never half-replaced."""
    from pyiceberg.conversions import from_bytes
    from pyiceberg.io.pyarrow import data_file_statistics_from_parquet_metadata

    meta = table.metadata
    schema, spec, columns, mapping = stats_plan(
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
                    "upper": values("upper_bounds"), "nulls": raw["null_value_counts"],
                    "nans": raw.get("nan_value_counts") or {}}
        if not proves(bound, evidence):
            problems.append(f"{uri}: its statistics do not prove every row inside "
                            f"replace_where {scope.where!r} (it holds rows of another epoch, "
                            f"or the table keeps no bounds for those columns"
                            f"{nan_note(bound)})")
    return problems


def stats_plan(meta: Any, adding: list[pa.Schema] | None = None
                ) -> tuple[Any, Any, Any, Any]:
    """What every file's statistics are computed with (once per table state).
    ``adding``: staged schemas whose columns the table lacks are about to be added
    (``add_columns``): they get the ids the table would give them next."""
    from pyiceberg.io.pyarrow import compute_statistics_plan, parquet_path_to_id_mapping
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
                typ = iceberg_field_of(arrow, name)
                if not typ.field_type.is_primitive:
                    continue  # no statistics for it here; the commit adds it whole
                next_id += 1
                fields.append(NestedField(next_id, name, typ.field_type, required=False))
        schema = Schema(*fields, schema_id=schema.schema_id)
    return (schema, meta.spec(), compute_statistics_plan(schema, meta.properties),
            parquet_path_to_id_mapping(schema))


def iceberg_stats(md: Any, meta: Any, plan: tuple[Any, Any, Any, Any] | None = None,
                   partition: list[Any] | None = None) -> dict[str, Any] | None:
    """A footer's DataFile statistics and partition (as pyiceberg's ``add_files`` infers
    them, or ``partition`` computed from the values), JSON-ready; None if they do not
    serialise (the commit then reads it)."""
    from pyiceberg.io.pyarrow import data_file_statistics_from_parquet_metadata

    try:
        schema, spec, columns, mapping = plan or stats_plan(meta)
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


def data_file_of(uri: str, size: int, stats: dict[str, Any], spec_id: int) -> DataFile:
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


def creatable_problems(schema: pa.Schema) -> list[str]:
    """A new table is made from the staged schema: refuse one Iceberg has no type for
    (e.g. ``timestamp[ns]`` from Spark's default INT96 timestamps: write
    ``spark.sql.parquet.outputTimestampType=TIMESTAMP_MICROS``) before the decision,
    not at table creation after it."""
    try:
        iceberg_schema_of(schema)
    except Exception as exc:
        return [f"no Iceberg table can be created from the staged schema: {exc}"]
    return []


def schema_problems(schema: pa.Schema, table: Table, add_columns: bool = False) -> list[str]:
    """Name the columns of a staged file that do not fit the table's schema.
    ``add_columns``: a column the table lacks is fine if Iceberg has a type for it (the
    commit adds it); the others are checked as always."""
    want = table.schema()
    fields = {f.name: f for f in want.fields}
    if add_columns:
        extra = [name for name in schema.names if name not in fields]
        typeless = []
        for name in extra:
            try:
                iceberg_field_of(schema, name)
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
        check_arrow_schema_compatible(want, schema, table.metadata.format_version)
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
            got = iceberg_field_of(schema, name)
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


def epoch_partition_position(table: Table, spec_id: int) -> int:
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
