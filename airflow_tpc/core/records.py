"""Typed ledger records, parsed and checked once, and the one state derivation.

Every record of ``_tpc/ledger/epoch=E/attempt=A/`` becomes one of the types
below through :func:`parse_record`, which also checks that it belongs where it
lies (its epoch, attempt, target, staging — a ``decision.json`` copied from
another epoch is refused with :class:`LedgerError`, never acted upon).  Readers
ignore fields they do not know (forward compatibility); docs/PROTOCOL.md §3 has
the field tables.  :func:`derive_state` is the only place a transaction's state
is computed from its records.

Decision records come in two versions, both read:

- version 1 (airflow-tpc 0.1) embeds the whole manifest (~200 bytes a file);
- version 2 names the sealed manifest by digest and carries its totals, so the
  commit point stays a few hundred bytes whatever the file count.  The manifest
  itself stays sealed in staging until promotion, and its file list outlives
  staging in the published marker.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ..errors import LedgerError
from .manifest import Manifest
from .transaction import PROMOTION_MODES, VERIFY_MODES, Transaction, TxnState

BEGIN, DECISION, PUBLISHED, ABANDONED, SUPERSEDED, CLOSED = (
    "begin", "decision", "published", "abandoned", "superseded", "closed")
#: ``validated.json``: a full validation accepted the attempt's manifest of this digest,
#: so a commit holding exactly that digest may skip decoding its entries (PROTOCOL §3.4.11).
VALIDATED = "validated"
#: Who may write ``validated.json``: the pre-commit that sealed the manifest, or the
#: sensor that read and checked it.
VALIDATORS = ("precommit", "sensor")
#: Records after which an attempt needs nothing more: roll-forward skips it
#: without reading its decision (``closed``: an abort whose staging is gone).
FINISHED_KINDS = frozenset({PUBLISHED, SUPERSEDED, ABANDONED, CLOSED})
#: Records after which a *displaced* attempt needs nothing more.  Not ``published``:
#: a published attempt that a higher commit displaced still has its staging (the
#: live data of "manifest" mode) to remove and ``superseded.json`` to get.
DISPLACED_DONE_KINDS = frozenset({SUPERSEDED, ABANDONED, CLOSED})
DECISION_FORMAT = "airflow-tpc-decision"
DECISION_VERSION = 2
VALIDATED_FORMAT = "airflow-tpc-validated"
DIGEST_RE = re.compile(r"sha256:[0-9a-f]{64}")


@dataclass(frozen=True)
class Totals:
    files: int
    bytes: int
    rows: int | None


@dataclass(frozen=True)
class Begin(Transaction):
    """``begin.json``: the transaction as it began (plus who began it); its attempt
    number fences every lower one."""

    owner: dict[str, Any] = field(default_factory=dict, compare=False)
    #: A member of a group transaction (``airflow_tpc.group``): ``{"uri": the group's
    #: folder, "member": its name in the group}``.  Such an attempt is decided only by
    #: its group's decision, never on its own.
    group: dict[str, Any] | None = field(default=None, compare=False)

    def transaction(self) -> Transaction:
        """The plain transaction (what operators pass around), without the owner."""
        return Transaction(self.namespace, self.target, self.epoch, self.attempt,
                           self.staging_uri, self.started_at, self.timeout_s)


@dataclass(frozen=True)
class CommitDecision:
    """``decision.json`` with outcome commit: THE commit point."""

    namespace: str
    txn_id: str
    decided_at: float
    mode: str
    verify: str
    forced: bool
    manifest_digest: str
    totals: Totals
    #: Version 1 records only: the whole manifest document.
    embedded: dict[str, Any] | None = field(default=None, compare=False, repr=False)
    #: A table target's scope: which rows of the table the commit replaces
    #: (``airflow_tpc.tables.scope``); None: the epoch's partition (or a folder).
    scope: dict[str, Any] | None = None

    outcome = "commit"

    @classmethod
    def for_manifest(cls, manifest: Manifest, *, decided_at: float, mode: str, verify: str,
                     forced: bool, scope: dict[str, Any] | None = None) -> CommitDecision:
        return cls(manifest.namespace, manifest.txn_id, decided_at, mode, verify, forced,
                   manifest.digest, Totals(manifest.total_files, manifest.total_bytes,
                                           manifest.total_rows), scope=scope)

    def to_doc(self, manifest: Manifest) -> dict[str, Any]:
        """The version 2 record: O(1) in the file count."""
        return {"format": DECISION_FORMAT, "version": DECISION_VERSION, "outcome": "commit",
                "txn": {"namespace": manifest.namespace, "target": manifest.target,
                        "epoch": manifest.epoch, "attempt": manifest.attempt},
                "txn_id": self.txn_id, "staging": manifest.staging,
                "decided_at": self.decided_at, "mode": self.mode, "verify": self.verify,
                "forced": self.forced, "manifest_digest": self.manifest_digest,
                "totals": {"files": self.totals.files, "bytes": self.totals.bytes,
                           "rows": self.totals.rows},
                **({"scope": self.scope} if self.scope is not None else {})}


@dataclass(frozen=True)
class AbortDecision:
    """``decision.json`` with outcome abort (``expired``: by the transaction timeout)."""

    reason: str
    expired: bool
    decided_at: float

    outcome = "abort"

    def to_doc(self, namespace: str, target: str, epoch: str, attempt: int) -> dict[str, Any]:
        """Names its transaction, so a copy in another attempt's folder is refused."""
        return {"outcome": "abort", "reason": self.reason, "expired": self.expired,
                "decided_at": self.decided_at, "txn_id": f"{namespace}/{epoch}/{attempt}",
                "txn": {"namespace": namespace, "target": target, "epoch": epoch,
                        "attempt": attempt}}


