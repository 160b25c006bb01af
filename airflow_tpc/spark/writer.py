"""The ``tpc`` data source's writer: Parquet from executors through fsspec, measured
while written, stray task attempts' files removed on commit.

Apart from :mod:`.datasource` (the format Spark registers, and its reader) because
writing is where the exactly-once rules of one write live (the file names, the commit
messages, ``commit()`` and ``abort()``, told in :mod:`.datasource`), and reading
committed data needs none of it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import posixpath
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage

from ..core.staging import is_hidden
from ..errors import TpcError
from .context import HIVE_NULL, SIDECAR_PREFIX, JobTransaction

log = logging.getLogger("airflow_tpc.spark")

_NAME_RE = re.compile(r"^part-\d{5,}-a\d+-w(?P<write>[0-9a-f]{8})-\d{4,}\.")
# Spark's ExternalCatalogUtils.escapePathName set, so paths match native partitionBy.
_ESCAPE = set('"#%\'*/:=?\\\x7f{[]^') | {chr(c) for c in range(1, 32)}


@dataclass
class TpcFile:
    """One file a task wrote: path relative to the write's base, and what it holds."""

    relpath: str
    size: int
    checksum: str  # "md5:<hex>" (S3) or "sha256:<hex>" (local), computed while writing
    rows: int


@dataclass
class TpcCommitMessage(WriterCommitMessage):
    """What one successful task attempt wrote (picklable; sent to commit/abort)."""

    partition_id: int
    attempt: int
    files: list[TpcFile] = field(default_factory=list)


def escape_partition_value(value: Any) -> str:
    """Format a partition value as Spark's native writers name its directory."""
    if value is None:
        return HIVE_NULL  # read back as null by Spark's partition discovery
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif hasattr(value, "isoformat") and not hasattr(value, "hour"):
        text = value.isoformat()  # a date
    else:
        text = str(value)
    return "".join(f"%{ord(c):02X}" if c in _ESCAPE else c for c in text)


class _HashingFile:
    """A write-only file wrapper that hashes the bytes on their way out (one pass).

    MD5 on S3, where it equals a single-part object's ETag (the commit then
    verifies without reading); SHA-256 elsewhere, as the core would compute it
    (and about 2.5x faster than MD5 where the CPU has SHA extensions).
    """

    def __init__(self, raw: Any, algo: str = "md5") -> None:
        self._raw = raw
        self._algo = algo
        self._hash = hashlib.new(algo)
        self.size = 0
        self.closed = False

    def write(self, data: Any) -> int:
        mv = memoryview(data)
        self._hash.update(mv)
        self._raw.write(mv)
        self.size += mv.nbytes
        return mv.nbytes

    def tell(self) -> int:
        return self.size

    def flush(self) -> None:
        self._raw.flush()

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def readable(self) -> bool:
        return False

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._raw.close()

    def discard(self) -> None:
        """Give up a half-written file: an object-store upload is never completed."""
        if not self.closed:
            self.closed = True
            discard = getattr(self._raw, "discard", None)
            (discard or self._raw.close)()

    @property
    def checksum(self) -> str:
        return f"{self._algo}:{self._hash.hexdigest()}"


def _is_local(fs: Any) -> bool:
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    return protocol in ("file", "local")


