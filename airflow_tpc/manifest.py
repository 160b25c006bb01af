"""The pre-commit manifest: what one attempt staged, sealed with its own digest.

A manifest is the batch equivalent of Flink's ``preCommit()``: once it is written
(last, after every data file), the attempt never writes again, and the manifest
says exactly which bytes the commit will publish.  It is validated twice — as a
document (:meth:`Manifest.parse`) and against storage
(:func:`verify_against_storage`) — and any doubt is a :class:`ManifestError`.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, NamedTuple

from .errors import ManifestError

FORMAT = "airflow-tpc-manifest"
VERSION = 1
MANIFEST_NAME = "_tpc_manifest.json"
CHECKSUM_ALGOS = ("sha256", "md5", "etag")
_CHECKSUM_RE = re.compile(r"(sha256|md5|etag):[0-9A-Za-z\-]{1,128}")
#: The largest manifest airflow-tpc writes or reads: about 300,000 files at the
#: ~200 bytes an entry takes.  A larger document is refused before it is parsed
#: (parsing and checking a 100 MB manifest stalls a commit for minutes); an epoch
#: with more files should be written as fewer, larger files.
MAX_MANIFEST_BYTES = 64 * 1024 * 1024


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


@dataclass(frozen=True)
class Manifest:
    """A sealed, versioned list of an attempt's staged files."""

    namespace: str
    target: str
    epoch: str
    attempt: int
    staging: str
    files: tuple[FileEntry, ...]
    created_at: float = field(default_factory=time.time)
    digest: str = ""
    #: sha256 of the ``_tpc_fingerprints.json`` sealed beside it (local stores), or None.
    fingerprints: str | None = None
    #: sha256 of the ``_tpc_table_stats.json`` a table target seals beside it, or None.
    table_stats: str | None = None
    #: The store's status digest of staging as sealed (:meth:`Storage.status_digest`),
    #: or None: a committer finding the same digest need not check file by file.
    listing: str | None = None
    #: The folders below staging as this process's verification walked them (not part
    #: of the document), so promotion need not walk staging again; None when unknown.
    staging_folders: tuple[str, ...] | None = field(default=None, compare=False, repr=False)

    @property
    def txn_id(self) -> str:
        return f"{self.namespace}/{self.epoch}/{self.attempt}"

    @property
    def total_files(self) -> int:
        return len(self.files)

    @cached_property  # a commit asks several times; the files never change
    def total_bytes(self) -> int:
        if isinstance(self.files, SealedEntries):
            return self.files.totals["bytes"]
        return sum(f.size for f in self.files)

    @cached_property
    def total_rows(self) -> int | None:
        if isinstance(self.files, SealedEntries):
            return self.files.totals["rows"]
        if not self.files or any(f.rows is None for f in self.files):
            return None
        return sum(f.rows for f in self.files)  # type: ignore[misc]

    def body(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "version": VERSION,
            "txn": {"namespace": self.namespace, "target": self.target,
                    "epoch": self.epoch, "attempt": self.attempt},
            "txn_id": self.txn_id,
            "staging": self.staging,
            "created_at": round(self.created_at, 6),
            "files": [f.to_dict() for f in self.files],
            "totals": {"files": self.total_files, "bytes": self.total_bytes,
                       "rows": self.total_rows},
            **({"fingerprints": self.fingerprints} if self.fingerprints else {}),
            **({"table_stats": self.table_stats} if self.table_stats else {}),
            **({"listing": self.listing} if self.listing else {}),
        }

    def to_dict(self) -> dict[str, Any]:
        body = self.body()
        body["digest"] = digest_of(body)
        return body

    def to_json_bytes(self) -> bytes:
        """The manifest file's bytes: compact JSON (the digest never depends on layout)."""
        return canonical_json(self.to_dict())

    @classmethod
    def build(cls, *, namespace: str, target: str, epoch: str, attempt: int, staging: str,
              files: Iterable[FileEntry], fingerprints: str | None = None,
              table_stats: str | None = None, listing: str | None = None) -> Manifest:
        entries = tuple(sorted(files, key=lambda f: f.path))
        m = cls(namespace, target, epoch, attempt, staging, entries, fingerprints=fingerprints,
                table_stats=table_stats, listing=listing)
        return cls(namespace, target, epoch, attempt, staging, entries, m.created_at,
                   digest_of(m.body()), fingerprints, table_stats, listing)

    # -- parsing --------------------------------------------------------------
    @classmethod
    def parse(cls, data: bytes | str | dict[str, Any], *, where: str = "manifest",
              trusted: str | None = None) -> Manifest:
        """Parse and validate a manifest document (not yet against storage).

        ``trusted``: the digest of a manifest the caller validated in full before (the
        sensor's pointer a commit holds).  When ``data`` is that canonical document, only
        its header is decoded here; the file entries are decoded, and checked as always,
        when first asked for — a commit whose staging is as sealed never asks.
        """
        verified = lazy = None
        if isinstance(data, dict):
            doc = data
        else:
            if len(data) > MAX_MANIFEST_BYTES:
                raise ManifestError(f"{where} is {len(data)} bytes, above the "
                                    f"{MAX_MANIFEST_BYTES} byte cap of a manifest")
            if isinstance(data, str):
                data = data.encode("utf-8", "surrogatepass")
            if trusted and (split := _split_trusted(data, trusted)) is not None:
                doc, verified, lazy = _loads(split[0], where), trusted, split[1]
            else:
                doc, verified = _decode_canonical(data, where)
        if not isinstance(doc, dict):
            raise ManifestError(f"{where} is not a JSON object")
        if doc.get("format") != FORMAT:
            raise ManifestError(f"{where} is not an airflow-tpc manifest (format "
                                f"{doc.get('format')!r})")
        version = doc.get("version")
        if version != VERSION:
            raise ManifestError(f"{where} has unknown version {version!r}; this airflow-tpc "
                                f"reads version {VERSION}")
        digest = doc.get("digest")
        if not isinstance(digest, str) or (digest != verified and digest != digest_of(doc)):
            raise ManifestError(f"{where} digest does not match its content (tampered or "
                                "truncated)")
        try:
            txn = doc["txn"]
            namespace, target, epoch = (_str(txn, k) for k in ("namespace", "target", "epoch"))
            attempt = _int(txn, "attempt")
            staging = _str(doc, "staging")
            created_at = doc["created_at"]
            raw_files = doc["files"]
            totals = doc["totals"]
            if not isinstance(raw_files, list) or not isinstance(totals, dict):
                raise TypeError("files/totals")
            if not isinstance(created_at, (int, float)) or isinstance(created_at, bool):
                raise TypeError("created_at")
        except (KeyError, TypeError) as exc:
            raise ManifestError(f"{where} is missing or mistypes a required field "
                                f"({exc.args[0] if exc.args else exc})") from None
        sidecars = [doc.get(k) for k in ("fingerprints", "table_stats", "listing")]
        for name, value in zip(("fingerprints", "table_stats", "listing"), sidecars, strict=True):
            if value is not None and not (isinstance(value, str) and value.startswith("sha256:")):
                raise ManifestError(f"{where} has an invalid {name} digest")
        files: Sequence[FileEntry] = (
            SealedEntries(lazy, _totals(totals, where), where) if lazy is not None
            else _checked(_entries(raw_files, where), totals, where))
        m = cls(namespace, target, epoch, attempt, staging, files,  # type: ignore[arg-type]
                float(created_at), digest, *sidecars)
        if doc.get("txn_id") != m.txn_id:
            raise ManifestError(f"{where} txn_id {doc.get('txn_id')!r} does not match its "
                                "transaction")
        return m

    def check_transaction(self, *, namespace: str, target: str, epoch: str, attempt: int,
                          staging: str) -> None:
        """Refuse a manifest that belongs to another transaction or staging prefix."""
        for name, mine, theirs in (("namespace", self.namespace, namespace),
                                   ("target", self.target, target),
                                   ("epoch", self.epoch, epoch),
                                   ("attempt", self.attempt, attempt),
                                   ("staging", self.staging, staging)):
            if mine != theirs:
                raise ManifestError(
                    f"manifest is for {name} {mine!r} but the transaction has {theirs!r}")


