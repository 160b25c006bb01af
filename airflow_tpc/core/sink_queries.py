"""The read-only queries of a sink's target: nothing here writes.

What an operator, a sensor, the CLI or a reader asks: a transaction by its number,
an attempt's state (:meth:`SinkQueries.poll`, one listing), what it sealed, every
transaction of the target (:meth:`SinkQueries.describe`) and the read-committed
view (:meth:`SinkQueries.committed_files`).  Decisions are read the same checked way
the protocol reads them (:class:`~airflow_tpc.core.sink_finish.SinkFinish`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ..errors import InvalidState, LedgerError, ManifestError, NamespaceConflict
from . import promote as _promote
from .group_orphans import LostGroupAttempt, lost_group_attempt
from .ledger import AttemptRecords, check_attempt, check_epoch, epoch_sort_key
from .manifest import MANIFEST_NAME, Manifest, ManifestSummary
from .records import (
    BEGIN,
    DECISION,
    PUBLISHED,
    SUPERSEDED,
    VALIDATED,
    AbortDecision,
    Begin,
    CommitDecision,
    Totals,
    derive_state,
)
from .sink_finish import SinkFinish
from .transaction import AttemptStatus, Transaction, TxnInfo, TxnState


class SinkQueries(SinkFinish):
    """Questions about the target's transactions and published epochs."""

    # ----------------------------------------------------------- transactions
    def transaction(self, epoch: str, attempt: int | str) -> Transaction:
        """Load a transaction from its begin record."""
        check_epoch(epoch)
        attempt = check_attempt(attempt)
        begin = self.ledger.read(epoch, attempt, BEGIN)
        if not isinstance(begin, Begin):
            raise InvalidState(f"{self.target}: no transaction for epoch {epoch} attempt {attempt}")
        txn = begin.transaction()
        if txn.namespace != self.namespace and not self.config.allow_foreign_namespace:
            raise NamespaceConflict(f"{txn.txn_id} belongs to namespace {txn.namespace!r}, "
                                    f"not {self.namespace!r}")
        return txn

    def latest_transaction(self, epoch: str) -> Transaction | None:
        attempts = self.ledger.scan(check_epoch(epoch)).get(epoch, {})
        return self.transaction(epoch, max(attempts)) if attempts else None

    # --------------------------------------------------------------- attempts
    def manifest_uri(self, txn: Transaction) -> str:
        return self.storage.uri(self.storage.join(self.layout.sealed(txn.epoch, txn.attempt),
                                                  MANIFEST_NAME))

    def read_manifest(self, txn: Transaction,
                      trusted: str | Callable[[], str | None] | None = None) -> Manifest | None:
        """The attempt's pre-commit manifest, validated; None if not pre-committed yet.
        ``trusted``: the digest of it a full validation accepted (:meth:`Manifest.parse`,
        PROTOCOL §3.4.11), or a function answering it once the bytes are read."""
        seal = self.layout.sealed(txn.epoch, txn.attempt)
        data = self.storage.read_bytes(self.storage.join(seal, MANIFEST_NAME))
        if data is None:
            return None
        if callable(trusted):
            trusted = trusted()
        manifest = Manifest.parse(data, where=f"manifest of {txn.txn_id}", trusted=trusted)
        manifest.check_transaction(namespace=txn.namespace, target=txn.target, epoch=txn.epoch,
                                   attempt=txn.attempt, staging=txn.staging_uri)
        return manifest

    def sealed(self, txn: Transaction) -> Manifest | ManifestSummary | None:
        """What the attempt sealed: its manifest while it is staged, else what its commit
        decision records of it (digest and totals); None if it was never pre-committed."""
        manifest = self.read_manifest(txn)
        if manifest is not None:
            return manifest
        decision = self.ledger.read(txn.epoch, txn.attempt, DECISION)
        return ManifestSummary.of(decision) if isinstance(decision, CommitDecision) else None

    def poll(self, txn: Transaction) -> AttemptStatus:
        """The cheap question a waiting sensor asks on every poke: one listing of the
        epoch's ledger, the attempt's decision if it has one, else its manifest.
        (:meth:`describe` lists and reads every attempt's staging and records.)"""
        attempts = self.ledger.scan(txn.epoch).get(txn.epoch, {})
        rec = attempts.get(txn.attempt, AttemptRecords())
        decision = self._decision(txn.epoch, txn.attempt, rec)
        manifest = self.read_manifest(txn) if decision is None else None
        return AttemptStatus(
            state=derive_state(rec.kinds, decision, sealed=manifest is not None),
            highest_attempt=max(attempts, default=txn.attempt),
            reason=decision.reason if isinstance(decision, AbortDecision) else None,
            manifest=manifest, validated=VALIDATED in rec.kinds)

    def is_published(self, txn: Transaction) -> bool:
        """Whether the attempt's promotion finished (``published.json``): one listing of
        the epoch's ledger.  The commit task asks it to know if an Asset event is owed."""
        rec = self.ledger.scan(txn.epoch).get(txn.epoch, {}).get(txn.attempt)
        return rec is not None and PUBLISHED in rec.kinds

    # ----------------------------------------------------------------- target
    def describe(self, epoch: str | None = None, *, now: float | None = None) -> list[TxnInfo]:
        """Every transaction of the target (or of one epoch), oldest epoch first."""
        now = time.time() if now is None else now
        scan = self.ledger.scan(check_epoch(epoch) if epoch is not None else None)
        out = []
        for ep in sorted(scan, key=epoch_sort_key):
            attempts = scan[ep]
            won = self._winner(ep, attempts)
            for attempt in sorted(attempts):
                out.append(self._info(ep, attempt, attempts[attempt], won, now))
        return out

    def _info(self, epoch: str, attempt: int, rec: AttemptRecords,
              won: tuple[int, CommitDecision] | None, now: float) -> TxnInfo:
        begin = self.ledger.get(epoch, attempt, rec, BEGIN)
        decision = self._decision(epoch, attempt, rec)
        staging = self.layout.staging(epoch, attempt)
        staged = self.storage.list(staging)
        raw = None
        if decision is None:
            raw = self.storage.read_bytes(self.storage.join(self.layout.sealed(epoch, attempt),
                                                            MANIFEST_NAME))
        state = derive_state(rec.kinds, decision, sealed=raw is not None)
        totals: Totals | None = None
        if isinstance(decision, CommitDecision):
            totals = decision.totals
        elif raw is not None:
            try:
                m = Manifest.parse(raw)
                totals = Totals(m.total_files, m.total_bytes, m.total_rows)
            except ManifestError:
                totals = None
        started = begin.started_at if isinstance(begin, Begin) else None
        abort = decision if isinstance(decision, AbortDecision) else None
        return TxnInfo(
            epoch=epoch, attempt=attempt, txn_id=self._recorded_txn_id(epoch, attempt, begin,
                                                                       decision),
            state=state, published=PUBLISHED in rec.kinds,
            superseded=state is TxnState.COMMITTED and (
                SUPERSEDED in rec.kinds or (won is not None and won[0] > attempt)),
            files=totals.files if totals else None, bytes=totals.bytes if totals else None,
            rows=totals.rows if totals else None,
            started_at=started, age_s=(now - started) if started is not None else None,
            decided_at=decision.decided_at if decision is not None else None,
            reason=abort.reason if abort else None,
            staging_uri=self.storage.uri(staging), staging_files=len(staged),
            staging_bytes=sum(o.size for o in staged),
            owner=begin.owner if isinstance(begin, Begin) else None)

    def _recorded_txn_id(self, epoch: str, attempt: int, begin: Any, decision: Any) -> str:
        """The id the ledger gave the attempt (its begin or commit record names the
        namespace), not one made up from this sink's namespace: inspecting a target
        under a wrong namespace must not invent transactions nobody began."""
        for rec in (begin, decision):
            namespace = getattr(rec, "namespace", None)
            if isinstance(namespace, str) and namespace:
                return f"{namespace}/{epoch}/{attempt}"
        return f"{self.namespace}/{epoch}/{attempt}"

    def lost_group_attempts(self, epoch: str | None = None, *,
                            scan: dict[str, dict[int, AttemptRecords]] | None = None
                            ) -> list[LostGroupAttempt]:
        """The undecided member attempts whose group folder does not hold their group
        attempt (:mod:`airflow_tpc.core.group_orphans`): nobody will decide them until that
        folder is restored.  Recover and status report them loudly."""
        if scan is None:
            scan = self.ledger.scan(check_epoch(epoch) if epoch is not None else None)
        out = []
        for ep in sorted(scan, key=epoch_sort_key):
            for attempt, rec in sorted(scan[ep].items()):
                if DECISION in rec.kinds:
                    continue
                try:
                    begin = self.ledger.get(ep, attempt, rec, BEGIN)
                except LedgerError:
                    continue  # a damaged record: reported by whoever acts on the epoch
                if isinstance(begin, Begin) and begin.group is not None:
                    lost = lost_group_attempt(self.storage, self.target, ep, attempt,
                                              begin.group)
                    if lost is not None:
                        out.append(lost)
        return out

    def table_version(self, epoch: str, digest: str) -> dict[str, str] | None:
        """The table-format commit that carries a manifest (``digest``) of ``epoch``:
        ``{"table", "format", "snapshot_id" | "version"}``, or None.  A folder target
        has no table version (None); table sinks override this so Asset events and
        lineage can name the snapshot/version an epoch's commit became."""
        return None

    def committed_files(self, epochs: Any = None) -> dict[str, list[str]]:
        """Read-committed view: epoch -> URIs of the files of its published attempt."""
        wanted = None if epochs is None else {str(e) for e in epochs}
        out: dict[str, list[str]] = {}
        for name in self.storage.list_dirs(self.layout.root):
            if not name.startswith("epoch="):
                continue
            epoch = name[len("epoch="):]
            if wanted is not None and epoch not in wanted:
                continue
            marker = _promote.read_marker(self.layout, epoch)
            if marker is None:
                continue
            out[epoch] = [p if "://" in p else self.storage.uri(self.storage.join(
                self.layout.root, p)) for p in (f["path"] for f in marker["files"])]
        return dict(sorted(out.items(), key=lambda kv: epoch_sort_key(kv[0])))

    def output_uri(self, epoch: str) -> str:
        """Where epoch ``epoch`` is published (and where non-transactional modes write)."""
        return self.storage.uri(self.layout.published_dir(check_epoch(epoch)))
