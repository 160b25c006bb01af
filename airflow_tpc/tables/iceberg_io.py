"""The FileIO one epoch's Iceberg commit runs on: each metadata file read once.

A commit asks pyiceberg for three things in a row — the epoch's files (a scan plan),
the snapshot that replaces them, and that snapshot's summary — and each reads the
current manifest list again, with a HEAD for its size before every GET.  Behind
50-100 ms of object-store latency those repeats were a third of the commit's
requests.  Manifest lists and manifests are immutable by the Iceberg spec (a new
snapshot writes new ones, under new names), so one read each is exact, not a guess.

The commit also writes two files (its manifest and manifest list) and pyiceberg asks
the store about each twice: whether it exists before writing (a HEAD; the names are
fresh UUIDs, and Iceberg's Java ``S3FileIO`` does not ask either), and its length
after (a HEAD; the bytes were just written here).  Both answers are known here.

Only public pyiceberg API: :class:`FileIO` and its files, and ``Table.io``.  Every
request still goes through the table's own FileIO (its credentials, vended or not).
"""

from __future__ import annotations

import io
from typing import Any

from pyiceberg.io import FileIO, InputFile, InputStream, OutputFile, OutputStream

#: Files read once: manifest lists (``snap-*.avro``) and manifests (``*-m<N>.avro``).
#: Iceberg never rewrites a file in place; table metadata JSON is not read through
#: here (the catalog answers it) and a commit reads no data file.
IMMUTABLE_SUFFIX = ".avro"


class CommitFileIO(FileIO):
    """A table's FileIO with each immutable metadata file read at most once, and the
    files it writes remembered (their length, their bytes) instead of asked for."""

    def __init__(self, inner: FileIO) -> None:
        super().__init__(inner.properties)
        self.inner = inner
        self.known: dict[str, bytes] = {}

    def new_input(self, location: str) -> InputFile:
        if location.endswith(IMMUTABLE_SUFFIX):
            return _OnceInput(location, self)
        return self.inner.new_input(location)

    def new_output(self, location: str) -> OutputFile:
        if location.endswith(IMMUTABLE_SUFFIX):
            return _KnownOutput(location, self)
        return self.inner.new_output(location)  # a data file (a rewrite): streamed

    def exists(self, location: str) -> bool:
        return location in self.known or self.inner.new_input(location).exists()

    def delete(self, location: str | InputFile | OutputFile) -> None:
        path = location if isinstance(location, str) else location.location
        self.known.pop(path, None)
        self.inner.delete(path)


def on_commit_io(table: Any) -> Any:
    """``table`` with its FileIO wrapped (once) for one commit."""
    if not isinstance(table.io, CommitFileIO):
        table.io = CommitFileIO(table.io)
    return table


class _OnceInput(InputFile):
    def __init__(self, location: str, owner: CommitFileIO) -> None:
        super().__init__(location)
        self.owner = owner

    def _bytes(self) -> bytes:
        data = self.owner.known.get(self.location)
        if data is None:
            with self.owner.inner.new_input(self.location).open(seekable=False) as stream:
                data = stream.read()
            self.owner.known[self.location] = data
        return data

    def __len__(self) -> int:
        return len(self._bytes())

    def exists(self) -> bool:
        return self.owner.exists(self.location)

    def open(self, seekable: bool = True) -> InputStream:
        return io.BytesIO(self._bytes())  # type: ignore[return-value]


class _KnownOutput(OutputFile):
    def __init__(self, location: str, owner: CommitFileIO) -> None:
        super().__init__(location)
        self.owner = owner

    def __len__(self) -> int:
        data = self.owner.known.get(self.location)
        return len(data) if data is not None else len(self.owner.inner.new_input(self.location))

    def exists(self) -> bool:
        return self.owner.exists(self.location)

    def to_input_file(self) -> InputFile:
        return _OnceInput(self.location, self.owner)

    def create(self, overwrite: bool = False) -> OutputStream:
        # No existence check first: the names pyiceberg writes are fresh UUIDs (as Java
        # Iceberg's S3FileIO, which does not check either).  The bytes are collected and
        # written in one stream on close, then remembered for the reads that follow.
        return _Collect(self)  # type: ignore[return-value]


class _Collect:
    """The bytes of one new file, written in one stream when it is closed cleanly (a
    stream left by an exception writes nothing: no half file)."""

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
        data = self.buffer.getvalue()
        owner = self.out.owner
        with owner.inner.new_output(self.out.location).create(overwrite=True) as stream:
            stream.write(data)
        owner.known[self.out.location] = data
        self.buffer.close()

    def __enter__(self) -> _Collect:
        return self

    def __exit__(self, exc_type: Any, *_: Any) -> None:
        if exc_type is None:
            self.close()
        else:
            self.buffer.close()
