"""The FileIO one epoch's Iceberg commit runs on: each metadata file read once, early,
and the commit's own files written side by side.

A commit asks pyiceberg for three things in a row — the epoch's files (a scan plan),
the snapshot that replaces them, and that snapshot's summary — and each reads the
current manifest list again, with a HEAD for its size before every GET.  Behind
50-100 ms of object-store latency those repeats were a third of the commit's
requests.  Manifest lists and manifests are immutable by the Iceberg spec (a new
snapshot writes new ones, under new names), so one read each is exact, not a guess —
and so is reading them *early*: :meth:`CommitFileIO.prefetch_snapshot` reads the
current snapshot's manifest list, then its manifests side by side, in the background
while the commit does its other checks (they are off the commit's sequential path).

The commit also writes files (its manifests, its manifest list) and pyiceberg asks
the store about each twice: whether it exists before writing (a HEAD; the names are
fresh UUIDs, and Iceberg's Java ``S3FileIO`` does not ask either), and its length
after (a HEAD; the bytes were just written here).  Both answers are known here.  The
writes themselves go out in the background as each file is closed, so the manifest
list (which only needs each manifest's length, known from its bytes) uploads beside
the manifests; :meth:`CommitFileIO.flush` waits for every one before the catalog
commit is sent, so the catalog never names a file that is not written.

Each of these files is one request: on S3 a GET without a HEAD before it, and a
single PUT rather than a multipart upload (:mod:`.iceberg_s3io`, made from the FileIO's
own properties, where that changes nothing else); elsewhere the FileIO's own.

Only public pyiceberg API: :class:`FileIO` and its files, its ``properties``, and
``Table.io``.  Every request carries the table's own credentials (vended or not).
"""

from __future__ import annotations

import io
import logging
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from pyiceberg.io import FileIO, InputFile, InputStream, OutputFile, OutputStream

from .iceberg_s3io import direct_s3

log = logging.getLogger("airflow_tpc")

#: Files read once: manifest lists (``snap-*.avro``) and manifests (``*-m<N>.avro``).
#: Iceberg never rewrites a file in place; table metadata JSON is not read through
#: here (the catalog answers it) and a commit reads no data file.
IMMUTABLE_SUFFIX = ".avro"
#: Threads reading and writing metadata files (manifests of a table with a long
#: history are many small reads: side by side, they cost one round trip or a few).
IO_THREADS = 8

