"""What one ``replace_where`` commit does to the files already in a Delta table.

Delta's ``replaceWhere``: the rows the predicate selects are replaced.  Each file in
the table is classified (:meth:`DeltaScope.classify`) by what is known of it, from the
cheapest evidence up:

1. its partition values and the statistics the log keeps for it (``minValues`` /
   ``maxValues`` / ``nullCount``; a timestamp's maximum widened by 999 µs, since
   Delta writers keep milliseconds, truncated);
2. if those cannot tell, its own Parquet footer (one read per file, in parallel);
3. if even that cannot tell, its rows.

A file wholly inside the predicate is removed; one wholly outside is kept; one holding
rows of both is **rewritten**: its rows outside the predicate (false or null, as SQL's
``DELETE WHERE`` keeps) go to a new file beside it, the old file is removed, and both
actions join the staged files' adds in the epoch's one Delta commit.  The new file's
name is derived from the transaction id and the old path, so a commit retried after a
crash or a lost race writes the same file again rather than a second one; a file
written for a commit that then lost its base and found the old file gone is left
unreferenced, for Delta's ``VACUUM`` (as any failed Delta writer's files are).

A file carrying a deletion vector cannot be rewritten from its Parquet rows alone
(the vector's deletions would come back): refused, with the reason.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import posixpath
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote

from ..core.faults import crashpoint
from ..errors import StorageError, TpcError
from .delta_scope import DeltaScope, partition_text

if TYPE_CHECKING:  # pragma: no cover
    from deltalake import DeltaTable

    from .delta_table import DeltaLakeTable

log = logging.getLogger("airflow_tpc")

#: Delta keeps timestamp statistics in milliseconds, truncated: a maximum may lie up to
#: 999 µs below the column's true maximum.
_MS_SLACK = dt.timedelta(microseconds=999)


def scope_actions(target: DeltaLakeTable, table: DeltaTable, bound: DeltaScope, now: int,
                  txn_id: str) -> tuple[list[Any], list[Any]]:
    """``(removes, adds)``: the remove actions for every file the predicate selects
    rows of, and the add actions of the rewritten files (their rows outside it)."""
    import pyarrow as pa

    if bound.scope.kind != "where":
        return [], []
    actions = pa.table(target._call("list the files of", table.get_add_actions,
                                    flatten=True)).to_pylist()
    inside: list[dict[str, Any]] = []
    unknown: list[dict[str, Any]] = []
    for row in actions:  # 1. the log's partition values and statistics
        verdict = "unknown" if row.get("num_records") is None else bound.classify(
            row["num_records"], _values(bound, row), _log_bounds(bound, row))
        if verdict == "inside":
            inside.append(row)
        elif verdict == "unknown":
            unknown.append(row)
    mixed: list[dict[str, Any]] = []
    if unknown:  # 2. the files' own footers
        footers, problems = target.read_footers([target.file_uri(r["path"]) for r in unknown])
        if problems:
            raise StorageError("; ".join(problems[:5]))
        for row in unknown:
            md = footers[target.file_uri(row["path"])]
            verdict = bound.classify(md.num_rows, _values(bound, row), bound.footer_bounds(md))
            if verdict == "inside":
                inside.append(row)
            elif verdict == "unknown":
                mixed.append(row)
    removes = [_remove(bound, row, now) for row in inside]
    adds: list[Any] = []
    for row in mixed:
        rewritten = _rewrite(target, bound, row, now, txn_id)
        if rewritten is not False:  # False: no row inside after all, the file stays
            removes.append(_remove(bound, row, now))
            if rewritten is not None:
                adds.append(rewritten)
    if adds:
        crashpoint("delta.after_rewrite")
        log.info("Delta %s: %d file(s) held rows inside and outside replace_where %r: "
                 "rewritten without them", target.uri, len(adds), bound.scope.where)
    return removes, adds


def _values(bound: DeltaScope, row: dict[str, Any]) -> dict[str, Any]:
    return {c: row.get(f"partition.{c}") for c in bound.partition_columns}


def _log_bounds(bound: DeltaScope, row: dict[str, Any]
                ) -> dict[str, tuple[Any, Any, int | None]]:
    """The log's statistics of the predicate's data columns (None where it keeps none)."""
    out = {}
    for name in bound.data_columns:
        hi = row.get(f"max.{name}")
        if isinstance(hi, dt.datetime):
            hi += _MS_SLACK
        out[name] = (row.get(f"min.{name}"), hi, row.get(f"null_count.{name}"))
    return out


def _partition_values(bound: DeltaScope, row: dict[str, Any]) -> dict[str, str | None]:
    return {c: None if v is None else partition_text(v) for c, v in _values(bound, row).items()}


def _remove(bound: DeltaScope, row: dict[str, Any], now: int) -> Any:
    from deltalake.transaction import RemoveAction

    return RemoveAction(row["path"], True, now, row["size_bytes"],
                        _partition_values(bound, row))


def _rewrite(target: DeltaLakeTable, bound: DeltaScope, row: dict[str, Any], now: int,
             txn_id: str) -> Any:
    """The add action of ``row``'s file without the predicate's rows; None: every row
    was inside (remove only); False: none was (keep the file as it is)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from deltalake.transaction import AddAction

    if any(k.startswith("deletion_vector") and v is not None for k, v in row.items()):
        raise TpcError(f"Delta table {target.uri}: {row['path']} holds rows inside and outside "
                       f"replace_where {bound.scope.where!r} and carries a deletion vector; "
                       "airflow-tpc rewrites such files from their Parquet rows, which would "
                       "bring the deleted rows back. Purge the table's deletion vectors "
                       "(REORG TABLE ... APPLY (PURGE)) or replace whole partitions")
    fs, root = target.arrow_filesystem()
    src = target.arrow_path(target.file_uri(row["path"]))
    data = pq.read_table(src, filesystem=fs)
    frame = data
    values = _partition_values(bound, row)
    for name, text in values.items():  # Delta files leave partition columns out
        if name not in frame.column_names:
            frame = frame.append_column(name, pa.array([text] * frame.num_rows, pa.string())
                                        .cast(bound.partition_type(name)))
    kept = frame.filter(bound.keep_filter()).select(data.column_names)
    if kept.num_rows == data.num_rows:
        return False
    if kept.num_rows == 0:
        return None
    digest = hashlib.sha256(f"{txn_id}\n{row['path']}".encode()).hexdigest()[:24]
    rel = posixpath.join(posixpath.dirname(unquote(row["path"])) if "://" not in row["path"]
                         else "", f"part-tpc-rewrite-{digest}.parquet")
    dst = f"{root.rstrip('/')}/{rel}"
    pq.write_table(kept.replace_schema_metadata(data.schema.metadata), dst, filesystem=fs)
    size = fs.get_file_info(dst).size
    return AddAction(quote(rel, safe="/=-_.~"), size, values, now, True,
                     json.dumps({"numRecords": kept.num_rows}))
