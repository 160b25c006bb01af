"""The records of a group transaction (``airflow_tpc.group``), typed and checked.

A group's ledger lies in its own folder and reuses a target's ledger machinery
(put-if-absent records, listings, the pending index) with records of its own: the
group's begin (each member's transaction), its one decision (commit: each member's
own decision record as it is to be written; or abort), and the facts that every
member switched (``published``) or had its abort carried out (``closed``).
docs/PROTOCOL.md §14 has the field tables.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import LedgerError, TpcError
from .layout import TPC_DIR, AttemptId, Layout, check_attempt, check_epoch
from .ledger import Ledger
from .records import BEGIN, CLOSED, DECISION, PUBLISHED, Fact
from .transaction import Transaction

GROUP_FORMAT = "airflow-tpc-group"
GROUP_BEGIN_FORMAT = "airflow-tpc-group-begin"
GROUP_DECISION_FORMAT = "airflow-tpc-group-decision"
#: Member names: what ``txn.output_uri(name)`` and the Airflow task group use.
MEMBER_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")


@dataclass(frozen=True)
class GroupTransaction(AttemptId):
    """One attempt at one epoch of a group: a member transaction per target, all with
    the group's attempt number (the fencing number of every member)."""

    namespace: str
    group: str
    epoch: str
    attempt: int
    started_at: float
    timeout_s: float
    members: dict[str, Transaction] = field(compare=False)

    def member(self, name: str) -> Transaction:
        try:
            return self.members[name]
        except KeyError:
            raise TpcError(f"group {self.group} has no member {name!r} (members: "
                           f"{', '.join(sorted(self.members))})") from None

    def age(self, now: float | None = None) -> float:
        return (time.time() if now is None else now) - self.started_at

    def expired(self, now: float | None = None) -> bool:
        return self.age(now) > self.timeout_s

    def to_dict(self) -> dict[str, Any]:
        return {"namespace": self.namespace, "group": self.group, "epoch": self.epoch,
                "attempt": self.attempt, "started_at": self.started_at,
                "timeout_s": self.timeout_s,
                "members": {n: t.to_dict() for n, t in sorted(self.members.items())}}

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> GroupTransaction:
        try:
            return cls(str(doc["namespace"]), str(doc["group"]), check_epoch(doc["epoch"]),
                       check_attempt(doc["attempt"]), float(doc["started_at"]),
                       float(doc["timeout_s"]),
                       {str(n): Transaction.from_dict(t) for n, t in doc["members"].items()})
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise TpcError(f"not a group transaction description: missing or bad {exc}") \
                from None


@dataclass(frozen=True)
class GroupCommit:
    """The group's ``decision.json`` with outcome commit: each member's own decision
    record, to be written on that member exactly as decided."""

    decided_at: float
    members: dict[str, dict[str, Any]]

    outcome = "commit"


@dataclass(frozen=True)
class GroupAbort:
    reason: str
    expired: bool
    decided_at: float

    outcome = "abort"


@dataclass
class GroupCommitResult:
    txn: GroupTransaction
    outcome: str  # "committed" | "already_committed"
    #: member -> the attempt its target now publishes for the epoch
    published: dict[str, int | None]
    rolled_forward: list[tuple[str, int]] = field(default_factory=list)


@dataclass(frozen=True)
class GroupStatus:
    """What :meth:`Group.poll` answers: the group attempt's decision (``"commit"``,
    ``"abort"`` or None), the epoch's highest group attempt (above it: fenced), and
    whether every member switched (``published.json``)."""

    outcome: str | None
    highest_attempt: int
    published: bool
    reason: str | None = None


@dataclass
class GroupRecoveryReport:
    rolled_forward: list[tuple[str, int]] = field(default_factory=list)
    aborted: list[tuple[str, int, str]] = field(default_factory=list)
    errors: list[tuple[str, int, str]] = field(default_factory=list)
    #: The steps on the members (``switch``/``abort``, reason ``member NAME``): done, or
    #: in a dry run (``dry_run``) planned.
    finishing: list[Any] = field(default_factory=list)
    dry_run: bool = False


class GroupLedger(Ledger):
    """A target's ledger machinery (put-if-absent records, listings, the pending index)
    over the group's folder, with the group's own records."""

    def __init__(self, storage: Any, root: str) -> None:
        super().__init__(Layout(storage, root, storage.join(root, TPC_DIR, "no-staging")))

    def _parse(self, epoch: str, attempt: int, kind: str, doc: dict[str, Any]) -> Any:
        where = self.storage.uri(self.layout.record(epoch, attempt, kind))
        return parse_group_record(kind, doc, epoch=epoch, attempt=attempt, group=self.target,
                                  where=where)


def parse_group_record(kind: str, doc: dict[str, Any], *, epoch: str, attempt: int,
                       group: str, where: str) -> Any:
    """The typed record of a group's ledger, checked against the folder it lies in."""
    def bad(why: str) -> LedgerError:
        return LedgerError(f"group ledger record {where} {why}; it was edited, copied from "
                           "elsewhere or damaged. Nothing was decided or promoted on its "
                           "account: restore the original record and retry.")

    if kind in (BEGIN, DECISION) and (
            doc.get("epoch") != epoch or doc.get("attempt") != attempt
            or str(doc.get("group", "")).rstrip("/") != group.rstrip("/")
            or not isinstance(doc.get("namespace"), str)):
            raise bad(f"names group {doc.get('group')!r} epoch {doc.get('epoch')!r} attempt "
                      f"{doc.get('attempt')!r}, not this one")
    if kind == BEGIN:
        members = doc.get("members")
        if doc.get("format") != GROUP_BEGIN_FORMAT or not isinstance(members, dict) \
                or not members:
            raise bad("is not a group begin record")
        try:
            txns = {str(n): Transaction.from_dict(t) for n, t in members.items()}
            return GroupTransaction(doc["namespace"], doc["group"], epoch, attempt,
                                    float(doc["started_at"]), float(doc["timeout_s"]), txns)
        except (TpcError, KeyError, TypeError, ValueError) as exc:
            raise bad(f"has a malformed member or time ({exc})") from None
    if kind == DECISION:
        if doc.get("format") != GROUP_DECISION_FORMAT or doc.get("version") != 1:
            raise bad(f"has an unknown format/version {doc.get('format')!r}/"
                      f"{doc.get('version')!r}")
        decided = float(doc["decided_at"]) if isinstance(doc.get("decided_at"), (int, float)) \
            else 0.0
        if doc.get("outcome") == "abort":
            return GroupAbort(str(doc.get("reason", "")), doc.get("expired") is True, decided)
        members = doc.get("members")
        if doc.get("outcome") != "commit" or not isinstance(members, dict) or not members \
                or not all(isinstance(m, dict) and isinstance(m.get("manifest_digest"), str)
                           for m in members.values()):
            raise bad("is neither a valid commit nor an abort")
        return GroupCommit(decided, members)
    if kind in (PUBLISHED, CLOSED):
        return Fact(kind, doc)
    raise bad(f"is of an unknown kind {kind!r}")