Decision = CommitDecision | AbortDecision


@dataclass(frozen=True)
class Fact:
    """``published``, ``superseded``, ``abandoned`` or ``closed``: a step that happened."""

    kind: str
    doc: dict[str, Any] = field(compare=False)

    @property
    def by(self) -> int | None:
        return self.doc.get("by")


@dataclass(frozen=True)
class Validated:
    """``validated.json``: the manifest of digest ``manifest_digest`` passed a full
    validation (:meth:`Manifest.parse` of its bytes, entries and all, and the transaction
    check) by ``by``.  Written once; it is what lets a commit trust a digest."""

    manifest_digest: str
    validated_at: float
    by: str

    @staticmethod
    def to_doc(manifest: Manifest, *, by: str, validated_at: float) -> dict[str, Any]:
        """Names its transaction and staging, so a copy in another attempt's folder is
        refused like any record (§3.1)."""
        return {"format": VALIDATED_FORMAT, "version": 1,
                "txn": {"namespace": manifest.namespace, "target": manifest.target,
                        "epoch": manifest.epoch, "attempt": manifest.attempt},
                "txn_id": manifest.txn_id, "staging": manifest.staging,
                "manifest_digest": manifest.digest, "validated_at": validated_at, "by": by}


Record = Begin | CommitDecision | AbortDecision | Fact | Validated


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def parse_record(kind: str, doc: dict[str, Any], *, epoch: str, attempt: int, target: str,
                 staging_uri: str, where: str) -> Record:
    """The typed record of ``doc`` found at (epoch, attempt, kind), or LedgerError.

    Every record that names a transaction must name *this* one: the epoch and
    attempt of its folder, this target, this attempt's staging.
    """
    def bad(why: str) -> LedgerError:
        return LedgerError(f"ledger record {where} {why}; records are never rewritten by "
                           "airflow-tpc, so it was edited, copied from elsewhere or damaged. "
                           "Nothing was promoted or deleted on its account: restore the "
                           "original record (or remove the attempt's folder by hand) and retry.")

    def same_txn(txn: Any, what: str) -> None:
        if not isinstance(txn, dict):
            raise bad(f"has no transaction ({what})")
        if txn.get("epoch") != epoch or txn.get("attempt") != attempt \
                or not _int(txn.get("attempt")):
            raise bad(f"{what} epoch {txn.get('epoch')!r} attempt {txn.get('attempt')!r}, "
                      f"but lies under epoch {epoch!r} attempt {attempt}")
        if str(txn.get("target", "")).rstrip("/") != target.rstrip("/"):
            raise bad(f"is for target {txn.get('target')!r}, not {target!r}")
        if not isinstance(txn.get("namespace"), str) or not txn["namespace"]:
            raise bad("has no namespace")

    if kind == BEGIN:
        same_txn(doc, "names")
        if doc.get("staging_uri") != staging_uri:
            raise bad(f"names staging {doc.get('staging_uri')!r}, but this attempt's staging "
                      f"is {staging_uri!r} (was staging_root changed?)")
        if not _number(doc.get("started_at")) or not _number(doc.get("timeout_s")) \
                or doc["timeout_s"] <= 0:
            raise bad("has no valid started_at/timeout_s")
        owner = doc.get("owner")
        group = doc.get("group")
        if group is not None and not (isinstance(group, dict) and isinstance(
                group.get("uri"), str) and isinstance(group.get("member"), str)):
            raise bad(f"names a malformed group {group!r}")
        return Begin(doc["namespace"], doc["target"], epoch, attempt, staging_uri,
                     float(doc["started_at"]), float(doc["timeout_s"]),
                     owner if isinstance(owner, dict) else {}, group)
    if kind == DECISION:
        outcome = doc.get("outcome")
        if outcome == "abort":
            if "txn" in doc:  # builds before tag v0.1.0 wrote abort records naming none
                same_txn(doc["txn"], "aborts")
            return AbortDecision(str(doc.get("reason", "")), doc.get("expired") is True,
                                 float(doc["decided_at"]) if _number(doc.get("decided_at"))
                                 else 0.0)
        if outcome != "commit":
            raise bad(f"has an unknown outcome {outcome!r}")
        return _commit_decision(doc, bad, same_txn, staging_uri, f"/{epoch}/{attempt}")
    if kind in (PUBLISHED, SUPERSEDED, ABANDONED, CLOSED):
        named = doc.get("txn_id")
        if named is not None and not str(named).endswith(f"/{epoch}/{attempt}"):
            raise bad(f"is about transaction {named!r}, not attempt {attempt} of epoch "
                      f"{epoch!r}")
        if kind == SUPERSEDED and (not _int(doc.get("by")) or doc["by"] <= attempt):
            raise bad(f"says a lower or no attempt ({doc.get('by')!r}) superseded attempt "
                      f"{attempt}")
        return Fact(kind, doc)
    if kind == VALIDATED:
        return _validated(doc, bad, same_txn, staging_uri, f"/{epoch}/{attempt}")
    raise bad(f"is of an unknown kind {kind!r}")


