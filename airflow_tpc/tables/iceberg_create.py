"""A new Iceberg table: the schema and partition spec it is created with, and the proof,
before the decision, that the catalog can create it and the first commit take the files.

Pure pyiceberg (no catalog call, no write).  :meth:`~airflow_tpc.tables.iceberg_table.
IcebergTable.create_table` creates the table from :func:`new_table_parts`; the check
before the decision builds the very same table in memory (:func:`proposed_table`) and
checks the staged files against it as the switch checks them against the created table.

Why the field ids matter: pyiceberg converts an Arrow schema with every field id ``-1``,
and a catalog's create maps the partition spec's source id back to a column *by that
id* (``assign_fresh_partition_spec_ids``), which finds whichever column holds ``-1``
last.  A spec built on such a schema worked only while ``epoch`` was the last column;
anywhere else the create failed ("Cannot create identity partition sourced from
different field in schema: epoch") — after the decision, for ever.  Fresh, distinct
ids first make the spec name its column whatever the order.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .scope import Scope
from .staged import EPOCH_COLUMN

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa
    from pyiceberg.partitioning import PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.table import Table

#: The partition field id a new table's ``epoch`` field gets (Iceberg's first).
EPOCH_PARTITION_FIELD_ID = 1000


def new_table_parts(schema: pa.Schema, scope: Scope) -> tuple[Schema, PartitionSpec]:
    """The Iceberg schema (every field its own id, in the staged order) and partition
    spec (identity ``epoch`` for the epoch layout, else none) a new table is created
    with from the staged files' schema.  Raises pyiceberg's error for a schema Iceberg
    has no table for."""
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.transforms import IdentityTransform

    from .iceberg_schema import iceberg_schema_of

    ice = iceberg_schema_of(schema)
    if scope.kind != "epoch":
        return ice, PartitionSpec()
    field = ice.find_field(EPOCH_COLUMN)
    return ice, PartitionSpec(PartitionField(source_id=field.field_id,
                                             field_id=EPOCH_PARTITION_FIELD_ID,
                                             transform=IdentityTransform(), name=EPOCH_COLUMN))


def proposed_table(identifier: tuple[str, ...], location: str, schema: pa.Schema,
                   scope: Scope, io: Any, catalog: Any) -> Table:
    """The table ``create_table`` would make, built in memory the way a catalog builds a
    new table's metadata (``new_table_metadata``: format version, fresh ids, the spec
    bound to its column) and never written: what the staged files are checked against
    before the decision when the table does not exist yet."""
    from pyiceberg.table import Table
    from pyiceberg.table.metadata import new_table_metadata
    from pyiceberg.table.sorting import UNSORTED_SORT_ORDER

    ice, spec = new_table_parts(schema, scope)
    meta = new_table_metadata(ice, spec, UNSORTED_SORT_ORDER, location, {})
    return Table(identifier, meta, f"{location}/metadata/not-created.metadata.json", io,
                 catalog)


def stats_problems(table: Table, footers: dict[str, Any], uris: list[str]) -> list[str]:
    """The files whose DataFile statistics the first commit could not build from their
    footers against ``table`` (it would fail after the decision)."""
    from .iceberg_files import iceberg_stats, stats_plan

    plan = stats_plan(table.metadata)
    return [f"{uri}: its Iceberg statistics cannot be built from its footer"
            for uri in uris if uri in footers and footers[uri].num_rows
            and iceberg_stats(footers[uri], table.metadata, plan) is None]
