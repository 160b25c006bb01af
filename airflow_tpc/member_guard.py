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

from .errors import LedgerError, StorageError, TpcError
from .group_records import GroupCommit, GroupLedger
from .records import BEGIN, DECISION, Begin
from .sink_claim import SinkClaim
from .storage import open_storage

log = logging.getLogger("airflow_tpc")


def kept_for_group(sink: SinkClaim, epoch: str, attempt: int) -> bool:
    """Whether an aborted attempt's staging must be kept for its group: True when it
    is a group member and its group's ledger does not confirm that the group decided
    abort (the group's folder is on a store this target cannot read, or holds no
    decision of the attempt: the group's recover carries its abort out).  Raises
    :class:`LedgerError` when the group decided **commit**: the member's own abort
    record disagrees with its group (by hand, or an older build), and removing the
    staging would lose output every other member publishes."""
    begin = sink.ledger.read(epoch, attempt, BEGIN)
    if not isinstance(begin, Begin) or begin.group is None:
        return False
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
        log.info("staging of %s/%s/%d kept: its group %s cannot be read from here (%s); "
                 "the group's recover carries its abort out", sink.namespace, epoch,
                 attempt, uri, exc)
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
