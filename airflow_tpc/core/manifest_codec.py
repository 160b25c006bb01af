"""How a manifest's bytes become checked file entries, and back.

The file entry and its path rules, the canonical JSON digests are computed over, and
the decoding a commit pays for at 10,000 files: the digest checked on the file's own
bytes, entries made as the parser meets them, a repeated key refused, and the header
of a manifest validated before split off so its entries are decoded only if asked
for (:class:`SealedEntries`).  :mod:`airflow_tpc.core.manifest` holds the document.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

from ..errors import ManifestError

CHECKSUM_ALGOS = ("sha256", "md5", "etag")
_CHECKSUM_RE = re.compile(r"(sha256|md5|etag):[0-9A-Za-z\-]{1,128}")
def canonical_json(obj: Any) -> bytes:
    """The byte form digests are computed over (sorted keys, no whitespace)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def digest_of(obj: dict[str, Any]) -> str:
    body = {k: v for k, v in obj.items() if k != "digest"}
    return "sha256:" + hashlib.sha256(canonical_json(body)).hexdigest()


#: Paths every check of :func:`check_relative_path` accepts (relative, normalised, no
#: hidden part, backslash, NUL or scheme), matched in one C call: a commit checks
#: every file of its manifest and listing.  The checks below only say why not.
PLAIN_PATH_RE = re.compile(r"[^/\\\x00._][^/\\\x00]*(?:/[^/\\\x00._][^/\\\x00]*)*")
_ENTRY_KEYS = frozenset({"path", "size", "checksum", "rows"})


def check_relative_path(path: Any) -> str:
    """Refuse any path that could resolve outside staging or be hidden from readers."""
    if isinstance(path, str) and PLAIN_PATH_RE.fullmatch(path):
        return path
    if not isinstance(path, str) or not path:
        raise ManifestError(f"file path {path!r} is not a non-empty string")
    if "\\" in path or "\x00" in path or path.startswith("/") or "://" in path:
        raise ManifestError(f"file path {path!r} is absolute or not a plain relative path")
    for part in path.split("/"):
        if part in ("", ".", ".."):
            raise ManifestError(f"file path {path!r} escapes staging or is not normalised")
        if part.startswith((".", "_")):
            raise ManifestError(
                f"file path {path!r} has a hidden component ({part!r}); readers would skip it")
    return path


class FileEntry(NamedTuple):
    """One staged file: where it is (relative to staging), how big, its checksum.

    A named tuple: a manifest of 100,000 files holds 100,000 of them, and a commit
    parses one (a third of a frozen dataclass's memory, twice as fast to build)."""

    path: str
    size: int
    checksum: str
    rows: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "size": self.size, "checksum": self.checksum, "rows": self.rows}


def str_field(doc: dict[str, Any], key: str) -> str:
    value = doc[key]
    if not isinstance(value, str) or not value:
        raise TypeError(key)
    return value


def int_field(doc: dict[str, Any], key: str) -> int:
    value = doc[key]
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise TypeError(key)
    return value


#: The digest member as a canonical manifest spells it: right after ``created_at`` (keys
#: are sorted), so the body's canonical bytes are the file's bytes without it.
_DIGEST_MEMBER = b',"digest":"sha256:'


def _canonical_digest(data: bytes) -> str | None:
    """The digest a canonical manifest's bytes prove: its body's canonical form is the
    file's own bytes minus the ``"digest"`` member, so hashing those checks the digest
    without decoding or re-encoding the document (a commit's largest CPU cost at 10,000
    files).  None when the bytes are not in that form (another tool, an edit)."""
    start = data.find(_DIGEST_MEMBER)
    end = start + len(_DIGEST_MEMBER) + 64
    if start > 0 and data[end:end + 1] == b'"':
        view = memoryview(data)  # the body's bytes hashed in place, never copied
        sha = hashlib.sha256(view[:start])
        sha.update(view[end + 1:])
        claimed = "sha256:" + bytes(view[start + len(_DIGEST_MEMBER):end]).decode("latin-1")
        if "sha256:" + sha.hexdigest() == claimed:
            return claimed
    return None


