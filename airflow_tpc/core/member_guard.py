"""A group member's staging is never removed while its group may still publish it.

A member attempt is decided by its group; its own decision record is a copy.  A copy
that says abort while the group decided commit (written by hand, or by an older build)
must not make the member's own recover, gc or abort delete the staging the group's
roll-forward still promotes: the other members would publish the epoch and this one
never could.  So a single target removes an aborted member attempt's staging only when
the group's ledger confirms the group decided abort; otherwise the staging is kept
(the group's recover carries a group abort out itself) or, against a group commit, the
disagreement is raised.
"""

from __future__ import annotations

import logging
from typing import Any

from ..errors import LedgerError, StorageError, TpcError
from ..storage import open_storage
from .group_records import GroupCommit, GroupLedger
from .ledger import AttemptRecords
from .records import BEGIN, DECISION, Begin
from .sink_claim import SinkClaim

log = logging.getLogger("airflow_tpc")


def _group_decision(sink: SinkClaim, epoch: str, attempt: int,
                    rec: AttemptRecords | None = None) -> tuple[Begin | None, Any, str | None]:
    """The member attempt's begin record (from ``rec``'s cache when given: no read), its
    group's decision of that attempt (None: none, or ``_UNREADABLE`` when the group's
    ledger cannot be read from this store) and the group's URI; (None, None, None) for
    an attempt that is no group member — which costs no request beyond the begin."""
    begin = sink.ledger.get(epoch, attempt, rec, BEGIN) if rec is not None \
        else sink.ledger.read(epoch, attempt, BEGIN)
    if not isinstance(begin, Begin) or begin.group is None:
        return None, None, None
    uri = str(begin.group.get("uri", ""))
    try:
        other, root = open_storage(uri)
        storage = sink.storage if other.scheme == sink.storage.scheme \
            else other if other.scheme == "file" else None
        if storage is None:
            raise StorageError("another store, whose options this target lacks")
        group = GroupLedger(storage, root)
        rec = group.scan(epoch).get(epoch, {}).get(attempt)
        decision = group.get(epoch, attempt, rec, DECISION) \
            if rec is not None and DECISION in rec.kinds else None
    except TpcError as exc:
        log.info("group %s of %s/%s/%d cannot be read from here: %s", uri, sink.namespace,
                 epoch, attempt, exc)
        return begin, _UNREADABLE, uri
    return begin, decision, uri


_UNREADABLE = object()


def kept_for_group(sink: SinkClaim, epoch: str, attempt: int) -> bool:
    """Whether an aborted attempt's staging must be kept for its group: True when it
    is a group member and its group's ledger does not confirm that the group decided
    abort (the group's folder is on a store this target cannot read, or holds no
    decision of the attempt: the group's recover carries its abort out).  Raises
    :class:`LedgerError` when the group decided **commit**: the member's own abort
    record disagrees with its group (by hand, or an older build), and removing the
    staging would lose output every other member publishes."""
    begin, decision, uri = _group_decision(sink, epoch, attempt)
    if begin is None:
        return False
    if decision is _UNREADABLE:
        log.info("staging of %s/%s/%d kept: its group %s cannot be read from here; the "
                 "group's recover carries its abort out", sink.namespace, epoch, attempt,
                 uri)
        return True
    if isinstance(decision, GroupCommit):
        raise LedgerError(
            f"{sink.storage.uri(sink.layout.record(epoch, attempt, DECISION))} aborts "
            f"{sink.namespace}/{epoch}/{attempt}, member {begin.group.get('member')!r} of "
            f"group {uri}, but the group decided commit: the record was written by hand "
            "or by an older build. Its staging is kept; remove that record and run the "
            "group's recover, which switches the member as its group decided.")
    if decision is None:
        log.info("staging of %s/%s/%d kept: its group %s has not decided abort; the "
                 "group's recover carries its abort out", sink.namespace, epoch,
                 attempt, uri)
        return True
    return False


def check_member_commit(sink: SinkClaim, epoch: str, attempt: int, digest: str,
                        rec: AttemptRecords) -> None:
    """Before a member attempt's own commit decision is carried out (promoted or
    switched) by anything — the group's roll-forward, the member's own commit, recover
    or roll-forward: its group must not have decided otherwise.  A copy the group never
    made (a group abort, or a group commit of another manifest: the staging re-sealed
    and a record written by hand) raises :class:`LedgerError`, and nothing is promoted.
    A group that holds no decision, or cannot be read from this store, leaves the copy
    as it is (it was written only after its group decided, §14.3)."""
    begin, decision, uri = _group_decision(sink, epoch, attempt, rec)
    if begin is None or decision is None or decision is _UNREADABLE:
        return
    member = str(begin.group.get("member"))
    decided = decision.members.get(member, {}).get("manifest_digest") \
        if isinstance(decision, GroupCommit) else None
    if decided != digest:
        what = f"commit of manifest {decided}" if decided else \
            f"{decision.outcome} without this member" if isinstance(decision, GroupCommit) \
            else "abort"
        raise LedgerError(
            f"{sink.storage.uri(sink.layout.record(epoch, attempt, DECISION))} commits "
            f"manifest {digest} of {sink.namespace}/{epoch}/{attempt}, member {member!r} of "
            f"group {uri}, but the group decided {what}: the record was written by hand "
            "or by an older build. Nothing is promoted; remove that record and run the "
            "group's recover, which carries out what the group decided")
