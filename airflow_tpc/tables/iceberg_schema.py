"""An Arrow schema as an Iceberg schema, through pyiceberg's public API only.

The Iceberg tables (a new table's schema, a staged column's type, whether a table can be
created at all) and Delta's ``replace_where`` (binding its predicate, parsed with
pyiceberg's expressions, to the table's columns) need the Iceberg schema of a staged
file's Arrow schema, whose fields carry no Iceberg field ids.  pyiceberg's own path for
that is private (``Catalog._convert_schema_if_needed``, ``_pyarrow_to_schema_without_ids``);
its public ``pyarrow_to_schema`` converts a schema without ids when given a name mapping.
So :func:`iceberg_schema_of` builds that mapping: every field, nested ones included, an id
in the order ``assign_fresh_schema_ids`` gives them (a struct's own fields, then their
children), so the result is the schema a new table gets.  Unsupported types raise
pyiceberg's own error (``timestamp[ns]``, ``null`` before format version 3), as the
private path did.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa


def iceberg_schema_of(schema: pa.Schema) -> Any:
    """The Iceberg ``Schema`` of an Arrow schema without field ids (fresh ids from 1).
    Raises pyiceberg's error for a type Iceberg has no name for."""
    from pyiceberg.io.pyarrow import pyarrow_to_schema
    from pyiceberg.table import DOWNCAST_NS_TIMESTAMP_TO_US_ON_WRITE
    from pyiceberg.table.name_mapping import NameMapping
    from pyiceberg.utils.config import Config

    # as pyiceberg's own write path: the user's pyiceberg config may allow ns timestamps
    downcast = Config().get_bool(DOWNCAST_NS_TIMESTAMP_TO_US_ON_WRITE) or False
    return pyarrow_to_schema(schema, name_mapping=NameMapping(_mapped(list(schema), [0])),
                             downcast_ns_timestamp_to_us=downcast)


def iceberg_field_of(schema: pa.Schema, name: str) -> Any:
    """The Iceberg field (``NestedField``; its type is what matters) of one column."""
    return iceberg_schema_of(pa.schema([schema.field(name)])).fields[0]


def _mapped(fields: list[pa.Field], last: list[int]) -> list[Any]:
    from pyiceberg.table.name_mapping import MappedField

    ids = []
    for _ in fields:  # a struct's own fields first, as assign_fresh_schema_ids numbers them
        last[0] += 1
        ids.append(last[0])
    return [MappedField(field_id=i, names=[f.name], fields=_children(f.type, last))
            for f, i in zip(fields, ids, strict=True)]


def _children(typ: pa.DataType, last: list[int]) -> list[Any]:
    """The mapped fields inside a nested type (Iceberg's names: ``element``, ``key``,
    ``value``)."""
    if pa.types.is_struct(typ):
        return _mapped([typ.field(i) for i in range(typ.num_fields)], last)
    if pa.types.is_map(typ):
        return _mapped([pa.field("key", typ.key_type), pa.field("value", typ.item_type)], last)
    if pa.types.is_list(typ) or pa.types.is_large_list(typ) \
            or pa.types.is_fixed_size_list(typ):
        return _mapped([pa.field("element", typ.value_type)], last)
    return []