def loads(data: bytes, where: str, hook: Any = None) -> Any:
    """JSON from a manifest's bytes (``hook``: :func:`_dict` unless given), or one
    :class:`ManifestError` saying why not."""
    try:
        return json.loads(data, object_pairs_hook=hook or _dict)
    except RepeatedKey as exc:
        raise ManifestError(f"{where} repeats the key {exc.args[0]!r} in one object; JSON "
                            "parsers disagree on which value counts") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise ManifestError(f"{where} is not valid JSON ({exc.__class__.__name__})") from None


def decode_canonical(data: bytes, where: str) -> tuple[dict[str, Any], str | None]:
    """Parse a manifest's bytes; also return its digest when the bytes prove it
    (:func:`_canonical_digest`).  Such a document is parsed with each well-formed file
    entry made a :class:`FileEntry` as the parser meets it (no dict per entry: a third
    of the memory at 100,000 files); any other is plain JSON, and the caller recomputes
    the digest the slow way."""
    claimed = _canonical_digest(data)
    if claimed is not None:
        doc = loads(data, where, _entry_or_dict)
        if isinstance(doc, dict) and doc.get("digest") == claimed:
            return doc, claimed
    return loads(data, where), None


#: What follows the digest member in a canonical manifest (keys sorted: ``created_at``,
#: ``digest``, ``files``), and what ends ``files`` (``fingerprints`` or ``format`` come
#: next; no entry holds a list, and a quote inside a path is escaped).
_FILES_OPEN, _FILES_CLOSE = b',"files":[', b'],"f'


def _find_files_close(data: bytes, start: int) -> int:
    """``data.find(_FILES_CLOSE, start)``, found by its first byte: a search for one
    byte runs at memory speed, one for four scans ~50x slower (20 ms of a commit of
    100,000 files), and a ``]`` inside a path only costs one more search."""
    pos = data.find(b"]", start)
    while pos >= 0 and not data.startswith(_FILES_CLOSE, pos):
        pos = data.find(b"]", pos + 1)
    return pos


def split_trusted(data: bytes, trusted: str) -> tuple[bytes, memoryview] | None:
    """A canonical manifest whose bytes prove the digest ``trusted``, as its header
    (``files`` emptied) and a view of its ``files`` array (not a copy: 15 MB at
    100,000 files, read only if someone asks for the entries); None otherwise."""
    if _canonical_digest(data) != trusted:
        return None
    start = data.find(_DIGEST_MEMBER) + len(_DIGEST_MEMBER) + 65
    if not data.startswith(_FILES_OPEN, start):
        return None
    first = start + len(_FILES_OPEN)
    close = _find_files_close(data, first - 1)
    if close < 0:
        return None
    return data[:first] + data[close:], memoryview(data)[first - 1:close + 1]


class SealedEntries(Sequence[FileEntry]):
    """The file entries of a manifest parsed with ``trusted`` (:meth:`Manifest.parse`):
    counted from its totals, decoded and checked as any manifest's the first time they
    are iterated or indexed (a :class:`ManifestError` then, as from a full parse)."""

    def __init__(self, data: memoryview, totals: dict[str, Any], where: str) -> None:
        self.totals, self._data, self._where = totals, data, where
        self._files: tuple[FileEntry, ...] | None = None

    def _decoded(self) -> tuple[FileEntry, ...]:
        if self._files is None:
            raw = loads(bytes(self._data), self._where, _entry_or_dict)
            self._files = checked_entries(entries_of(raw, self._where), self.totals, self._where)
        return self._files

    def __len__(self) -> int:
        return self.totals["files"]

    def __getitem__(self, index: Any) -> Any:
        return self._decoded()[index]

    def __iter__(self) -> Iterator[FileEntry]:
        return iter(self._decoded())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and tuple(self) == tuple(other)

    __hash__ = None  # type: ignore[assignment]


def checked_totals(totals: dict[str, Any], where: str) -> dict[str, Any]:
    """``totals`` of a manifest whose files are not decoded yet, checked for shape."""
    try:
        if totals.keys() != {"files", "bytes", "rows"} or totals["rows"] is not None \
                and int_field(totals, "rows") < 0:
            raise TypeError("totals")
        int_field(totals, "files")
        int_field(totals, "bytes")
    except TypeError:
        raise ManifestError(f"{where} has malformed totals {totals}") from None
    return totals


