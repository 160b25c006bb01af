"""The durable ledger stored beside the data, and the layout of a target.

Each transaction (namespace, epoch, attempt) owns a folder of small JSON
records, each written at most once with put-if-absent::

    <target>/_tpc/sink.json                                namespace claim
    <target>/_tpc/ledger/epoch=<E>/attempt=<NNNNNN>/begin.json      OPEN, fencing number
    <target>/_tpc/ledger/epoch=<E>/attempt=<NNNNNN>/decision.json   the commit point
    <target>/_tpc/ledger/epoch=<E>/attempt=<NNNNNN>/published.json  promotion finished
    <target>/_tpc/ledger/epoch=<E>/attempt=<NNNNNN>/abandoned.json  roll-forward given up
    <target>/_tpc/staging/epoch=<E>/attempt=<NNNNNN>/...           the attempt's files
    <target>/epoch=<E>/_tpc_published.json                  what readers read

Which records exist is enough to know most of a transaction's state, so one
recursive listing of the ledger answers "what is unfinished" without reading
every record.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from .errors import CommitConflict, StorageError, TpcError
from .manifest import canonical_json
from .storage import Storage

TPC_DIR = "_tpc"
PUBLISHED_MARKER = "_tpc_published.json"
EPOCH_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_ATTEMPT_RE = re.compile(r"^attempt=(\d{6,})$")

BEGIN, DECISION, PUBLISHED, ABANDONED, SUPERSEDED = (
    "begin", "decision", "published", "abandoned", "superseded")


def check_epoch(epoch: Any) -> str:
    if not isinstance(epoch, str) or not EPOCH_RE.match(epoch):
        raise TpcError(f"invalid epoch {epoch!r}: use letters, digits, '.', '_' or '-' "
                       "(at most 128, e.g. '2026-11-20' or '42')")
    return epoch


def epoch_sort_key(epoch: str) -> tuple[int, int | str]:
    return (0, int(epoch)) if epoch.isdigit() else (1, epoch)


def attempt_name(attempt: int) -> str:
    return f"attempt={attempt:06d}"


@dataclass(frozen=True)
class Layout:
    """Where everything of one target lives in its store."""

    storage: Storage
    root: str
    staging_root: str = ""

    def __post_init__(self) -> None:
        if not self.staging_root:
            object.__setattr__(self, "staging_root", self.storage.join(self.root, TPC_DIR,
                                                                      "staging"))

    @property
    def sink_record(self) -> str:
        return self.storage.join(self.root, TPC_DIR, "sink.json")

    @property
    def ledger_root(self) -> str:
        return self.storage.join(self.root, TPC_DIR, "ledger")

    def record(self, epoch: str, attempt: int, kind: str) -> str:
        return self.storage.join(self.ledger_root, f"epoch={epoch}", attempt_name(attempt),
                                 f"{kind}.json")

    def staging(self, epoch: str, attempt: int) -> str:
        return self.storage.join(self.staging_root, f"epoch={epoch}", attempt_name(attempt))

    def remove_staging(self, epoch: str, attempt: int) -> None:
        """Delete an attempt's staging (idempotent) and its epoch folder once empty."""
        path = self.staging(epoch, attempt)
        self.storage.delete_prefix(path)
        self.storage.prune_empty_parent(path)

    def published_dir(self, epoch: str) -> str:
        return self.storage.join(self.root, f"epoch={epoch}")

    def marker(self, epoch: str) -> str:
        return self.storage.join(self.published_dir(epoch), PUBLISHED_MARKER)


@dataclass
class AttemptRecords:
    """Which ledger records one attempt has (from a listing), plus any read so far."""

    kinds: set[str] = field(default_factory=set)
    docs: dict[str, dict[str, Any]] = field(default_factory=dict)


class Ledger:
    """Reads and writes ledger records; every write is put-if-absent."""

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self.storage = layout.storage

    @staticmethod
    def encode(doc: dict[str, Any]) -> bytes:
        # Compact: a decision embeds the whole manifest (~190 B a file), and json's C
        # encoder only runs without ``indent`` (pretty-printing took ~40% of a commit).
        return canonical_json(doc)

    def read(self, epoch: str, attempt: int, kind: str) -> dict[str, Any] | None:
        path = self.layout.record(epoch, attempt, kind)
        return self._decode(path, self.storage.read_bytes(path))

    def _decode(self, path: str, data: bytes | None) -> dict[str, Any] | None:
        if data is None:
            return None
        try:
            doc = json.loads(data)
            if not isinstance(doc, dict):
                raise ValueError
        except ValueError:
            raise StorageError(f"ledger record {self.storage.uri(path)} is corrupt; it is never "
                               "rewritten by airflow-tpc, so it was changed by hand") from None
        return doc

    def create(self, epoch: str, attempt: int, kind: str, doc: dict[str, Any]) -> bool:
        """Write a record once.  Returns True if created, False if an identical one existed.

        A different existing record raises :class:`CommitConflict`: two writers
        decided differently and this one lost.
        """
        path = self.layout.record(epoch, attempt, kind)
        data = self.encode(doc)
        if self.storage.put_if_absent(path, data):
            return True
        existing = self.storage.read_bytes(path)
        if existing == data:  # our own retried request, or an identical decision
            return False
        raise CommitConflict(f"{kind} record of epoch {epoch} attempt {attempt} already exists "
                             "with different content")

    def create_or_get(self, epoch: str, attempt: int, kind: str,
                      doc: dict[str, Any]) -> tuple[bool, dict[str, Any]]:
        """Like :meth:`create` but returns the winner's record instead of raising."""
        path = self.layout.record(epoch, attempt, kind)
        data = self.encode(doc)
        if self.storage.put_if_absent(path, data):
            return True, doc
        existing = self._decode(path, self.storage.read_bytes(path))
        if existing is None:  # pragma: no cover - only if someone deletes ledger records
            raise StorageError(f"{self.storage.uri(path)} vanished after a conflicting write")
        return existing == doc, existing

    def scan(self, epoch: str | None = None) -> dict[str, dict[int, AttemptRecords]]:
        """One recursive listing: epoch -> attempt -> which records exist."""
        base = self.layout.ledger_root
        if epoch is not None:
            base = self.storage.join(base, f"epoch={epoch}")
        out: dict[str, dict[int, AttemptRecords]] = defaultdict(dict)
        for info in self.storage.list(base):
            rel = info.path[len(self.layout.ledger_root):].strip("/").split("/")
            if len(rel) != 3 or not rel[0].startswith("epoch=") or not rel[2].endswith(".json"):
                continue
            m = _ATTEMPT_RE.match(rel[1])
            if not m:
                continue
            ep = rel[0][len("epoch="):]
            rec = out[ep].setdefault(int(m.group(1)), AttemptRecords())
            rec.kinds.add(rel[2][: -len(".json")])
        return dict(out)

    def get(self, epoch: str, attempt: int, rec: AttemptRecords,
            kind: str) -> dict[str, Any] | None:
        """Read a record known from a scan (cached on ``rec``)."""
        if kind not in rec.kinds:
            return None
        if kind not in rec.docs:
            doc = self.read(epoch, attempt, kind)
            if doc is None:
                return None
            rec.docs[kind] = doc
        return rec.docs[kind]
