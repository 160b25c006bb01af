"""What the staged files are to a table, for every format: their footers, the
statistics sealed with their manifest, and the problems that refuse them.

A table commit adds the staged Parquet files where they are, so what a format needs
of them comes from their footers: read once, in parallel (:func:`read_footers`), by
the first check of the sealed files against the table, and sealed beside the manifest
(:func:`stats_bytes`) so no later step reads a footer again (:func:`read_sealed_stats`).
Two ways to seal them: the table sink's own pre-commit writes them before the manifest,
which names their sha256 (``table_stats``); an attempt the job sealed with the core
alone gets them from the sensor's check, after the manifest, written once and bound to
the manifest's digest (``manifest``, ``seal``).  What the formats refuse is said one way
(:func:`schema_error`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from ..core import footer
from ..core.staging import TABLE_STATS_NAME, digest_bytes, on_threads
from ..errors import ManifestError, StorageError

if TYPE_CHECKING:  # pragma: no cover
    from ..core.manifest import Manifest
    from ..core.transaction import Transaction
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
    def one(uri: str) -> tuple[str, Any, str | None]:
        try:
            with open_file(uri) as stream:
                return uri, footer.read_footer(stream, uri), None
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


def stats_bytes(table_key: Any, files: dict[str, dict[str, Any]],
                manifest: str | None = None) -> bytes:
    """The ``_tpc_table_stats.json`` sidecar: what the check learned from the footers
    (per file: size, rows, format statistics) and the table state it checked them
    against (``table_key``; a table not created yet: its creation proof's key).

    ``manifest``: the digest of the manifest sealed before it (the sensor's check of an
    attempt the job sealed), which cannot name the sidecar's sha256: the sidecar names
    the manifest instead, and ``seal`` is the sha256 of the rest of it, so an edited
    or truncated sidecar is never taken for the statistics of that manifest."""
    doc: dict[str, Any] = {"format": STATS_FORMAT, "version": STATS_VERSION,
                           "table": table_key, "files": files}
    if manifest is not None:
        doc["manifest"] = manifest
        doc["seal"] = footer.seal_of(doc)
    return footer.canonical(doc)


def read_sealed_stats(storage: Storage, seal: str,
                      manifest: Manifest) -> dict[str, Any] | None:
    """The sidecar sealed with ``manifest``, if it is that manifest's and describes
    exactly its files, sizes and rows; else None (the caller then reads the footers:
    an unchecked sidecar is never used).

    Whose it is: the one whose sha256 the manifest names (``table_stats``: the table
    sink sealed both), or, when the manifest names none (the job sealed it with the core
    alone), the one that names the manifest's digest and whose ``seal`` is its own
    sha256 (the sensor's check sealed it afterwards, once)."""
    path = storage.join(seal, TABLE_STATS_NAME)
    where = storage.uri(path)
    key = (where, manifest.table_stats or f"manifest {manifest.digest}")
    raw = _SEALED_STATS.get(key)
    if raw is None:
        try:
            raw = storage.read_bytes(path)
        except StorageError as exc:
            log.warning("cannot read the table statistics of %s (%s); reading the footers",
                        manifest.txn_id, exc)
            return None
    if raw is None and not manifest.table_stats:
        return None  # nothing sealed after the manifest (no sensor check ran): no news
    if raw is None or (manifest.table_stats and digest_bytes(raw) != manifest.table_stats):
        log.warning("the table statistics sealed with %s (%s) are missing or changed after "
                    "pre-commit: not used, the footers are read instead", manifest.txn_id,
                    TABLE_STATS_NAME)
        return None
    doc = _stats_of(raw, manifest)
    if doc is None:
        log.warning("the table statistics %s of %s are not its own (another manifest's, or "
                    "changed after they were sealed): not used, the footers are read "
                    "instead", where, manifest.txn_id)
        return None
    _SEALED_STATS.clear()  # the last one only: a commit reads it before and after deciding
    _SEALED_STATS[key] = raw
    return doc


def _stats_of(raw: bytes, manifest: Manifest) -> dict[str, Any] | None:
    """The sidecar's document if it is ``manifest``'s (see :func:`read_sealed_stats`)."""
    try:
        doc = json.loads(raw)
        files = doc["files"]
        if not manifest.table_stats and (doc.get("manifest") != manifest.digest
                                         or doc.get("seal") != footer.seal_of(doc)):
            return None  # written after the manifest: it must name it, and be its own
        ok = doc.get("format") == STATS_FORMAT and doc.get("version") == STATS_VERSION \
            and {p: e["size"] for p, e in files.items()} \
            == {f.path: f.size for f in manifest.files} \
            and all(f.rows is None or files[f.path].get("rows", f.rows) == f.rows
                    for f in manifest.files)
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    return doc if ok else None  # type: ignore[no-any-return]


#: The last sidecar read and found to be its manifest's, by location and that manifest
#: (the sha256 it names, else its digest): a hit is exactly the bytes a read returns
#: while the sidecar is not changed — and one changed after it was checked is as
#: good as unread: it was sealed once.
_SEALED_STATS: dict[tuple[str, str], bytes] = {}


def forget_sealed_stats() -> None:
    """Drop the sidecar kept from the last read: a commit starts from storage (what
    another step of the same process checked before may have changed since)."""
    _SEALED_STATS.clear()


def job_footers(read: Callable[[list[str]], tuple[dict[str, Any], list[str]]],
                storage: Storage, seal: str, manifest: Manifest, uris: list[str]
                ) -> tuple[dict[str, Any], list[str]]:
    """The staged files' footers (``uris`` in the manifest's order) for the first check
    of an attempt the job sealed: the ones the job kept (``_tpc_footers.json``, read
    once already, when it counted rows: :func:`airflow_tpc.core.footer.sealed_footers`),
    ``read`` of the rest."""
    from ..core.footer import sealed_footers
    from ..core.staging import FOOTERS_NAME

    try:  # a manifest naming its statistics was sealed by the table sink: no job kept any
        kept = {} if manifest.table_stats else sealed_footers(
            storage.read_bytes(storage.join(seal, FOOTERS_NAME)), manifest)
    except StorageError as exc:
        log.warning("cannot read the footers the job kept for %s (%s); reading the files",
                    manifest.txn_id, exc)
        kept = {}
    found = {uri: kept[f.path] for f, uri in zip(manifest.files, uris, strict=True)
             if f.path in kept}
    rest = [uri for uri in uris if uri not in found]
    more, problems = read(rest) if rest else ({}, [])
    return {**found, **more}, problems


def sealed_or_read(read: Callable[[list[str]], tuple[dict[str, Any], list[str]]],
                   uris: list[str], paths: list[str], sealed: dict[str, Any] | None,
                   field: str, have: tuple[dict[str, Any], list[str]] | None
                   ) -> tuple[dict[str, Any], dict[str, Any]]:
    """What a table commit takes of each staged file: ``field`` of its sealed statistics
    (``sealed``: None when they do not hold for the table), else its footer.

    One way for every format to say "the sealed statistics, else the footers": returns
    ``({uri: sealed value}, {uri: footer})`` covering every URI (``paths``: each URI's
    path in the manifest).  The footers come from ``have`` (the ones this commit read
    already), else ``read`` of only the files still missing, in parallel; an unreadable
    one is a StorageError naming it."""
    got: dict[str, Any] = {}
    for uri, path in zip(uris, paths, strict=True):
        entry = sealed["files"].get(path) if sealed is not None else None
        if entry is not None and entry.get(field) is not None:
            got[uri] = entry[field]
    found, problems = have if have is not None else ({}, [])
    missing = [u for u in uris if u not in got and u not in found]
    if missing:
        more, problems = read(missing)
        found = {**found, **more}
    if problems and any(u not in found for u in uris if u not in got):
        raise StorageError("; ".join(problems[:5]))
    return got, {u: found[u] for u in uris if u not in got}


def check_sealed(sink: Any, txn: Transaction, manifest: Manifest) -> None:
    """The table's check of an attempt sealed already (``sink``: a ``TableSink``; not
    imported here, which base.py imports) — the sensor's, for a job that
    sealed with the core alone — and the first read of its footers: what it learns is
    sealed for every later step (a deferred sensor's second look, the commit's check
    before its decision, the switch), so each footer is read once.

    Statistics sealed with this manifest and checked against the table as it is now
    mean the check holds: nothing is read.  Otherwise the footers (those the job kept,
    else read once, in parallel: :func:`job_footers`) are checked; the statistics are
    then written once, put-if-absent, naming the manifest's digest (:func:`stats_bytes`):
    a sidecar already there (sealed against another table state, or not this
    manifest's) is left as it is, and the commit then reads the footers itself, once."""
    target, storage = sink.table_target, sink.storage
    table = target.load_table()
    key = target.table_key(table, sink.scope)
    seal = sink.layout.sealed(txn.epoch, txn.attempt)
    sealed = read_sealed_stats(storage, seal, manifest)
    if sealed is not None and sealed["table"] == key:
        return
    uris = [storage.uri(storage.join(sink.layout.staging(txn.epoch, txn.attempt), f.path))
            for f in manifest.files]
    footers = job_footers(target.read_footers, storage, seal, manifest, uris)
    target.check_staged(uris, txn.epoch, table, footers=footers, scope=sink.scope)
    if sealed is not None or manifest.table_stats:
        return  # sealed once already: never rewritten
    per_uri = target.file_stats(footers[0], table)
    files = {f.path: {**per_uri.get(uri, {}), "size": f.size}
             for f, uri in zip(manifest.files, uris, strict=True)}
    path = storage.join(seal, TABLE_STATS_NAME)
    if not storage.put_if_absent(path, stats_bytes(key, files, manifest.digest)):
        log.info("%s already holds table statistics of %s: kept as they are (the commit "
                 "uses them only if they are this manifest's)", storage.uri(path),
                 txn.txn_id)


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
