"""The group's consistent cut (docs/PROTOCOL.md §14.4), and what keeps an epoch out of it.

A group's decision says that every member publishes the group's attempt of the epoch,
but a member is an ordinary target: afterwards another group sharing it, or a plain
single-target run of the same namespace, may commit a higher attempt of the same epoch
on it.  That member then publishes the other attempt, and a cut that trusted the
group's ledger alone would show it beside the other members at the group's attempt:
two attempts mixed.  So an epoch is in the cut only when the group's winning attempt
is published (``published.json``) AND every member's winning attempt of the epoch (its
highest commit decision) is that attempt.  Otherwise the epoch is left out, and
:class:`MovedOn` says which member moved on, to which attempt, and by what.

Reads only: one listing of the group's ledger and one of each member's, and the
decisions of the epochs the group published.  Imports no table library (a job-side
reader opens each member's ledger as a plain folder: ``group.json`` names its root).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..core.group_records import GROUP_FORMAT, GroupCommit, GroupLedger, GroupTransaction
from ..core.layout import TPC_DIR, epoch_sort_key
from ..core.ledger import AttemptRecords, Ledger
from ..core.placement import GROUP_CLAIM
from ..core.records import BEGIN, DECISION, PUBLISHED, Begin
from ..core.sink import Sink
from ..core.sink_member import MemberSink
from ..errors import TpcError
from ..storage import open_storage


@dataclass(frozen=True)
class MovedOn:
    """Member ``member`` no longer publishes the group's attempt ``group_attempt`` of
    ``epoch``: its winning attempt is ``attempt`` (None: it has no commit of the epoch,
    its ledger was damaged), committed by ``by``: ``"group"`` (another group, whose
    folder is ``group``) or ``"single-target"`` (a plain commit of the target)."""

    epoch: str
    member: str
    group_attempt: int
    attempt: int | None
    by: str
    group: str | None = None

    def describe(self) -> str:
        if self.attempt is None:
            return (f"member {self.member} has no commit of epoch {self.epoch} (its ledger "
                    f"lost the group's attempt {self.group_attempt})")
        what = f"another group ({self.group})" if self.by == "group" \
            else "a single-target commit"
        return (f"member {self.member} moved on to attempt {self.attempt} of epoch "
                f"{self.epoch}, committed by {what}; the group's attempt is "
                f"{self.group_attempt}")

    def to_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "member": self.member,
                "group_attempt": self.group_attempt, "attempt": self.attempt,
                "by": self.by, "group": self.group}


def published_winners(ledger: GroupLedger) -> dict[str, int]:
    """epoch -> the group's winning (highest) commit, for the epochs where it is
    published on every member; an epoch whose newest commit is still switching is
    left out.  From the group's ledger alone (one listing, a read per decided epoch)."""
    out = {}
    for epoch, attempts in ledger.scan().items():
        for attempt in sorted(attempts, reverse=True):
            rec = attempts[attempt]
            if DECISION not in rec.kinds:
                continue
            if isinstance(ledger.get(epoch, attempt, rec, DECISION), GroupCommit):
                if PUBLISHED in rec.kinds:
                    out[epoch] = attempt
                break
    return out


def consistent_cut(ledger: GroupLedger, members: Mapping[str, Sink]
                   ) -> tuple[dict[str, int], list[MovedOn]]:
    """(the cut: epoch -> group attempt, the members that moved on, by epoch and name).

    ``members``: name -> a sink of that member (a reader's sink will do: only its
    ledger is read)."""
    published = published_winners(ledger)
    if not published:
        return {}, []
    scans = {name: sink.ledger.scan() for name, sink in sorted(members.items())}
    moved: list[MovedOn] = []
    for epoch, attempt in sorted(published.items()):
        for name, scan in scans.items():
            moved_on = _member_moved_on(members[name], name, epoch, attempt,
                                        scan.get(epoch, {}))
            if moved_on is not None:
                moved.append(moved_on)
    out = {e: a for e, a in published.items() if not any(m.epoch == e for m in moved)}
    return out, moved


def _member_moved_on(sink: Sink, name: str, epoch: str, attempt: int,
                     attempts: dict[int, AttemptRecords]) -> MovedOn | None:
    won = MemberSink(sink).winner(epoch, attempts)
    if won is not None and won[0] == attempt:
        return None
    if won is None:
        return MovedOn(epoch, name, attempt, None, "none")
    begin = sink.ledger.get(epoch, won[0], attempts[won[0]], BEGIN)
    group = begin.group if isinstance(begin, Begin) else None
    if group is not None:
        return MovedOn(epoch, name, attempt, won[0], "group", str(group.get("uri", "")))
    return MovedOn(epoch, name, attempt, won[0], "single-target")


def read_group_claim(uri: str, storage_options: dict[str, Any] | None = None
                     ) -> tuple[GroupLedger, dict[str, Any]]:
    """The group's ledger and its claim (``group.json``); a folder without a claim is
    refused loudly (a lost group folder must not read as a group with nothing in it)."""
    storage, root = open_storage(uri, storage_options)
    path = storage.join(root, TPC_DIR, GROUP_CLAIM)
    claim = Ledger.decode_at(storage, path, storage.read_bytes(path))
    if claim is None:
        raise TpcError(f"{storage.uri(root)} holds no airflow-tpc group (no {TPC_DIR}/"
                       f"{GROUP_CLAIM}): the group's folder is wrong, or it was lost. Nothing "
                       "is read from it; restore the group's folder")
    if claim.get("format") != GROUP_FORMAT or not isinstance(claim.get("members"), dict):
        raise TpcError(f"{storage.uri(path)} is not a group claim (format "
                       f"{claim.get('format')!r}); it was edited or damaged")
    return GroupLedger(storage, root), claim


def member_staging_roots(ledger: GroupLedger) -> dict[str, str]:
    """member -> its staging root, from the group's newest ``begin.json`` (each member's
    planned ``staging_uri`` is ``<staging root>/epoch=E/attempt=NNNNNN``).  A reader
    opening a member's ledger as a plain folder needs it to check records against their
    staging: a table's staging lies in the table's location, which only its catalog
    knows.  Empty when the group never began (then its cut is empty too)."""
    scan = ledger.scan()
    for epoch in sorted(scan, key=epoch_sort_key, reverse=True):
        for attempt in sorted(scan[epoch], reverse=True):
            begin = ledger.get(epoch, attempt, scan[epoch][attempt], BEGIN)
            if isinstance(begin, GroupTransaction):
                return {name: txn.staging_uri.rstrip("/").rsplit("/", 2)[0]
                        for name, txn in begin.members.items()}
    return {}

