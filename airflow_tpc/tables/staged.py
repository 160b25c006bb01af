"""What the staged files are to a table, for every format: their footers, the
statistics sealed with their manifest, and the problems that refuse them.

A table commit adds the staged Parquet files where they are, so what a format needs
of them comes from their footers: read once, in parallel (:func:`read_footers`), at
pre-commit, and sealed beside the manifest (:func:`stats_bytes`, its sha256 in the
manifest) so the commit reads no footer again (:func:`read_sealed_stats`).  What the
formats refuse is said one way (:func:`schema_error`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from ..errors import ManifestError, StorageError
from ..staging import TABLE_STATS_NAME, digest_bytes, on_threads

if TYPE_CHECKING:  # pragma: no cover
    from ..manifest import Manifest
    from ..storage import Storage

log = logging.getLogger("airflow_tpc")

#: The partition column: one value (the epoch's name) per data file.
EPOCH_COLUMN = "epoch"
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
    against (``table_key``; a table not created yet: its creation proof's key)."""
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