def _validated(doc: dict[str, Any], bad: Any, same_txn: Any, staging_uri: str,
               expected_id: str) -> Validated:
    """``validated.json``, checked as strictly as a decision: it decides whether a commit
    decodes the manifest, so one that names another attempt, staging or a malformed digest
    is a damaged ledger, never a reason to trust."""
    if doc.get("format") != VALIDATED_FORMAT or doc.get("version") != 1:
        raise bad(f"has an unknown format/version {doc.get('format')!r}/{doc.get('version')!r}")
    same_txn(doc.get("txn"), "validates")
    if doc.get("staging") != staging_uri:
        raise bad(f"validates files staged at {doc.get('staging')!r}, not at this attempt's "
                  f"staging {staging_uri!r}")
    if doc.get("txn_id") != doc["txn"]["namespace"] + expected_id:
        raise bad(f"has txn_id {doc.get('txn_id')!r}, not "
                  f"{doc['txn']['namespace'] + expected_id!r}")
    digest = doc.get("manifest_digest")
    if not isinstance(digest, str) or not DIGEST_RE.fullmatch(digest):
        raise bad(f"names no manifest digest ({digest!r})")
    if doc.get("by") not in VALIDATORS or not _number(doc.get("validated_at")):
        raise bad(f"has no valid by/validated_at ({doc.get('by')!r})")
    return Validated(digest, float(doc["validated_at"]), doc["by"])