@dataclass(frozen=True)
class ManifestSummary:
    """What a commit decision records of its manifest: digest and totals.

    Attribute names match :class:`Manifest`, so a caller that needs only these
    (an Asset event, an XCom pointer) takes either.
    """

    txn_id: str
    digest: str
    total_files: int
    total_bytes: int
    total_rows: int | None

    @classmethod
    def of(cls, decision: Any) -> ManifestSummary:
        t = decision.totals
        return cls(decision.txn_id, decision.manifest_digest, t.files, t.bytes, t.rows)


def _str(doc: dict[str, Any], key: str) -> str:
    value = doc[key]
    if not isinstance(value, str) or not value:
        raise TypeError(key)
    return value


def _int(doc: dict[str, Any], key: str) -> int:
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


def _loads(data: bytes, where: str, hook: Any = None) -> Any:
    """JSON from a manifest's bytes (``hook``: :func:`_dict` unless given), or one
    :class:`ManifestError` saying why not."""
    try:
        return json.loads(data, object_pairs_hook=hook or _dict)
    except RepeatedKey as exc:
        raise ManifestError(f"{where} repeats the key {exc.args[0]!r} in one object; JSON "
                            "parsers disagree on which value counts") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise ManifestError(f"{where} is not valid JSON ({exc.__class__.__name__})") from None


