"""Which manifest digest a commit may trust without decoding the manifest's entries.

A commit holding the digest of a manifest (the sensor's pointer) and finding staging as
sealed need not decode the manifest's file entries (PROTOCOL §3.3): 10,000 entries are
most of a local commit's CPU.  But a digest is only a name: anyone who rewrites the
manifest after pre-commit can recompute it, and a caller may pass any digest.  Trusting
every digest the bytes hash to let a rewritten manifest — a path escaping staging, a
negative size, an unknown key — be decided and published, after which every reader of
the epoch failed (issue 32 §2).

So the shortcut is taken only for a digest a *full* validation accepted, as the ledger
says: ``validated.json`` of the attempt (PROTOCOL §3.4.11), written once by the
pre-commit that sealed the manifest, or by the sensor that read it entry by entry.  Any
other digest — none recorded (a target of an earlier build, a crash between the seal and
the record), or another one — sends the commit through the full decode and checks before
it decides.  The record is an optimisation with a safe default: losing it costs time,
never safety, so writing it is best effort.
"""

from __future__ import annotations

import logging
import time

from ..errors import LedgerError, StorageError
from .ledger import AttemptRecords, Ledger
from .manifest import Manifest
from .records import VALIDATED, Validated

__all__ = ["record_validated", "trusted_digest"]

log = logging.getLogger("airflow_tpc")


def trusted_digest(ledger: Ledger, epoch: str, attempt: int, rec: AttemptRecords | None,
                   expected: str | None) -> str | None:
    """``expected`` when the attempt's ``validated.json`` names exactly it, else None
    (then the commit decodes and checks the whole manifest).  Read only when the ledger
    listing the commit made anyway shows the record; a damaged record is a
    :class:`LedgerError` (§3.1), as for every record a commit reads."""
    if not expected or rec is None or VALIDATED not in rec.kinds:
        return None
    record = ledger.get(epoch, attempt, rec, VALIDATED)
    if isinstance(record, Validated) and record.manifest_digest == expected:
        return expected
    return None


def record_validated(ledger: Ledger, manifest: Manifest, by: str) -> bool:
    """Write ``validated.json`` for ``manifest``, which the caller (``by``) has just
    validated in full; True when this call wrote it.  Best effort: a failure is logged
    and the next commit validates in full.  An existing record naming another digest
    (the manifest was replaced after it was written) is left as it is — records are
    write-once — and the commit of the new digest validates in full."""
    doc = Validated.to_doc(manifest, by=by, validated_at=time.time())
    try:
        created, existing = ledger.create_or_get(manifest.epoch, manifest.attempt, VALIDATED,
                                                 doc)
    except (StorageError, LedgerError) as exc:
        log.warning("could not record that %s's manifest %s was validated (%s); its commit "
                    "will decode and check the manifest in full", manifest.txn_id,
                    manifest.digest, exc)
        return False
    if isinstance(existing, Validated) and existing.manifest_digest != manifest.digest:
        log.warning("%s's ledger says manifest %s was validated, but its manifest is now %s: "
                    "it changed after pre-commit; a commit of it will decode and check it in "
                    "full", manifest.txn_id, existing.manifest_digest, manifest.digest)
    return created
