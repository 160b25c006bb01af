"""The transactional sink of one target: begin, pre-commit, commit, abort, recover.

This is Flink's ``TwoPhaseCommitSinkFunction`` for batch epochs.  The commit
point is one put-if-absent ``decision.json`` per (epoch, attempt); everything
after it (promotion, clean-up) is idempotent and is finished by whoever comes
next — a retried commit, the commit of a later epoch, or :meth:`Sink.recover`.
No Airflow import: operators, the CLI and Spark jobs all drive this class.

This module is the protocol driver: the order of steps of each verb (begin →
pre-commit → decide → switch → finish; abort) and the hooks a table sink or a
group overrides or calls.  The rest stands in one module each, under it:

- :mod:`airflow_tpc.core.sink_claim` — the target's namespace claim and layout;
- :mod:`airflow_tpc.core.sink_finish` — after the decision: finishing an epoch, rolling
  forward, the abort decision;
- :mod:`airflow_tpc.core.sink_maintenance` — ``recover`` and ``gc``;
- :mod:`airflow_tpc.core.sink_queries` — the read-only queries (``poll``, ``describe``,
  ``committed_files``, ...).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
import time
import uuid
from typing import Any

from ..errors import (
    CommitConflict,
    FencedError,
    GroupMemberError,
    InvalidState,
    LedgerError,
    ManifestError,
    NamespaceConflict,
    StorageError,
    TpcError,
    TransactionExpired,
)
from ..storage import ObjectInfo
from . import promote as _promote
from .faults import crashpoint
from .ledger import AttemptRecords, check_epoch
from .manifest import MANIFEST_NAME, MAX_MANIFEST_BYTES, FileEntry, Manifest, ManifestSummary
from .placement import check_name
from .records import BEGIN, DECISION, VALIDATED, Begin, CommitDecision, Decision, derive_state
from .sink_maintenance import Progress, SinkMaintenance
from .sink_queries import SinkQueries
from .sink_trust import record_validated, trusted_digest
from .staging import (
    FINGERPRINTS_NAME,
    SEAL_NAMES,
    TABLE_STATS_NAME,
    checksum_for,
    digest_bytes,
    fingerprints_doc,
    in_background,
    list_staged,
    on_threads,
    verify_against_storage,
)
from .transaction import CommitResult, Transaction

__all__ = ["Progress", "Sink"]

log = logging.getLogger("airflow_tpc")


class Sink(SinkMaintenance, SinkQueries):
    """One target written transactionally by one pipeline (its namespace).

    >>> sink = Sink("file:///data/daily_events", namespace="events_pipeline")
    >>> txn = sink.begin("2026-11-20")          # staging prefix unique to this attempt
    >>> # ... the Spark job writes into txn.staging_uri ...
    >>> manifest = sink.precommit(txn)           # seal: the manifest is written last
    >>> sink.commit(txn, expected_digest=manifest.digest)   # decide, then promote

    The verbs of one transaction are here, in the protocol's order; ``recover`` and
    ``gc`` come from :class:`~airflow_tpc.core.sink_maintenance.SinkMaintenance`, the
    queries from :class:`~airflow_tpc.core.sink_queries.SinkQueries`, and both stand on
    the finishing steps and the claim below them.  A table sink overrides the hooks
    (``_prepare_begin``, ``_table_stats_doc``, ``_check_before_decision``, ...).
    """

    def __repr__(self) -> str:
        return f"Sink({self.target!r}, namespace={self.namespace!r})"

    # ------------------------------------------------------------------ begin
    def begin(self, epoch: str, owner: dict[str, Any] | None = None) -> Transaction:
        """Start a new attempt at ``epoch`` with a fencing number above every earlier one.

        Refused before anything is listed or handed out when the target is placed in or
        named like another target's machinery (:mod:`airflow_tpc.core.placement`), or when a
        folder down to the epoch's staging is a link (as pre-commit would refuse it)."""
        attempt = self._prepare_begin(epoch) + 1
        for _ in range(1000):
            txn = self._try_begin(epoch, attempt, owner)
            if txn is not None:
                return txn
            attempt += 1  # another begin raced us to this number; take the next
        raise TpcError(f"could not allocate an attempt for epoch {epoch}")  # pragma: no cover

    def _prepare_begin(self, epoch: str) -> int:
        """Everything a begin checks before it writes its record (placement, the claim,
        real folders down to the epoch's staging); the highest attempt seen so far."""
        check_epoch(epoch)
        check_name(self.storage, self._root)
        self._claim_namespace()
        self.storage.check_real_dirs(self.layout.staging_base, self.storage.join(
            self.layout.staging_root, f"epoch={epoch}"))
        return self._highest_attempt_seen(epoch)

    def _try_begin(self, epoch: str, attempt: int, owner: dict[str, Any] | None,
                   group: dict[str, Any] | None = None) -> Transaction | None:
        """Write ``begin.json`` of (epoch, attempt) once; None when that number is taken.
        ``group``: the attempt is a member of a group transaction (``airflow_tpc.group``)."""
        owner = dict(owner or {})
        owner.setdefault("host", socket.gethostname())
        owner.setdefault("pid", os.getpid())
        txn = Transaction(self.namespace, self.target, epoch, attempt,
                          self.storage.uri(self.layout.staging(epoch, attempt)),
                          time.time(), float(self.config.timeout_s))
        doc = {**txn.to_dict(), "owner": owner, "nonce": uuid.uuid4().hex,
               **({"group": group} if group else {})}
        created, _ = self.ledger.create_or_get(epoch, attempt, BEGIN, doc)
        if not created:
            return None
        log.info("began %s (staging %s)", txn.txn_id, txn.staging_uri)
        return txn

    def _highest_attempt_seen(self, epoch: str) -> int:
        """The highest attempt of ``epoch`` visible anywhere: ledger, staging, marker.

        The ledger alone is not enough: if it (or this epoch's part of it) was lost,
        numbering from it would hand out a fencing number that a zombie, a staged
        attempt or the published epoch already carries.
        """
        seen = max(self.ledger.scan(epoch).get(epoch, {}), default=0)
        staged = _promote.staging_dirs(self.layout, epoch).get(epoch, [])
        marker = _promote.read_marker(self.layout, epoch, files=False)
        return max(seen, max(staged, default=0), marker["attempt"] if marker else 0)

    # -------------------------------------------------------------- precommit
    def precommit(self, txn: Transaction, *, rows: dict[str, int] | None = None,
                  checksums: dict[str, str] | None = None,
                  listing: list[ObjectInfo] | None = None) -> Manifest:
        """Seal the attempt's staging: list it, write the manifest last.  Idempotent.

        What the job side already knows is handed over rather than redone: ``rows``
        and ``checksums`` (by relative path) measured where the bytes were written,
        and ``listing``, a recursive listing of staging it made moments ago (the
        files, sizes and fingerprints sealed are the ones it shows).
        """
        self._check_own(txn)
        attempts = self.ledger.scan(txn.epoch).get(txn.epoch, {})
        self._fence(txn, attempts, "pre-commit")
        if DECISION in attempts.get(txn.attempt, AttemptRecords()).kinds:
            raise FencedError(f"pre-commit refused for {txn.txn_id}: it is already decided")
        marker = _promote.read_marker(self.layout, txn.epoch, files=False)
        if marker is not None and marker["attempt"] >= txn.attempt:
            raise LedgerError(f"pre-commit refused for {txn.txn_id}: readers already see "
                              f"attempt {marker['attempt']} of epoch {txn.epoch}, so this attempt "
                              "was decided (its decision record is lost, or the ledger was "
                              "damaged)")
        self._warn_age(txn)
        staging = self.layout.check_staging(txn.epoch, txn.attempt)
        listing = self.storage.list(staging) if listing is None else listing
        staged = list_staged(self.storage, staging, listing)
        existing = self.read_manifest(txn)  # decoded and checked in full
        if existing is not None:
            if {f.path: f.size for f in existing.files} == {k: v.size for k, v in staged.items()}:
                if VALIDATED not in attempts.get(txn.attempt, AttemptRecords()).kinds:
                    record_validated(self.ledger, existing, "precommit")  # a crash lost it
                return existing
            raise ManifestError(f"{txn.txn_id} is already pre-committed with different files; "
                                "a sealed attempt never changes — begin a new attempt")
        rows = rows or {}
        # Where the store's ETag is its own version token (Azure), the ETag is sealed:
        # it is what verification compares and what guards each promotion copy; a
        # writer's MD5 could do neither without reading every byte again.
        opaque = self.storage.native_checksum == "etag" and not self.storage.etag_is_md5
        checksums = {} if opaque else checksums or {}
        sums = on_threads(lambda item: checksums.get(item[0]) or checksum_for(self.storage,
                                                                               item[1]),
                          staged.items())
        entries = [FileEntry(rel, info.size, checksum, rows.get(rel))
                   for (rel, info), checksum in zip(staged.items(), sums, strict=True)]
        prints = fingerprints_doc(staged)
        stats = self._table_stats_doc(txn, staged)
        manifest = Manifest.build(namespace=txn.namespace, target=txn.target, epoch=txn.epoch,
                                  attempt=txn.attempt, staging=txn.staging_uri, files=entries,
                                  fingerprints=digest_bytes(prints) if prints else None,
                                  table_stats=digest_bytes(stats) if stats else None,
                                  listing=self.storage.status_digest_of(staging, listing,
                                                                        SEAL_NAMES))
        data = manifest.to_json_bytes()
        if len(data) > MAX_MANIFEST_BYTES:
            raise ManifestError(f"{txn.txn_id} staged {manifest.total_files} files: its "
                                f"manifest would be {len(data)} bytes, above the "
                                f"{MAX_MANIFEST_BYTES} byte cap; write fewer, larger files "
                                "(e.g. coalesce or repartition before writing)")
        # The very bytes sealed, validated as a reader would (a caller's checksum or row
        # count included): validated.json below vouches for exactly these.
        Manifest.parse(data, where=f"manifest of {txn.txn_id}")
        seal = self.layout.sealed(txn.epoch, txn.attempt)
        if prints:
            self.storage.put(self.storage.join(seal, FINGERPRINTS_NAME), prints)
        if stats:
            self.storage.put(self.storage.join(seal, TABLE_STATS_NAME), stats)
        crashpoint("precommit.before_manifest")
        self.storage.put(self.storage.join(seal, MANIFEST_NAME), data)
        crashpoint("precommit.before_validated")
        record_validated(self.ledger, manifest, "precommit")  # after the seal: §3.4.11
        log.info("pre-committed %s: %d files, %d bytes, digest %s", txn.txn_id,
                 manifest.total_files, manifest.total_bytes, manifest.digest)
        return manifest

    def _decision_scope(self) -> dict[str, Any] | None:
        """What a commit decision records of the rows it replaces (table sinks); None."""
        return None

    def _table_stats_doc(self, txn: Transaction, staged: dict[str, ObjectInfo]) -> bytes | None:
        """A table target's per-file statistics, sealed beside the manifest (its sha256 in
        the manifest) so the table commit need not read every footer again.  None here."""
        return None

    # ----------------------------------------------------------------- commit
    def commit(self, txn: Transaction, *, expected_digest: str | None = None,
               force: bool = False) -> CommitResult:
        """Decide (one put-if-absent record), then promote.  Safe to call again."""
        begin = self._check_own(txn)
        epoch = txn.epoch
        attempts = self.ledger.scan(epoch).get(epoch, {})
        rec = attempts.setdefault(txn.attempt, AttemptRecords({BEGIN}))
        rec.docs.setdefault(BEGIN, begin)  # read and checked just now: not read again
        decision = self._decision(epoch, txn.attempt, rec)
        manifest: Manifest | None = None  # set when this call validated staging against it
        if decision is None and begin.group is not None:
            raise GroupMemberError(
                f"commit refused for {txn.txn_id}: it is member {begin.group['member']!r} of "
                f"group transaction {begin.group['uri']} (attempt {txn.attempt}), decided only "
                "with its group: commit the group (airflow_tpc.group.Group.commit).")
        if decision is None:
            try:
                manifest, decision, won_race = self._decide_commit(txn, attempts,
                                                                   expected_digest, force)
                outcome = "committed" if won_race else "already_committed"
            except (InvalidState, ManifestError, StorageError):
                # A concurrent committer of this same attempt may have decided and
                # promoted it (moving staging away) while this call read staging.
                decision = self.ledger.read(epoch, txn.attempt, DECISION)
                if decision is None:
                    raise
                log.info("%s was decided by a concurrent committer meanwhile", txn.txn_id)
            rec.kinds.add(DECISION)
            rec.docs[DECISION] = decision  # type: ignore[assignment]
        if manifest is None:
            if not isinstance(decision, CommitDecision):
                raise InvalidState(f"cannot commit {txn.txn_id}: it was "
                                   f"{state_of_decision(decision)} ({decision.reason})")
            if expected_digest and decision.manifest_digest != expected_digest:
                raise CommitConflict(f"{txn.txn_id} was committed with manifest "
                                     f"{decision.manifest_digest}, not {expected_digest}")
            outcome = "already_committed"
        soon = self._list_pending_soon(attempts)  # a read, beside the promotion
        winner = self._finish_epoch(epoch, attempts, known=manifest)
        if winner != txn.attempt:
            outcome = "superseded"
        rolled = self._roll_forward_pending(epoch, attempts, soon)
        if outcome == "committed":
            log.info("committed %s: %d files, %d bytes", txn.txn_id, manifest.total_files,
                     manifest.total_bytes)
        return CommitResult(txn, outcome, manifest or ManifestSummary.of(decision), rolled)

    def _decide_commit(self, txn: Transaction, attempts: dict[int, AttemptRecords],
                       expected_digest: str | None, force: bool
                       ) -> tuple[Manifest, CommitDecision, bool]:
        """Validate staging and write the decision; True if this call made it."""
        manifest, decision = self._validate_commit(txn, attempts, expected_digest, force)
        crashpoint("commit.before_decision")
        created, winner = self.ledger.create_or_get(txn.epoch, txn.attempt, DECISION,
                                                    decision.to_doc(manifest))
        if not isinstance(winner, CommitDecision) or winner.manifest_digest != manifest.digest:
            raise CommitConflict(f"{txn.txn_id} was decided concurrently by another "
                                 f"committer: {state_of_decision(winner)}")  # type: ignore[arg-type]
        crashpoint("commit.after_decision")
        return manifest, winner, created

    def _validate_commit(self, txn: Transaction, attempts: dict[int, AttemptRecords],
                         expected_digest: str | None, force: bool
                         ) -> tuple[Manifest, CommitDecision]:
        """Everything a commit checks before its decision (fencing, expiry, the sealed
        manifest, the target's own check, staging against the manifest), and the
        decision it would write.  A group runs it for every member before deciding."""
        self._fence(txn, attempts, "commit")
        if txn.expired():
            if not force:
                raise TransactionExpired(
                    f"{txn.txn_id} is {txn.age():.0f} s old, past its {txn.timeout_s:.0f} s "
                    "timeout; its data may be incomplete or superseded. Abort it, or commit "
                    "with force=True if you are sure.")
            log.error("FORCED commit of expired %s (%.0f s old, timeout %.0f s): its data may be "
                      "stale; if a newer run already rewrote this epoch, that output is lost",
                      txn.txn_id, txn.age(), txn.timeout_s)
        self._warn_age(txn)
        # The manifest is read and hashed on a thread (I/O and sha256, off the GIL) while
        # this one walks staging, which the shortcut compares with it (PROTOCOL §3.3).
        # Its entries go undecoded only for a digest a full validation recorded (§3.4.11).
        # That record is read beside the manifest (one round trip on S3, not two).
        rec = attempts.get(txn.attempt)
        trust = in_background(lambda: trusted_digest(self.ledger, txn.epoch, txn.attempt, rec,
                                                     expected_digest))
        read = in_background(lambda: self.read_manifest(txn, trusted=trust))
        staging = self.layout.check_staging(txn.epoch, txn.attempt)
        walked = self.storage.status_digest(staging, SEAL_NAMES) \
            if self.config.verify != "checksum" else None
        manifest = read()
        if manifest is None:
            raise InvalidState(f"cannot commit {txn.txn_id}: it is not pre-committed (no "
                               f"manifest at {self.manifest_uri(txn)})")
        if expected_digest and manifest.digest != expected_digest:
            raise ManifestError(f"manifest of {txn.txn_id} in storage has digest "
                                f"{manifest.digest}, but {expected_digest} was validated: it "
                                "changed after pre-commit")
        self._check_before_decision(txn, manifest)
        folders = verify_against_storage(
            self.storage, staging, manifest, self.config.verify,
            seal=self.layout.sealed(txn.epoch, txn.attempt), walked=walked)
        if folders is not None:
            manifest = dataclasses.replace(manifest, staging_folders=folders)
        return manifest, CommitDecision.for_manifest(
            manifest, decided_at=time.time(), mode=self.config.promotion,
            verify=self.config.verify, forced=bool(force and txn.expired()),
            scope=self._decision_scope())

    def _check_before_decision(self, txn: Transaction, manifest: Manifest) -> None:
        """The target's own check of a sealed attempt, just before its commit is decided
        (a table checks the sealed files against the table as it is now).  A folder
        has none: staging is verified against the manifest next, for every target."""

    def _switch_catalog(self) -> Any:
        """The catalog whose multi-table commit could switch this target together with
        others (a group of tables of one REST catalog); None: it switches on its own."""
        return None

    def _prepared_switch(self, epoch: str, attempt: int, known: Manifest | None) -> Any:
        """The switch of a decided attempt, built and checked but not made, for a group
        to send with its siblings' in one catalog call; None: nothing to send."""
        return None

    def _release(self) -> None:
        """Drop what one commit kept between its check and its switch (tables: the
        loaded table); a group calls it after committing its members."""

    # ------------------------------------------------------------------ abort
    def abort(self, txn: Transaction, reason: str = "aborted") -> bool:
        """Throw the attempt away: record ABORTED, remove its staging.  Idempotent: True
        when this call recorded the decision, False when the attempt was already aborted
        (or expired); its leftover staging is removed either way."""
        self._check_claim("abort")
        self._check_own(txn)
        return self._abort(txn.epoch, txn.attempt, reason)

    # ---------------------------------------------------- checks of every verb
    def _check_own(self, txn: Transaction) -> Begin:
        """The transaction's begin record, if ``txn`` is this sink's and matches it."""
        if txn.target.rstrip("/") != self.target.rstrip("/"):
            raise TpcError(f"{txn.txn_id} is for target {txn.target}, not {self.target}")
        if txn.namespace != self.namespace and not self.config.allow_foreign_namespace:
            raise NamespaceConflict(f"{txn.txn_id} belongs to namespace {txn.namespace!r}, "
                                    f"not {self.namespace!r}")
        check_epoch(txn.epoch)
        begin = self.ledger.read(txn.epoch, txn.attempt, BEGIN)
        if not isinstance(begin, Begin) or begin.transaction() != txn:
            raise InvalidState(f"{txn.txn_id} does not match its begin record in the ledger "
                               f"of {self.target} (stale or forged transaction)")
        return begin

    def _fence(self, txn: Transaction, attempts: dict[int, AttemptRecords], verb: str) -> None:
        higher = max(attempts, default=0)
        if higher > txn.attempt:
            raise FencedError(f"{verb} refused for {txn.txn_id}: attempt {higher} of epoch "
                              f"{txn.epoch} has begun since (this attempt is a zombie and its "
                              "output will never be published)")

    def _warn_age(self, txn: Transaction, now: float | None = None) -> None:
        age = txn.age(now)
        if age > self.config.warn_fraction * txn.timeout_s and age <= txn.timeout_s:
            log.warning("%s is %.0f s old, %.0f%% of its %.0f s transaction timeout: commit it "
                        "soon or it expires", txn.txn_id, age, 100 * age / txn.timeout_s,
                        txn.timeout_s)


def state_of_decision(decision: Decision) -> str:
    """A decision's state, in words (for errors)."""
    return str(derive_state({DECISION}, decision, sealed=True))
