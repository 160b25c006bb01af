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
from collections.abc import Iterable
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

    @property
    def txn_id(self) -> str:
        return f"{self.namespace}/{self.epoch}/{self.attempt}"

    @property
    def total_files(self) -> int:
        return len(self.files)

    @cached_property  # a commit asks several times; the files never change
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    @cached_property
    def total_rows(self) -> int | None:
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
              table_stats: str | None = None) -> Manifest:
        entries = tuple(sorted(files, key=lambda f: f.path))
        m = cls(namespace, target, epoch, attempt, staging, entries, fingerprints=fingerprints,
                table_stats=table_stats)
        return cls(namespace, target, epoch, attempt, staging, entries, m.created_at,
                   digest_of(m.body()), fingerprints, table_stats)

    # -- parsing --------------------------------------------------------------
    @classmethod
    def parse(cls, data: bytes | str | dict[str, Any], *, where: str = "manifest") -> Manifest:
        """Parse and validate a manifest document (not yet against storage)."""
        verified = None
        if isinstance(data, dict):
            doc = data
        else:
            if len(data) > MAX_MANIFEST_BYTES:
                raise ManifestError(f"{where} is {len(data)} bytes, above the "
                                    f"{MAX_MANIFEST_BYTES} byte cap of a manifest")
            if isinstance(data, str):
                data = data.encode("utf-8", "surrogatepass")
            try:
                doc, verified = _decode_canonical(data)
            except (ValueError, UnicodeDecodeError) as exc:
                raise ManifestError(
                    f"{where} is not valid JSON ({exc.__class__.__name__})") from None
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
        entries = _entries(raw_files, where)
        if len({e.path for e in entries}) != len(entries):
            seen: set[str] = set()
            for e in entries:
                if e.path in seen:
                    raise ManifestError(f"{where} lists {e.path!r} twice")
                seen.add(e.path)
        fingerprints = doc.get("fingerprints")
        if fingerprints is not None and not (isinstance(fingerprints, str)
                                             and fingerprints.startswith("sha256:")):
            raise ManifestError(f"{where} has an invalid fingerprints digest")
        table_stats = doc.get("table_stats")
        if table_stats is not None and not (isinstance(table_stats, str)
                                            and table_stats.startswith("sha256:")):
            raise ManifestError(f"{where} has an invalid table_stats digest")
        m = cls(namespace, target, epoch, attempt, staging, tuple(entries), float(created_at),
                digest, fingerprints, table_stats)
        expected_totals = {"files": m.total_files, "bytes": m.total_bytes, "rows": m.total_rows}
        if totals != expected_totals:
            raise ManifestError(f"{where} totals {totals} do not match its files "
                                f"{expected_totals}")
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


def _decode_canonical(data: bytes) -> tuple[dict[str, Any], str | None]:
    """Parse a manifest's bytes; also return its digest when the bytes prove it.

    A manifest is written as canonical JSON, so its body's canonical form (what the
    digest is computed over) is the file's own bytes minus the ``"digest"`` member:
    hashing those checks the digest without re-encoding the whole document, which is
    a commit's largest CPU cost at 10,000 files.  Such a document is then parsed with
    each well-formed file entry made a :class:`FileEntry` as the parser meets it (no
    dict per entry: a third of the memory at 100,000 files).  When the bytes are not
    in that form (written by another tool, edited), the caller gets plain JSON and
    recomputes the digest the slow way.
    """
    start = data.find(_DIGEST_MEMBER)
    end = start + len(_DIGEST_MEMBER) + 64
    if start > 0 and data[end:end + 1] == b'"':
        view = memoryview(data)  # the body's bytes hashed in place, never copied
        sha = hashlib.sha256(view[:start])
        sha.update(view[end + 1:])
        claimed = "sha256:" + bytes(view[start + len(_DIGEST_MEMBER):end]).decode("latin-1")
        if "sha256:" + sha.hexdigest() == claimed:
            doc = json.loads(data, object_hook=_entry_or_dict)
            if isinstance(doc, dict) and doc.get("digest") == claimed:
                return doc, claimed
    return json.loads(data), None


def _entry_or_dict(obj: dict[str, Any]) -> Any:
    """A JSON object that is a well-formed file entry, as a :class:`FileEntry`; any other
    as it is (a malformed entry is refused later, by :func:`_entry`, with its reason)."""
    if len(obj) == 4 and "rows" in obj:
        path, size, checksum, rows = (obj.get("path"), obj.get("size"), obj.get("checksum"),
                                      obj["rows"])
        if type(path) is str and _PLAIN(path) and type(size) is int and size >= 0 \
                and type(checksum) is str and _CHECKSUM_OK(checksum) \
                and (rows is None or (type(rows) is int and rows >= 0)):
            return FileEntry(path, size, checksum, rows)
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