def _commit_decision(doc: dict[str, Any], bad: Any, same_txn: Any, staging_uri: str,
                     expected_id: str) -> CommitDecision:
    version = doc.get("version", 1)
    if version == 1:  # airflow-tpc 0.1: the manifest is embedded
        body = doc.get("manifest")
        if not isinstance(body, dict):
            raise bad("is a commit decision without a manifest")
        same_txn(body.get("txn"), "commits the manifest of")
        staged_at, txn_id, digest = body.get("staging"), body.get("txn_id"), body.get("digest")
        totals = body.get("totals")
        namespace = body["txn"]["namespace"]
        embedded: dict[str, Any] | None = body
    elif version == DECISION_VERSION and doc.get("format") == DECISION_FORMAT:
        same_txn(doc.get("txn"), "commits")
        staged_at, txn_id, digest = doc.get("staging"), doc.get("txn_id"), \
            doc.get("manifest_digest")
        totals = doc.get("totals")
        namespace = doc["txn"]["namespace"]
        embedded = None
    else:
        raise bad(f"has an unknown format/version {doc.get('format')!r}/{version!r}")
    if staged_at != staging_uri:
        raise bad(f"commits files staged at {staged_at!r}, not at this attempt's staging "
                  f"{staging_uri!r}")
    if txn_id != f"{namespace}{expected_id}" or doc.get("txn_id") != txn_id:
        raise bad(f"has txn_id {doc.get('txn_id')!r} (manifest: {txn_id!r}), not "
                  f"{namespace + expected_id!r}")
    if not isinstance(digest, str) or not digest.startswith("sha256:"):
        raise bad(f"names no manifest digest ({digest!r})")
    if not isinstance(totals, dict) or not _int(totals.get("files")) \
            or not _int(totals.get("bytes")) \
            or not (totals.get("rows") is None or _int(totals.get("rows"))):
        raise bad("has no valid totals")
    mode, verify = doc.get("mode", "move"), doc.get("verify", "checksum")
    if mode not in PROMOTION_MODES:
        raise bad(f"has an unknown promotion mode {mode!r}")
    if verify not in VERIFY_MODES:
        raise bad(f"has an unknown verification mode {verify!r}")
    scope = doc.get("scope")
    if scope is not None and not (isinstance(scope, dict) and isinstance(scope.get("kind"), str)):
        raise bad(f"has a malformed scope {scope!r}")
    return CommitDecision(namespace, txn_id, float(doc["decided_at"])
                          if _number(doc.get("decided_at")) else 0.0, mode, verify,
                          doc.get("forced") is True, digest,
                          Totals(totals["files"], totals["bytes"], totals.get("rows")), embedded,
                          scope=scope)


def needs_finishing(kinds: set[str]) -> bool:
    """Whether roll-forward must look at an attempt: decided, and no record says it is done.

    Judged from a listing alone (no read), so a commit's "finish every pending
    epoch" costs nothing for epochs whose attempts are all finished.
    """
    return DECISION in kinds and not kinds & FINISHED_KINDS


def derive_state(kinds: set[str], decision: Decision | None, sealed: bool) -> TxnState:
    """THE state of one attempt, from which records exist, its decision, and whether
    its staging holds a manifest.  No other code computes a state."""
    if isinstance(decision, CommitDecision):
        return TxnState.ABANDONED if ABANDONED in kinds else TxnState.COMMITTED
    if isinstance(decision, AbortDecision):
        return TxnState.EXPIRED if decision.expired else TxnState.ABORTED
    return TxnState.PRECOMMITTED if sealed else TxnState.OPEN