class TpcWriter(DataSourceArrowWriter):
    """Writes Arrow batches as Parquet through fsspec into the transaction's output."""

    def __init__(self, job: JobTransaction, schema: Any, overwrite: bool,
                 options: dict[str, str]) -> None:
        self.job = job
        self.overwrite = overwrite
        self.base_uri = job.output_uri.rstrip("/")
        self.write_id = uuid.uuid4().hex[:8]
        self.partition_by = [c for c in options.get("partition_by", "").split(",") if c]
        names = list(schema.fieldNames())
        missing = [c for c in self.partition_by if c not in names]
        if missing:
            raise TpcError(f"partition_by columns {missing} are not in the DataFrame {names}")
        if self.partition_by and len(self.partition_by) == len(names):
            raise TpcError("every column is a partition column: nothing left to write")
        self.compression = options.get("compression", "snappy")
        self.max_records = int(options.get("max_records_per_file", "0") or 0)
        self.row_group_bytes = int(options.get("row_group_bytes", str(64 * 1024 * 1024)))
        self.do_precommit = options.get("precommit", "true").lower() == "true"

    # -- executors -------------------------------------------------------------
    def _fs(self) -> tuple[Any, str]:
        import fsspec

        fs, root = fsspec.core.url_to_fs(self.base_uri, **self.job.fsspec_options())
        root = root.rstrip("/")
        if _is_local(fs):
            fs.makedirs(root, exist_ok=True)
        return fs, root

    def write(self, iterator: Iterator[Any]) -> TpcCommitMessage:
        import pyarrow as pa
        import pyarrow.parquet as pq
        from pyspark import TaskContext

        ctx = TaskContext.get()
        pid = ctx.partitionId() if ctx else 0
        attempt = ctx.attemptNumber() if ctx else 0
        fs, root = self._fs()
        open_files: dict[str, tuple[Any, _HashingFile, list[int]]] = {}
        entry_rel: dict[str, str] = {}
        done: list[TpcFile] = []
        seq = 0
        written_paths: list[str] = []

        def open_file(subdir: str, schema: pa.Schema) -> tuple[Any, _HashingFile, list[int]]:
            nonlocal seq
            name = f"part-{pid:05d}-a{attempt}-w{self.write_id}-{seq:04d}.parquet"
            seq += 1
            rel = posixpath.join(subdir, name) if subdir else name
            full = f"{root}/{rel}"
            if subdir and _is_local(fs):
                fs.makedirs(f"{root}/{subdir}", exist_ok=True)
            written_paths.append(full)
            sink = _HashingFile(fs.open(full, "wb"), "sha256" if _is_local(fs) else "md5")
            writer = pq.ParquetWriter(sink, schema, compression=self.compression)
            entry = (writer, sink, [0])
            open_files[subdir] = entry
            entry_rel[subdir] = rel
            return entry

        pending: dict[str, list[Any]] = {}  # subdir -> tables not yet written (one row group)

        def flush(subdir: str) -> None:
            tables = pending.pop(subdir, [])
            if tables:
                open_files[subdir][0].write_table(
                    tables[0] if len(tables) == 1 else pa.concat_tables(tables))

        def close_file(subdir: str) -> None:
            flush(subdir)
            writer, sink, rows = open_files.pop(subdir)
            writer.close()
            sink.close()
            done.append(TpcFile(entry_rel[subdir], sink.size, sink.checksum, rows[0]))
            self.file_closed(entry_rel[subdir], pid, attempt)

        try:
            for batch in iterator:
                for subdir, part in self._split(pa.Table.from_batches([batch])):
                    offset = 0
                    while offset < part.num_rows:
                        entry = open_files.get(subdir) or open_file(subdir, part.schema)
                        room = (self.max_records - entry[2][0]) if self.max_records \
                            else part.num_rows
                        chunk = part.slice(offset, room)
                        # Spark hands over ~10k-row batches: buffer them into row groups
                        # of a sensible size rather than one tiny row group per batch.
                        buffered = pending.setdefault(subdir, [])
                        buffered.append(chunk)
                        entry[2][0] += chunk.num_rows
                        offset += chunk.num_rows
                        if sum(t.nbytes for t in buffered) >= self.row_group_bytes:
                            flush(subdir)
                        if self.max_records and entry[2][0] >= self.max_records:
                            close_file(subdir)
            for subdir in list(open_files):
                close_file(subdir)
        except BaseException:
            # Best effort: a killed worker never gets here; commit() cleans up then.
            for _, sink, _ in open_files.values():
                with contextlib.suppress(Exception):
                    sink.discard()
            try:
                leftovers = [p for p in written_paths if fs.exists(p)]
                if leftovers:  # s3fs raises FileNotFoundError for rm([])
                    fs.rm(leftovers)
            except Exception:  # noqa: BLE001
                log.warning("could not remove the files of failed task %d attempt %d (the "
                            "driver's abort or the next commit removes them)", pid, attempt)
            raise
        return TpcCommitMessage(pid, attempt, done)

    def file_closed(self, relpath: str, partition_id: int, attempt: int) -> None:
        """Hook called after each file is complete (tests inject crashes here)."""

    def _split(self, table: Any) -> Iterator[tuple[str, Any]]:
        """(partition sub-directory, rows without the partition columns) per value combo."""
        if not self.partition_by:
            yield "", table
            return
        import pyarrow.compute as pc

        keys = table.select(self.partition_by)
        combos = keys.group_by(self.partition_by).aggregate([]).to_pylist()
        data = table.drop_columns(self.partition_by)
        for combo in combos:
            mask = None
            for col in self.partition_by:
                value = combo[col]
                term = pc.is_null(keys[col]) if value is None else pc.equal(keys[col], value)
                mask = term if mask is None else pc.and_(mask, term)
            subdir = "/".join(f"{c}={escape_partition_value(combo[c])}" for c in self.partition_by)
            yield subdir, data.filter(mask)

    # -- driver-side (Python worker started by the JVM) ------------------------
    def _visible_files(self, fs: Any, root: str) -> list[str]:
        """Every visible file below the base (one recursive listing), relative to it."""
        if not fs.exists(root):
            return []
        rels = (path[len(root):].lstrip("/") for path in fs.find(root))
        return [rel for rel in rels if not is_hidden(rel)]

    def _owned(self, rels: list[str]) -> list[str]:
        """The files this write may delete: its own, or all of them when overwriting."""
        out = []
        for rel in rels:
            m = _NAME_RE.match(posixpath.basename(rel))
            if self.overwrite or (m and m.group("write") == self.write_id):
                out.append(rel)
        return out

    def commit(self, messages: list[TpcCommitMessage | None]) -> None:
        fs, root = self._fs()
        kept = {f.relpath: f for m in messages if m is not None for f in m.files}
        present = self._visible_files(fs, root)
        stray = [rel for rel in self._owned(present) if rel not in kept]
        if stray:
            log.info("write %s: removing %d file(s) of failed or superseded task attempts",
                     self.write_id, len(stray))
            fs.rm([f"{root}/{rel}" for rel in stray])
        absent = sorted(set(kept) - set(present))
        if absent:
            raise TpcError(f"write {self.write_id}: {len(absent)} committed file(s) vanished, "
                           f"e.g. {absent[0]!r}")
        if not self.job.transactional:
            return
        sidecar = {"write_id": self.write_id, "files": {
            rel: {"size": f.size, "checksum": f.checksum, "rows": f.rows}
            for rel, f in sorted(kept.items())}}
        try:
            with fs.open(f"{root}/{SIDECAR_PREFIX}{self.write_id}.json", "wb") as fh:
                fh.write(json.dumps(sidecar, sort_keys=True).encode())
        except PermissionError:  # managed table storage takes data files only
            log.info("write %s: the store refused the measurements sidecar in staging; "
                     "pre-commit measures the files itself", self.write_id)
        if self.do_precommit:
            self.job.precommit()

    def abort(self, messages: list[TpcCommitMessage | None]) -> None:
        fs, root = self._fs()
        if self.overwrite:  # only what this write produced; the rest was not ours to drop
            mine = [f.relpath for m in messages if m is not None for f in m.files]
        else:
            mine = self._owned(self._visible_files(fs, root))
        present = set(self._visible_files(fs, root))
        gone = [f"{root}/{rel}" for rel in mine if rel in present]
        if gone:
            fs.rm(gone)
        log.warning("write %s aborted: removed %d file(s)", self.write_id, len(gone))
