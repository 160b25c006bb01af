"""The durable ledger stored beside the data, and the layout of a target.

Each transaction (namespace, epoch, attempt) owns a folder of small JSON
records, each written at most once with put-if-absent (docs/PROTOCOL.md §2-§3)::

    <target>/_tpc/sink.json                                          namespace claim
    <target>/_tpc/promote.lock                                       (local) promotion flock
    <target>/_tpc/ledger/epoch=<E>/attempt=<NNNNNN>/begin.json       OPEN, fencing number
    <target>/_tpc/ledger/epoch=<E>/attempt=<NNNNNN>/decision.json    the commit point
    <target>/_tpc/ledger/epoch=<E>/attempt=<NNNNNN>/published.json   promotion finished
    <target>/_tpc/ledger/epoch=<E>/attempt=<NNNNNN>/superseded.json  a higher commit won
    <target>/_tpc/ledger/epoch=<E>/attempt=<NNNNNN>/abandoned.json   roll-forward given up
    <target>/_tpc/ledger/epoch=<E>/attempt=<NNNNNN>/closed.json      an abort carried out
    <target>/_tpc/pending/epoch=<E>,attempt=<NNNNNN>                 decided, not finished
    <target>/_tpc/pending/index.json                                 the index is complete
    <parent>/_tpc_staging/<name>/epoch=<E>/attempt=<NNNNNN>/...     the attempt's files,
        .../_tpc_fingerprints.json, then .../_tpc_manifest.json      sealed at pre-commit
    <target>/epoch=<E>/_tpc_published.json                           what readers read

Staging lies *beside* the target (``<target>`` is ``<parent>/<name>``), on the same
store, so no recursive reader of the target (DuckDB's ``**/*.parquet``, pyarrow,
polars, a Hive external table) ever sees a staged or aborted file, and a local
promotion is still one directory exchange.  Where it lies is recorded in the
namespace claim (``staging_root``), so a target keeps the layout it was created
with: a claim without it is a target of the earlier layout, staged in
``<target>/_tpc/staging`` (still read and committed as it is).

The pending-index entries are the exception to "written once": hints written
with a plain put and removed with a delete (below, and PROTOCOL.md §5.8).

Which records exist is enough to know most of a transaction's state, so one
recursive listing of the ledger answers "what is unfinished" without reading
every record.  A commit need not even list the whole ledger: the *pending index*
(``_tpc/pending/``) holds an empty entry for every attempt that has a decision and
no finishing record, written before the decision and deleted after the finishing
record, so a commit lists that folder and the ledger of the epochs it names — its
cost does not grow with history.  The index is a hint kept by the ledger itself:
a stale entry costs one listing and is dropped; a missing ``index.json`` (a target
written before the index existed) means "list everything, then build it".
A record that is read becomes a typed record checked against the
path it was found at (:func:`airflow_tpc.core.records.parse_record`): a
``decision.json`` copied from another epoch, attempt or target is refused with
:class:`LedgerError`, never acted upon.

The paths of this layout are built by :class:`~airflow_tpc.core.layout.Layout`
(:mod:`airflow_tpc.core.layout`); this module reads and writes the records on them.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..errors import CommitConflict, LedgerError, StorageError
from ..storage import Storage
from ..storage.ahead import ahead_pool
from .layout import (
    ATTEMPT_DIR_RE,
    EPOCH_RE,
    PENDING_ENTRY_RE,
    PENDING_INDEX,
    PUBLISHED_MARKER,
    TPC_DIR,
    Layout,
    attempt_name,
    check_attempt,
    check_epoch,
    claim_path,
    epoch_sort_key,
    legacy_staging_root,
    staging_root_problem,
)
from .manifest import MAX_MANIFEST_BYTES, canonical_json
from .records import (
    ABANDONED,
    BEGIN,
    CLOSED,
    DECISION,
    FINISHED_KINDS,
    PUBLISHED,
    SUPERSEDED,
    VALIDATED,
    Record,
    needs_finishing,
    parse_record,
)

#: The record kinds and the layout's names are part of this module's interface too: the
#: layout moved to :mod:`airflow_tpc.core.layout`, and every earlier import of it still works.
__all__ = [
    "ABANDONED", "ATTEMPT_DIR_RE", "BEGIN", "CLOSED", "DECISION", "EPOCH_RE", "FINISHED_KINDS",
    "MAX_DECISION_BYTES", "MAX_RECORD_BYTES", "PENDING_ENTRY_RE", "PENDING_INDEX", "PUBLISHED",
    "PUBLISHED_MARKER", "SUPERSEDED", "TPC_DIR", "VALIDATED", "WRITER_FIELD", "AttemptRecords",
    "Layout", "Ledger", "Record", "attempt_name", "check_attempt", "check_epoch", "claim_path",
    "epoch_sort_key", "legacy_staging_root", "needs_finishing", "parse_record",
    "staging_root_problem", "with_writer",
]

log = logging.getLogger("airflow_tpc")
#: Records are a few hundred bytes (a version-2 commit decision names its manifest by
#: digest); only a version-1 decision embeds the manifest, hence MAX_DECISION_BYTES.
#: Larger records are refused before they are parsed.
MAX_RECORD_BYTES = 1024 * 1024
MAX_DECISION_BYTES = MAX_MANIFEST_BYTES + MAX_RECORD_BYTES


@dataclass
class AttemptRecords:
    """Which ledger records one attempt has (from a listing), plus any read so far."""

    kinds: set[str] = field(default_factory=set)
    docs: dict[str, Record] = field(default_factory=dict)


#: The field every ledger record carries with its writing call's id (32 hex digits).
WRITER_FIELD = "writer"


def with_writer(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` with a fresh per-call writer id.  The storage SDK's own retries of that
    one call resend the same bytes, so finding them after a lost answer proves the write
    was ours; any other caller's record differs in this field even when every other
    field (the clock tick included) is equal.  Readers ignore it."""
    return {**doc, WRITER_FIELD: uuid.uuid4().hex}


