"""A member attempt whose group folder does not hold its group attempt (issue 32 §1.7).

A member's attempt is decided only by its group (PROTOCOL §14.3), so a target's own
recover leaves an undecided member attempt to the group.  The group's ``begin.json`` is
written before any member's, so a member ``begin.json`` naming group attempt (E, A) of
folder G means G held that attempt.  If G no longer does (the group's folder deleted,
moved or emptied, perhaps after its decision), nobody will ever decide the member: a
decided commit would be lost without a word.  Recover and status ask here and report it
loudly (recover: an error, so it surfaces on every restore; status: a non-zero exit),
and never decide the attempt on their own: neither published nor dropped.

The group's folder is read with the member's own store when both are on the same kind
of store (one set of credentials), else as its URI alone (environment credentials); a
folder that cannot be read is only warned about (nothing can be said of it).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import LedgerError, StorageError, UnsupportedStorage
from ..storage import Storage, open_storage
from .group_records import GroupLedger
from .records import BEGIN

log = logging.getLogger("airflow_tpc")


@dataclass(frozen=True)
class LostGroupAttempt:
    """Undecided attempt (``epoch``, ``attempt``) of ``target`` is member ``member`` of
    group folder ``group``, which does not hold that group attempt (``problem`` says
    how, and what to do)."""

    target: str
    epoch: str
    attempt: int
    group: str
    member: str
    problem: str

    def to_dict(self) -> dict[str, Any]:
        return {"target": self.target, "epoch": self.epoch, "attempt": self.attempt,
                "group": self.group, "member": self.member, "problem": self.problem}


def lost_group_attempt(storage: Storage, target: str, epoch: str, attempt: int,
                       group: Mapping[str, Any]) -> LostGroupAttempt | None:
    """The member attempt as lost, when the group folder its begin names (``group``:
    ``{"uri", "member"}``) holds no ``begin.json`` of group attempt (epoch, attempt) or
    a damaged one; None when it does, or when the folder cannot be read at all."""
    uri, member = str(group.get("uri", "")), str(group.get("member", ""))
    try:
        other, root = open_storage(uri)
        if other.scheme == storage.scheme:
            other = storage  # the member's own store (and credentials) reaches it
        ledger = GroupLedger(other, root)
        path = other.uri(ledger.layout.record(epoch, attempt, BEGIN))
        found = ledger.read(epoch, attempt, BEGIN)
    except LedgerError as exc:
        found, path = exc, ""
    except (StorageError, UnsupportedStorage) as exc:
        log.warning("cannot tell whether group folder %s still holds attempt %d of epoch %s "
                    "(member %r of %s): %s", uri, attempt, epoch, member, target, exc)
        return None
    if found is not None and not isinstance(found, LedgerError):
        return None
    what = f"its record is damaged ({found})" if isinstance(found, LedgerError) \
        else f"there is no {path}"
    problem = (f"attempt {attempt} of epoch {epoch} of {target} is member {member!r} of "
               f"group {uri}, but the group's folder does not hold that group attempt "
               f"({what}): the group's folder was lost, moved or damaged, perhaps after its "
               "decision. Only the group decides a member, so the attempt is left undecided "
               "(neither published nor dropped). Restore the group's folder, then run "
               "'airflow-tpc group recover' on it")
    return LostGroupAttempt(target, epoch, attempt, uri, member, problem)
