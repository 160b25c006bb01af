"""The pre-commit manifest: what one attempt staged, sealed with its own digest.

A manifest is the batch equivalent of Flink's ``preCommit()``: once it is written
(last, after every data file), the attempt never writes again, and the manifest
says exactly which bytes the commit will publish.  It is validated twice — as a
document (:meth:`Manifest.parse`) and against storage
(:func:`verify_against_storage`) — and any doubt is a :class:`ManifestError`.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from ..errors import ManifestError
from .layout import AttemptId
from .manifest_codec import (
    CHECKSUM_ALGOS,
    PLAIN_PATH_RE,
    FileEntry,
    RepeatedKey,
    SealedEntries,
    canonical_json,
    check_relative_path,
    checked_entries,
    checked_totals,
    decode_canonical,
    digest_of,
    entries_of,
    int_field,
    loads,
    split_trusted,
    str_field,
)

#: What the document's users import from here (the codec's names included).
__all__ = ["CHECKSUM_ALGOS", "FORMAT", "MANIFEST_NAME", "MAX_MANIFEST_BYTES", "PLAIN_PATH_RE",
           "VERSION", "FileEntry", "Manifest", "ManifestSummary", "RepeatedKey",
           "SealedEntries", "canonical_json", "check_relative_path", "digest_of"]

FORMAT = "airflow-tpc-manifest"
VERSION = 1
MANIFEST_NAME = "_tpc_manifest.json"
#: The largest manifest airflow-tpc writes or reads: about 300,000 files at the
#: ~200 bytes an entry takes.  A larger document is refused before it is parsed
#: (parsing and checking a 100 MB manifest stalls a commit for minutes); an epoch
#: with more files should be written as fewer, larger files.
MAX_MANIFEST_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class Manifest(AttemptId):
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
            if trusted and (split := split_trusted(data, trusted)) is not None:
                doc, verified, lazy = loads(split[0], where), trusted, split[1]
            else:
                doc, verified = decode_canonical(data, where)
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
            namespace, target, epoch = (str_field(txn, k) for k in ("namespace", "target", "epoch"))
            attempt = int_field(txn, "attempt")
            staging = str_field(doc, "staging")
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
            SealedEntries(lazy, checked_totals(totals, where), where) if lazy is not None
            else checked_entries(entries_of(raw_files, where), totals, where))
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