def _decode_canonical(data: bytes, where: str) -> tuple[dict[str, Any], str | None]:
    """Parse a manifest's bytes; also return its digest when the bytes prove it
    (:func:`_canonical_digest`).  Such a document is parsed with each well-formed file
    entry made a :class:`FileEntry` as the parser meets it (no dict per entry: a third
    of the memory at 100,000 files); any other is plain JSON, and the caller recomputes
    the digest the slow way."""
    claimed = _canonical_digest(data)
    if claimed is not None:
        doc = _loads(data, where, _entry_or_dict)
        if isinstance(doc, dict) and doc.get("digest") == claimed:
            return doc, claimed
    return _loads(data, where), None


#: What follows the digest member in a canonical manifest (keys sorted: ``created_at``,
#: ``digest``, ``files``), and what ends ``files`` (``fingerprints`` or ``format`` come
#: next; no entry holds a list, and a quote inside a path is escaped).
_FILES_OPEN, _FILES_CLOSE = b',"files":[', b'],"f'


def _split_trusted(data: bytes, trusted: str) -> tuple[bytes, bytes] | None:
    """A canonical manifest whose bytes prove the digest ``trusted``, as its header
    (``files`` emptied) and the bytes of its ``files`` array; None otherwise."""
    if _canonical_digest(data) != trusted:
        return None
    start = data.find(_DIGEST_MEMBER) + len(_DIGEST_MEMBER) + 65
    if not data.startswith(_FILES_OPEN, start):
        return None
    first = start + len(_FILES_OPEN)
    close = data.find(_FILES_CLOSE, first - 1)
    if close < 0:
        return None
    return data[:first] + data[close:], data[first - 1:close + 1]


class SealedEntries(Sequence[FileEntry]):
    """The file entries of a manifest parsed with ``trusted`` (:meth:`Manifest.parse`):
    counted from its totals, decoded and checked as any manifest's the first time they
    are iterated or indexed (a :class:`ManifestError` then, as from a full parse)."""

    def __init__(self, data: bytes, totals: dict[str, Any], where: str) -> None:
        self.totals, self._data, self._where = totals, data, where
        self._files: tuple[FileEntry, ...] | None = None

    def _decoded(self) -> tuple[FileEntry, ...]:
        if self._files is None:
            raw = _loads(self._data, self._where, _entry_or_dict)
            self._files = _checked(_entries(raw, self._where), self.totals, self._where)
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


def _totals(totals: dict[str, Any], where: str) -> dict[str, Any]:
    """``totals`` of a manifest whose files are not decoded yet, checked for shape."""
    try:
        if totals.keys() != {"files", "bytes", "rows"} or totals["rows"] is not None \
                and _int(totals, "rows") < 0:
            raise TypeError("totals")
        _int(totals, "files")
        _int(totals, "bytes")
    except TypeError:
        raise ManifestError(f"{where} has malformed totals {totals}") from None
    return totals


def _checked(entries: list[FileEntry], totals: dict[str, Any], where: str
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


def _entries(raw_files: list[Any], where: str) -> list[FileEntry]:
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
    path = check_relative_path(raw.get("path"))
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
