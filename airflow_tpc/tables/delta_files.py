"""What staged files are to a Delta table: the schema rules of the check.

Pure functions of Arrow schemas and the table's Delta schema (no log read, no
write): :class:`~airflow_tpc.tables.delta_table.DeltaLakeTable` checks staged files
with them and creates a new table from :func:`relaxed` / :func:`with_epoch`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .delta_store import first_line
from .staged import EPOCH_COLUMN

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa


def with_epoch(schema: pa.Schema) -> pa.Schema:
    """The schema of a table of the epoch layout: with a string ``epoch`` column."""
    import pyarrow as pa

    if EPOCH_COLUMN in schema.names:
        return schema
    return schema.append(pa.field(EPOCH_COLUMN, pa.string()))


def without_epoch(schema: pa.Schema) -> pa.Schema:
    """The data columns: files of one epoch may differ only in holding ``epoch`` or not."""
    if EPOCH_COLUMN in schema.names:
        return schema.remove(schema.get_field_index(EPOCH_COLUMN))
    return schema


def relaxed(schema: pa.Schema) -> pa.Schema:
    """A new table's columns are all nullable: a later epoch's files (another task
    writing a column NULL-able) are then not refused for nullability alone."""
    import pyarrow as pa

    return pa.schema([f.with_nullable(True) for f in schema])


def new_table_schema(schema: pa.Schema, layout: bool) -> Any:
    """The Delta schema a new table is created with from the staged files' schema: all
    nullable, with ``epoch`` for the epoch layout (``layout``); the switch's create and
    the proof before the decision both build it here."""
    from deltalake.schema import Schema

    return Schema.from_arrow(relaxed(with_epoch(schema) if layout else schema))


def delta_types(schema: pa.Schema) -> dict[str, str]:
    """Each column's Delta type (as Delta names it), or raise for one Delta has none for."""
    from deltalake.schema import Schema

    delta = Schema.from_arrow(schema)
    return {f.name: type_name(f.type) for f in delta.fields}


def type_name(typ: Any) -> str:
    """A Delta type's name: primitive types by name, nested ones by their JSON."""
    name = getattr(typ, "type", None)
    if isinstance(name, str):  # PrimitiveType: "long", "string" ...
        return name
    return str(typ.to_json()) if hasattr(typ, "to_json") else str(typ)


def creatable_problems(schema: pa.Schema) -> list[str]:
    """Why no Delta table can be made from a staged schema (none: it can)."""
    try:
        delta_types(with_epoch(schema))
    except Exception as exc:
        return [f"no Delta table can be created from the staged schema: {first_line(exc)}"]
    return []


def schema_problems(schema: pa.Schema, want: Any) -> list[str]:
    """Name the columns of a staged file that do not fit the table's schema."""
    fields = {f.name: f for f in want.fields}
    have = set(schema.names)
    unknown = sorted(have - set(fields))
    missing = sorted(n for n, f in fields.items()
                     if not f.nullable and n not in have and n != EPOCH_COLUMN)
    mismatched = []
    for name in sorted(have & set(fields)):
        import pyarrow as pa

        try:
            got = delta_types(pa.schema([schema.field(name)]))[name]
        except Exception:
            mismatched.append(f"{name} ({schema.field(name).type} in the file: no Delta type)")
            continue
        table_type = type_name(fields[name].type)
        if got != table_type:
            mismatched.append(f"{name} ({got} in the file, {table_type} in the table)")
    parts = []
    if unknown:
        parts.append(f"columns not in the table: {', '.join(unknown)}")
    if missing:
        parts.append(f"required columns missing: {', '.join(missing)}")
    if mismatched:
        parts.append(f"columns of another type: {', '.join(mismatched)}")
    return ["; ".join(parts)] if parts else []