def checked_entries(entries: list[FileEntry], totals: dict[str, Any], where: str
             ) -> tuple[FileEntry, ...]:
    """The entries, refused if a path repeats or ``totals`` are not their sums."""
    if len({e.path for e in entries}) != len(entries):
        seen: set[str] = set()
        for e in entries:
            if e.path in seen:
                raise ManifestError(f"{where} lists {e.path!r} twice")
            seen.add(e.path)
    rows = None if not entries or any(e.rows is None for e in entries) else \
        sum(e.rows for e in entries)  # type: ignore[misc]
    expected = {"files": len(entries), "bytes": sum(e.size for e in entries), "rows": rows}
    if totals != expected:
        raise ManifestError(f"{where} totals {totals} do not match its files {expected}")
    return tuple(entries)


class RepeatedKey(ValueError):
    """A JSON object names a key twice: parsers disagree on which value counts (Python's
    keeps the last, others the first), so no such document has one meaning."""


def _entry_or_dict(pairs: list[tuple[str, Any]]) -> Any:
    """A JSON object that is a well-formed file entry, in canonical key order, as a
    :class:`FileEntry`; any other as a dict (a malformed entry is refused later, by
    :func:`_entry`, with its reason); :class:`RepeatedKey` if a key repeats."""
    if len(pairs) == 4 and pairs[0][0] == "checksum" and pairs[1][0] == "path" \
            and pairs[2][0] == "rows" and pairs[3][0] == "size":
        (_, checksum), (_, path), (_, rows), (_, size) = pairs
        if type(path) is str and _PLAIN(path) and type(size) is int and size >= 0 \
                and type(checksum) is str and _CHECKSUM_OK(checksum) \
                and (rows is None or (type(rows) is int and rows >= 0)):
            return FileEntry(path, size, checksum, rows)
        return dict(pairs)
    return _dict(pairs)


def _dict(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object as a dict; :class:`RepeatedKey` if a key repeats."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        raise RepeatedKey(next(k for i, (k, _) in enumerate(pairs)
                               if any(k == j for j, _ in pairs[:i])))
    return obj


def entries_of(raw_files: list[Any], where: str) -> list[FileEntry]:
    """The file entries, checked: entries the parser already made (well-formed, see
    :func:`_entry_or_dict`) as they are, any other through :func:`_entry`, which makes
    it or says what is wrong with it."""
    return [raw if type(raw) is FileEntry else _entry(_plain(raw), where) for raw in raw_files]


def _plain(raw: Any) -> Any:
    """A JSON value with any :class:`FileEntry` the parser made turned back into its
    object (a malformed entry may nest one; its message shows what was written)."""
    if type(raw) is FileEntry:
        return raw.to_dict()
    if isinstance(raw, dict):
        return {k: _plain(v) for k, v in raw.items()}
    if isinstance(raw, list):
        return [_plain(v) for v in raw]
    return raw


_PLAIN = PLAIN_PATH_RE.fullmatch
_CHECKSUM_OK = _CHECKSUM_RE.fullmatch


def _entry(raw: Any, where: str) -> FileEntry:
    if not isinstance(raw, dict) or not raw.keys() <= _ENTRY_KEYS:
        raise ManifestError(f"{where} has a malformed file entry {str(raw)[:80]!r}")
    try:
        path = check_relative_path(raw.get("path"))
    except ManifestError as exc:  # say which manifest: the path alone does not
        raise ManifestError(f"{where}: {exc}") from None
    size = raw.get("size")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise ManifestError(f"{where}: {path!r} has an invalid size {size!r}")
    checksum = raw.get("checksum")
    if not isinstance(checksum, str) or not _CHECKSUM_RE.fullmatch(checksum):
        raise ManifestError(f"{where}: {path!r} has an invalid checksum {checksum!r}")
    rows = raw.get("rows")
    if rows is not None and (not isinstance(rows, int) or isinstance(rows, bool) or rows < 0):
        raise ManifestError(f"{where}: {path!r} has an invalid row count {rows!r}")
    return FileEntry(path, size, checksum, rows)
