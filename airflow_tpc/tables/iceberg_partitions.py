"""A staged file's partition in an Iceberg table whose spec footers cannot decide.

Iceberg adds an existing Parquet file as a data file of exactly one partition.  For
order-preserving transforms (identity, ``days``, ``hours``, ``truncate``...) the
partition follows from the footer's min/max of the source column — pyiceberg's
``add_files`` inference, used everywhere else here.  A ``bucket`` transform does
not preserve order: min and max say nothing about which buckets the values fall
in.  For such a spec the file's partition is computed from its values: only the
source columns are read, transformed with pyiceberg's own (``pyiceberg-core``)
transforms, and a file whose rows fall into more than one partition is refused —
it cannot be added as it is (the job writes one file per partition).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..core.staging import on_threads

#: Files read at once (one ranged read of a few columns each).
READ_THREADS = 8


def needs_data(spec: Any) -> bool:
    """Whether some field's partition value cannot be inferred from min/max."""
    return any(not field.transform.preserves_order for field in spec.fields)


def partitions_from_data(open_input: Callable[[str], Any], uris: list[str], meta: Any
                         ) -> tuple[dict[str, list[Any]], list[str]]:
    """Per file (``{uri: [value per spec field]}``) its one partition under the table's
    current spec, from its values; and the problems of files that span several."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    spec, schema = meta.spec(), meta.schema()
    names = [schema.find_column_name(f.source_id) for f in spec.fields]

    def one(uri: str) -> tuple[str, list[Any] | None, str | None]:
        try:
            with open_input(uri) as stream:
                data = pq.read_table(stream, columns=sorted(set(names)))
        except Exception as exc:
            return uri, None, f"{uri}: its partition columns cannot be read ({exc})"
        if data.num_rows == 0:
            return uri, [], None  # adds nothing: never added
        values = []
        for field, name in zip(spec.fields, names, strict=True):
            source = schema.find_field(field.source_id).field_type
            column = data[name].combine_chunks()
            found = pc.unique(field.transform.pyarrow_transform(source)(column)).to_pylist()
            if len(found) != 1:
                return uri, None, (f"{uri} does not lie in one partition of the table's spec: "
                                   f"its rows fall into {len(found)} partitions of "
                                   f"{field.name} ({field.transform}); write one file per "
                                   "partition (Spark: repartition by the partition columns)")
            values.append(found[0])
        return uri, values, None

    out: dict[str, list[Any]] = {}
    problems: list[str] = []
    for uri, values, problem in on_threads(one, uris, READ_THREADS):
        if problem is not None:
            problems.append(problem)
        elif values is not None:
            out[uri] = values
    return out, problems