class Ledger:
    """Reads and writes ledger records (every write put-if-absent, every read checked),
    and keeps the pending index beside them."""

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self.storage = layout.storage
        self.target = self.storage.uri(layout.root)

    @staticmethod
    def encode(doc: dict[str, Any]) -> bytes:
        # Compact and canonical (sorted keys, no whitespace): concurrent writers of one
        # record produce the same bytes, and json's C encoder only runs without ``indent``.
        return canonical_json(doc)

    def read(self, epoch: str, attempt: int, kind: str) -> Record | None:
        """The typed record ``kind`` of (epoch, attempt), checked against its path."""
        path = self.layout.record(epoch, attempt, kind)
        doc = self.decode(path, self.storage.read_bytes(path),
                          MAX_DECISION_BYTES if kind == DECISION else MAX_RECORD_BYTES)
        if doc is None:
            return None
        return self._parse(epoch, attempt, kind, doc)

    def _parse(self, epoch: str, attempt: int, kind: str, doc: dict[str, Any]) -> Record:
        return parse_record(kind, doc, epoch=epoch, attempt=attempt, target=self.target,
                            staging_uri=self.storage.uri(self.layout.staging(epoch, attempt)),
                            where=self.storage.uri(self.layout.record(epoch, attempt, kind)))

    def decode(self, path: str, data: bytes | None,
               limit: int = MAX_RECORD_BYTES) -> dict[str, Any] | None:
        """Parse one record's bytes: a JSON object under ``limit`` bytes, or LedgerError."""
        return self.decode_at(self.storage, path, data, limit)

    @staticmethod
    def decode_at(storage: Storage, path: str, data: bytes | None,
                  limit: int = MAX_RECORD_BYTES) -> dict[str, Any] | None:
        """:meth:`decode` without a ledger (the claim is read before the layout is known)."""
        if data is None:
            return None
        if len(data) > limit:
            raise LedgerError(f"ledger record {storage.uri(path)} is {len(data)} bytes, "
                              f"above the {limit} byte cap of its kind; it was not written by "
                              "airflow-tpc")
        try:
            doc = json.loads(data)
            if not isinstance(doc, dict):
                raise ValueError
        except ValueError:
            raise LedgerError(f"ledger record {storage.uri(path)} is corrupt (not a JSON "
                              "object); it is never rewritten by airflow-tpc, so it was changed "
                              "by hand or damaged") from None
        return doc

    def create(self, epoch: str, attempt: int, kind: str, doc: dict[str, Any]) -> bool:
        """Write a record once; True when this call wrote it.

        Finding our own bytes (the SDK retried a request whose answer was lost) is our
        write; any other existing record raises :class:`CommitConflict`: another writer
        got there first (records carry a per-call writer id, see :func:`with_writer`).
        """
        path = self.layout.record(epoch, attempt, kind)
        data = self.encode(with_writer(doc))
        self._before_write(epoch, attempt, kind)
        if self.storage.put_if_absent(path, data):
            self._after_write(epoch, attempt, kind)
            return True
        existing = self.storage.read_bytes(path)
        if existing == data:  # our own request took effect; its answer was lost
            self._after_write(epoch, attempt, kind)
            return True
        raise CommitConflict(f"{kind} record of epoch {epoch} attempt {attempt} already exists "
                             "with different content")

    def create_or_get(self, epoch: str, attempt: int, kind: str,
                      doc: dict[str, Any]) -> tuple[bool, Record]:
        """Write a record once; returns (True, it) or (False, the record already there).

        An existing record byte-identical to ours counts as created by this call: our
        own request took effect and its answer was lost, so the SDK's retry found it.
        That is a proof only because every call writes a fresh ``writer`` id into its
        record (:func:`with_writer`): two callers writing the same decision in the same
        clock tick no longer produce the same bytes, so exactly one of them is told
        "created".
        """
        path = self.layout.record(epoch, attempt, kind)
        doc = with_writer(doc)
        data = self.encode(doc)
        self._before_write(epoch, attempt, kind)
        if self.storage.put_if_absent(path, data):
            self._after_write(epoch, attempt, kind)
            return True, self._parse(epoch, attempt, kind, doc)
        raw = self.storage.read_bytes(path)
        if raw is None:  # only if someone deletes ledger records
            raise LedgerError(f"{self.storage.uri(path)} vanished after a conflicting write")
        existing = self._parse(epoch, attempt, kind, self.decode(
            path, raw, MAX_DECISION_BYTES if kind == DECISION else MAX_RECORD_BYTES))
        self._after_write(epoch, attempt, kind)  # finished by someone else: just as good
        return raw == data, existing

    # -- the pending index ----------------------------------------------------
    def _before_write(self, epoch: str, attempt: int, kind: str) -> None:
        """A decision is listed in the index *before* it exists, so no decided attempt
        is ever missing from it (a crash leaves an entry without a decision: harmless)."""
        if kind == DECISION:
            self.mark_pending(epoch, attempt)

    def _after_write(self, epoch: str, attempt: int, kind: str) -> None:
        """A finishing record takes the attempt out of the index, only once it exists."""
        if kind in FINISHED_KINDS:
            self.unmark_pending(epoch, attempt)

    def mark_pending(self, epoch: str, attempt: int) -> None:
        self.storage.put(self.layout.pending_entry(epoch, attempt), b"")

    def unmark_pending(self, epoch: str, attempt: int) -> None:
        """Drop an entry; best effort.  It runs after the finishing record that settles
        the attempt (a commit may have published already), and a stale entry only costs
        the next commit one listing before it drops it again."""
        try:
            self.storage.delete_files([self.layout.pending_entry(epoch, attempt)])
        except StorageError as exc:
            log.warning("pending-index entry of %s/%d not removed yet (%s); the next commit "
                        "or recover drops it", epoch, attempt, exc)

    def pending(self) -> dict[str, set[int]] | None:
        """One listing of the pending index: epoch -> attempts that may need finishing.

        None when the index was never completed (``index.json`` missing): the target
        was written before it existed, and only a full :meth:`scan` is complete.
        Names airflow-tpc never writes are ignored.
        """
        out: dict[str, set[int]] = defaultdict(set)
        complete = False
        for info in self.storage.list(self.layout.pending_root):
            name = info.path.rstrip("/").rsplit("/", 1)[-1]
            if name == PENDING_INDEX:
                complete = True
                continue
            m = PENDING_ENTRY_RE.fullmatch(name)
            if m and EPOCH_RE.fullmatch(m.group(1)) and int(m.group(2)) >= 1:
                out[m.group(1)].add(int(m.group(2)))
        return dict(out) if complete else None

    def pending_soon(self) -> Callable[[], dict[str, set[int]] | None]:
        """:meth:`pending`, listed from now on: in the background on a store with
        latency (one that reads ahead, :mod:`airflow_tpc.storage.ahead`), else when
        asked.  The answer is the index as it stood at some moment between this call
        and the call of what it returns (which raises what the listing raised)."""
        if getattr(self.storage, "read_now", None) is None:
            return self.pending
        return ahead_pool().submit(self.pending).result

    def sync_pending(self, scan: dict[str, dict[int, AttemptRecords]],
                     listed: dict[str, set[int]] | None,
                     skip: set[str] = frozenset()) -> None:  # type: ignore[assignment]
        """Make the index agree with a full ``scan`` and mark it complete.

        Adds decided, unfinished attempts (a target written before the index, or
        by an older writer); drops entries of finished attempts and of attempts the
        ledger does not hold even in a fresh listing of their epoch (entries are
        written after ``begin.json``, so those were never a live attempt's).  Run
        after a full scan: by recover, and by the first commit on a target without a
        complete index.  Epochs in ``skip`` (damaged records: left exactly as they
        are) are not touched.
        """
        listed = {e: a for e, a in (listed or {}).items() if e not in skip}
        for epoch, attempts in scan.items():
            if epoch in skip:
                continue
            for attempt, rec in attempts.items():
                if needs_finishing(rec.kinds) and attempt not in listed.get(epoch, ()):
                    self.mark_pending(epoch, attempt)
        for epoch, attempts in listed.items():
            known = scan.get(epoch, {})
            if any(a not in known for a in attempts):
                # Begun after ``scan`` was listed?  An entry is written after its
                # ``begin.json``, so a fresh listing of the epoch tells.
                known = self.scan(epoch).get(epoch, {})
            for attempt in attempts:
                rec = known.get(attempt)
                if rec is None or rec.kinds & FINISHED_KINDS:
                    self.unmark_pending(epoch, attempt)
        self.storage.put_if_absent(
            self.storage.join(self.layout.pending_root, PENDING_INDEX),
            self.encode({"format": "airflow-tpc-pending-index", "version": 1}))

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
            m = ATTEMPT_DIR_RE.fullmatch(rel[1])
            if not m:
                continue
            ep = rel[0][len("epoch="):]
            if not EPOCH_RE.fullmatch(ep) or int(m.group(1)) < 1:
                continue  # never written by airflow-tpc: not a transaction to act on
            rec = out[ep].setdefault(int(m.group(1)), AttemptRecords())
            rec.kinds.add(rel[2][: -len(".json")])
        return dict(out)

    def get(self, epoch: str, attempt: int, rec: AttemptRecords, kind: str) -> Record | None:
        """Read a record known from a scan (cached on ``rec``)."""
        if kind not in rec.kinds:
            return None
        if kind not in rec.docs:
            doc = self.read(epoch, attempt, kind)
            if doc is None:
                return None
            rec.docs[kind] = doc
        return rec.docs[kind]