_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def _pool() -> ThreadPoolExecutor:
    """One pool for every commit of the process (not one per commit: idle threads of a
    pool nobody shuts down would pile up in a long-lived worker)."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(IO_THREADS, thread_name_prefix="tpc-iceberg-io")
        return _POOL


class CommitFileIO(FileIO):
    """A table's FileIO with each immutable metadata file read at most once (perhaps
    ahead of time), and the files it writes remembered (their length, their bytes)
    instead of asked for, and uploaded in the background until :meth:`flush`."""

    def __init__(self, inner: FileIO) -> None:
        super().__init__(inner.properties)
        self.inner = inner
        #: One request per metadata file on S3, where the FileIO's settings allow it.
        self.direct = direct_s3(inner)
        self._lock = threading.Lock()
        #: Reads of immutable files, done or under way (and files written here).
        self._reads: dict[str, Future[bytes]] = {}
        #: Uploads not yet waited for (:meth:`flush`).
        self._writes: dict[str, Future[None]] = {}
        #: Files closed while writes are held (:meth:`hold`): not uploaded yet.
        self._held: list[tuple[str, bytes]] | None = None

    # -- reads ----------------------------------------------------------------------
    def new_input(self, location: str) -> InputFile:
        if location.endswith(IMMUTABLE_SUFFIX):
            return _OnceInput(location, self)
        return self.inner.new_input(location)

    def read(self, location: str) -> bytes:
        """The bytes of an immutable file: from an earlier read (or one under way), else
        read now.  A failed read is not kept: the next reader reads again (as it would
        have without the read ahead)."""
        with self._lock:
            held = self._reads.get(location)
            mine = held is None
            if held is None:
                held = self._reads[location] = Future()
        fut = held
        if mine:
            _settle(fut, lambda: self._fetch(location))
        if fut.exception() is not None:  # waits for a read under way
            with self._lock:
                if self._reads.get(location) is held:
                    del self._reads[location]
            if not mine:
                return self.read(location)
        return fut.result()

    def prefetch(self, location: str) -> None:
        """Read an immutable file in the background (once)."""
        with self._lock:
            if location in self._reads:
                return
            fut: Future[bytes] = Future()
            self._reads[location] = fut
        _pool().submit(_settle, fut, lambda: self._fetch(location))

    def prefetch_snapshot(self, table: Any) -> None:
        """Read the current snapshot's manifest list, then its manifests side by side,
        in the background: what the commit reads next (the epoch's files, the snapshot
        it builds on), read while the commit still checks and decides."""
        snap = table.current_snapshot()
        if snap is None or not snap.manifest_list.endswith(IMMUTABLE_SUFFIX):
            return

        def chain() -> None:
            try:
                for mf in snap.manifests(self):
                    self.prefetch(mf.manifest_path)
            except Exception as exc:  # the commit reads it again and says what failed
                log.debug("reading %s ahead failed: %s", snap.manifest_list, exc)

        _pool().submit(chain)

    def _fetch(self, location: str) -> bytes:
        if self.direct is not None and self.direct.handles(location):
            return self.direct.get(location)
        with self.inner.new_input(location).open(seekable=False) as stream:
            return stream.read()  # type: ignore[no-any-return]

    # -- writes ---------------------------------------------------------------------
    def new_output(self, location: str) -> OutputFile:
        if location.endswith(IMMUTABLE_SUFFIX):
            return _KnownOutput(location, self)
        return self.inner.new_output(location)  # a data file (a rewrite): streamed

    def written(self, location: str, data: bytes) -> None:
        """A file closed by pyiceberg: known from now on, uploaded in the background
        (or, while writes are held, when they are released)."""
        done: Future[bytes] = Future()
        done.set_result(data)
        with self._lock:
            self._reads[location] = done
            if self._held is not None:
                self._held.append((location, data))
            else:
                self._writes[location] = _pool().submit(self._upload, location, data)

    def hold(self) -> None:
        """Keep the files closed from now on in memory, unwritten, until :meth:`release`
        (a commit built before its decision writes nothing before it)."""
        with self._lock:
            if self._held is None:
                self._held = []

    def release(self) -> list[str]:
        """Upload the held files (in the background) and stop holding; their locations."""
        with self._lock:
            held, self._held = self._held or [], None
            for location, data in held:
                self._writes[location] = _pool().submit(self._upload, location, data)
        return [location for location, _ in held]

    def forget(self, locations: list[str]) -> None:
        """Files released for a commit that is then never sent: their uploads are waited
        for (none outlives the attempt) and forgotten — an upload of theirs that failed
        is no concern of the commit built instead, whose files are others."""
        with self._lock:
            uploads = [self._writes.pop(loc, None) for loc in locations]
            for loc in locations:
                self._reads.pop(loc, None)
        for fut in uploads:
            if fut is not None and fut.exception() is not None:
                log.debug("an upload of a commit not sent failed: %s", fut.exception())

    def discard_held(self) -> None:
        """Forget the held files (a commit built and never sent: nothing was written)."""
        with self._lock:
            for location, _ in self._held or []:
                self._reads.pop(location, None)
            self._held = None

    def _upload(self, location: str, data: bytes) -> None:
        if self.direct is not None and self.direct.handles(location):
            self.direct.put(location, data)
            return
        with self.inner.new_output(location).create(overwrite=True) as stream:
            stream.write(data)

    def flush(self) -> None:
        """Release held files, then wait for every upload; the first failure is raised
        (then nothing may name the files: the caller does not commit)."""
        self.release()
        with self._lock:
            pending, self._writes = self._writes, {}
        errors = [e for e in (f.exception() for f in pending.values()) if e is not None]
        if errors:
            raise errors[0]

    def settle(self) -> None:
        """Wait for every upload, whatever its outcome (a commit that failed while
        building: no upload of it outlives the attempt); held files are not written."""
        self.discard_held()
        with self._lock:
            pending, self._writes = self._writes, {}
        for fut in pending.values():
            if fut.exception() is not None:
                log.debug("an upload of a commit not sent failed: %s", fut.exception())

    def exists(self, location: str) -> bool:
        with self._lock:
            held = self._reads.get(location)
        if location in self._writes or (held is not None and held.done()
                                        and held.exception() is None):
            return True
        return self.inner.new_input(location).exists()

    def delete(self, location: str | InputFile | OutputFile) -> None:
        path = location if isinstance(location, str) else location.location
        with self._lock:
            upload = self._writes.pop(path, None)
            self._reads.pop(path, None)
            if self._held is not None:
                self._held = [h for h in self._held if h[0] != path]
        if upload is not None:
            upload.exception()  # never delete under an upload still running
        self.inner.delete(path)


def _settle(fut: Future[bytes], fn: Any) -> None:
    try:
        fut.set_result(fn())
    except BaseException as exc:  # noqa: BLE001 - handed to whoever waits for it
        fut.set_exception(exc)


def on_commit_io(table: Any) -> Any:
    """``table`` with its FileIO wrapped (once) for one commit."""
    if not isinstance(table.io, CommitFileIO):
        table.io = CommitFileIO(table.io)
    return table


def flush(table: Any) -> None:
    """Every file the commit wrote is in the store (a no-op for an unwrapped FileIO)."""
    if isinstance(table.io, CommitFileIO):
        table.io.flush()


def settle(table: Any) -> None:
    if isinstance(table.io, CommitFileIO):
        table.io.settle()


def hold(table: Any) -> None:
    on_commit_io(table).io.hold()


def discard_held(table: Any, released: list[str] | None = None) -> None:
    """A commit built and never sent: its held files dropped, those ``released`` already
    waited for and forgotten."""
    if isinstance(table.io, CommitFileIO):
        table.io.discard_held()
        table.io.forget(released or [])


def release(table: Any) -> list[str]:
    """Start uploading the held files (the commit was decided); their locations."""
    return table.io.release() if isinstance(table.io, CommitFileIO) else []


class _Owned:
    """A file of the commit's :class:`CommitFileIO`: its length and existence are the
    owner's (the bytes it holds, or the store's answer), input or output alike."""

    location: str

    def __init__(self, location: str, owner: CommitFileIO) -> None:
        super().__init__(location)  # type: ignore[call-arg]  # pyiceberg's InputFile/OutputFile
        self.owner = owner

    def __len__(self) -> int:
        return len(self.owner.read(self.location))

    def exists(self) -> bool:
        return self.owner.exists(self.location)


class _OnceInput(_Owned, InputFile):
    def open(self, seekable: bool = True) -> InputStream:
        return io.BytesIO(self.owner.read(self.location))  # type: ignore[return-value]


class _KnownOutput(_Owned, OutputFile):
    def to_input_file(self) -> InputFile:
        return _OnceInput(self.location, self.owner)

    def create(self, overwrite: bool = False) -> OutputStream:
        # No existence check first: the names pyiceberg writes are fresh UUIDs (as Java
        # Iceberg's S3FileIO, which does not check either).  The bytes are collected and
        # handed over on close (uploaded in one stream), then remembered.
        return _Collect(self)  # type: ignore[return-value]


class _Collect:
    """The bytes of one new file, handed over when it is closed cleanly (a stream left
    by an exception writes nothing: no half file)."""

    def __init__(self, out: _KnownOutput) -> None:
        self.out = out
        self.buffer = io.BytesIO()

    def write(self, data: bytes) -> int:
        return self.buffer.write(data)

    def tell(self) -> int:
        return self.buffer.tell()

    def close(self) -> None:
        if self.buffer.closed:
            return
        self.out.owner.written(self.out.location, self.buffer.getvalue())
        self.buffer.close()

    def __enter__(self) -> _Collect:
        return self

    def __exit__(self, exc_type: Any, *_: Any) -> None:
        if exc_type is None:
            self.close()
        else:
            self.buffer.close()
