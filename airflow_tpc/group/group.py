"""One epoch, many targets: a group transaction with one decision record.

Kafka's transaction coordinator, for batch epochs.  A group writes one epoch of
several targets (folders, Iceberg and Delta tables, mixed) as one transaction:
every member is begun with the same attempt number and sealed as a single target
is; then **one** put-if-absent decision record in the group's own folder commits
all of them or none.  Each member's own decision is a copy of that record, written
only after it; each member's switch is then rolled forward from it, idempotently,
by the commit or by :meth:`Group.recover`.  A member's attempt is never decided on
its own: its target's abort refuses it, and its target's recover leaves it to the
group (:class:`~airflow_tpc.errors.GroupMemberError`).

The group's folder ``G`` (any folder or bucket prefix apart from every target)::

    G/_tpc/group.json                                   the group: namespace, members
    G/_tpc/ledger/epoch=E/attempt=NNNNNN/begin.json      the group attempt began
    G/_tpc/ledger/epoch=E/attempt=NNNNNN/decision.json   THE COMMIT POINT of every member
    G/_tpc/ledger/epoch=E/attempt=NNNNNN/published.json  every member switched
    G/_tpc/ledger/epoch=E/attempt=NNNNNN/closed.json     every member's abort carried out
    G/_tpc/pending/...                                   as a target's (PROTOCOL.md §5.8)

Readers that ask for the group's consistent cut (:meth:`Group.stable_epochs`,
:meth:`Group.committed_files`) see an epoch only when its winning group attempt
is published on every member, as Kafka's read_committed consumers stop at the last
stable offset.  docs/PROTOCOL.md §14 has the records and the crash table.
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from collections.abc import Mapping
from typing import Any

from ..core.faults import crashpoint
from ..core.group_records import (
    GROUP_BEGIN_FORMAT,
    GROUP_DECISION_FORMAT,
    GROUP_FORMAT,
    MEMBER_RE,
    GroupAbort,
    GroupCommit,
    GroupCommitResult,
    GroupLedger,
    GroupRecoveryReport,
    GroupStatus,
    GroupTransaction,
)
from ..core.layout import TPC_DIR, check_attempt, check_epoch
from ..core.ledger import AttemptRecords, Ledger
from ..core.manifest import Manifest
from ..core.placement import group_claim_path
from ..core.records import BEGIN, DECISION, AbortDecision
from ..core.sink import Sink
from ..core.sink_member import MemberSink
from ..core.transaction import Transaction
from ..errors import (
    CommitConflict,
    FencedError,
    InvalidState,
    LedgerError,
    NamespaceConflict,
    TpcError,
    TransactionExpired,
)
from ..storage import open_storage
from .claim import (
    GROUP_CLAIM,
    check_group_folder,
    check_members,
    check_namespace,
    check_same_folders,
    read_group_claim,
    real_path,
)
from .finish import GroupFinish
from .maintenance import GroupMaintenance

__all__ = ["Group", "GroupAbort", "GroupCommit", "GroupCommitResult", "GroupRecoveryReport",
           "GroupStatus", "GroupTransaction"]

log = logging.getLogger("airflow_tpc")


class Group(GroupFinish, GroupMaintenance):
    """Several targets written as one transaction per epoch (all or nothing).

    >>> group = Group({"events": Sink("s3://lake/events", "etl"),
    ...                "daily": open_sink("iceberg://...", "etl")},
    ...               uri="s3://lake/_tpc_groups/etl")
    >>> gtxn = group.begin("2026-11-20")   # gtxn.member("events").staging_uri, ...
    >>> group.precommit(gtxn)             # seal every member
    >>> group.commit(gtxn)                # one decision, then each member switches
    """

    def __init__(self, sinks: Mapping[str, Sink], uri: str, *,
                 storage_options: dict[str, Any] | None = None,
                 timeout_s: float | None = None) -> None:
        if not sinks:
            raise TpcError("a group needs at least one member target")
        for name in sinks:
            if not isinstance(name, str) or not MEMBER_RE.fullmatch(name):
                raise TpcError(f"invalid member name {name!r}: letters, digits, '_' and "
                               "'-', starting with a letter or digit, at most 64")
        namespaces = {s.namespace for s in sinks.values()}
        if len(namespaces) != 1:
            raise NamespaceConflict(f"the members of a group share one namespace; got "
                                    f"{sorted(namespaces)}")
        self.namespace = namespaces.pop()
        self.sinks = dict(sorted(sinks.items()))
        storage, root = open_storage(uri, storage_options)
        self.storage = storage
        self.uri = storage.uri(root).rstrip("/")
        # One folder under two spellings (a link) would be two members sharing a ledger.
        check_same_folders({n: (s.storage, MemberSink(s).root, s.target)
                            for n, s in self.sinks.items()})
        targets = [s.target.rstrip("/") for s in self.sinks.values()]
        if len(set(targets)) != len(targets):
            raise TpcError("two members of a group name the same target")
        real_group = real_path(storage, root)
        for sink in self.sinks.values():
            target = sink.target.rstrip("/")
            pairs = [(self.uri, target)]
            if sink.storage.scheme == storage.scheme:  # as the store sees them (links)
                pairs.append((real_group, real_path(sink.storage, MemberSink(sink).root)))
            if any(a == b or a.startswith(b + "/") or b.startswith(a + "/") for a, b in pairs):
                raise TpcError(f"the group's folder {self.uri} and the target {target} lie "
                               "inside one another; give the group a folder of its own")
        self.timeout_s = float(timeout_s if timeout_s is not None
                               else min(s.config.timeout_s for s in self.sinks.values()))
        self.ledger = GroupLedger(storage, root)
        self._claimed = False

    def __repr__(self) -> str:
        return f"Group({self.uri!r}, members={sorted(self.sinks)})"

    # ------------------------------------------------------------------ claim
    def _claim(self, create: bool = False) -> None:
        """``group.json``: a group's namespace and members never change (a new set of
        targets is a new group), so every attempt's members are the same targets.  Every
        verb that writes checks it first (once per Group), so that nothing is written
        into a target that is not the member ``group.json`` names; ``create`` (begin)
        writes it when absent, after checking where the folder lies."""
        if self._claimed:
            return
        root = self.ledger.layout.root
        members = {n: s.target.rstrip("/") for n, s in self.sinks.items()}
        have = read_group_claim(self.storage, root)
        if have is None and create:
            check_group_folder(self.storage, root)
            doc = {"format": GROUP_FORMAT, "version": 1, "namespace": self.namespace,
                   "members": members}
            if self.storage.put_if_absent(group_claim_path(self.storage, root),
                                          Ledger.encode(doc)):
                self._claimed = True
                return
            have = read_group_claim(self.storage, root)  # claimed meanwhile
        if have is None:
            if self.ledger.scan():
                raise LedgerError(
                    f"{self.uri} holds ledger records but no {TPC_DIR}/{GROUP_CLAIM}: it is "
                    "not a group's folder (a target's?) or its claim was lost. Nothing was "
                    "changed.")
            return  # a group never begun: nothing of its own to check or finish
        check_namespace(self.uri, have, self.namespace)
        check_members(self.uri, have["members"], members)
        self._claimed = True

    # ------------------------------------------------------------------ begin
    def begin(self, epoch: str, owner: dict[str, Any] | None = None) -> GroupTransaction:
        """A new group attempt: the group's record first, then each member's begin with
        the same number (above every attempt any member or the group has seen)."""
        check_epoch(epoch)
        self._claim(create=True)
        owner = {"host": socket.gethostname(), "pid": os.getpid(), **(owner or {})}
        attempt = max([max(self.ledger.scan(epoch).get(epoch, {}), default=0)]
                      + [MemberSink(s).prepare_begin(epoch) for s in self.sinks.values()]) + 1
        for _ in range(1000):
            gtxn = self._try_begin(epoch, attempt, owner)
            if gtxn is not None:
                return gtxn
            attempt += 1
        raise TpcError(f"could not allocate a group attempt for epoch {epoch}")  # pragma: no cover

    def _try_begin(self, epoch: str, attempt: int,
                   owner: dict[str, Any]) -> GroupTransaction | None:
        planned = {n: s.storage.uri(s.layout.staging(epoch, attempt))
                   for n, s in self.sinks.items()}
        now = time.time()
        doc = {"format": GROUP_BEGIN_FORMAT, "version": 1, "namespace": self.namespace,
               "group": self.uri, "epoch": epoch, "attempt": attempt, "started_at": now,
               "timeout_s": self.timeout_s, "owner": owner, "nonce": uuid.uuid4().hex,
               "members": {n: Transaction(self.namespace, s.target, epoch, attempt,
                                          planned[n], now, s.config.timeout_s).to_dict()
                           for n, s in self.sinks.items()}}
        created, _ = self.ledger.create_or_get(epoch, attempt, BEGIN, doc)
        if not created:
            return None  # another group begin took the number
        members: dict[str, Transaction] = {}
        for name, sink in self.sinks.items():
            crashpoint("group.begin.before_member")
            txn = MemberSink(sink).begin_member(epoch, attempt, owner,
                                              {"uri": self.uri, "member": name})
            if txn is None:
                # The number is taken on that target (a writer outside this group):
                # this group attempt can never commit; decide so, and take the next.
                reason = f"attempt {attempt} was taken on member {name!r} ({sink.target})"
                self._decide_abort(epoch, attempt, reason)
                self._abort_members(epoch, attempt, reason)
                return None
            members[name] = txn
        gtxn = GroupTransaction(self.namespace, self.uri, epoch, attempt, now, self.timeout_s,
                                members)
        log.info("began group %s of %s (%s)", gtxn.txn_id, self.uri, ", ".join(members))
        return gtxn

    def transaction(self, epoch: str, attempt: int | str) -> GroupTransaction:
        """Load a group transaction from its begin record (each member's as begun)."""
        epoch, attempt = check_epoch(epoch), check_attempt(attempt)
        begin = self.ledger.read(epoch, attempt, BEGIN)
        if not isinstance(begin, GroupTransaction):
            raise InvalidState(f"group {self.uri}: no transaction for epoch {epoch} attempt "
                               f"{attempt}")
        members = {}
        for name, sink in self.sinks.items():
            if name not in begin.members:
                raise LedgerError(f"group {self.uri} epoch {epoch} attempt {attempt} has no "
                                  f"member {name!r}")
            try:
                members[name] = sink.transaction(epoch, attempt)
            except InvalidState:  # the begin died before this member's record
                members[name] = begin.members[name]
        return GroupTransaction(begin.namespace, begin.group, epoch, attempt,
                                begin.started_at, begin.timeout_s, members)

    def _check_own(self, gtxn: GroupTransaction) -> GroupTransaction:
        if gtxn.group.rstrip("/") != self.uri:
            raise TpcError(f"{gtxn.txn_id} is a transaction of group {gtxn.group}, not "
                           f"{self.uri}")
        begin = self.ledger.read(gtxn.epoch, gtxn.attempt, BEGIN)
        if not isinstance(begin, GroupTransaction) or begin != gtxn \
                or set(begin.members) != set(self.sinks):
            raise InvalidState(f"{gtxn.txn_id} does not match its begin record in group "
                               f"{self.uri} (stale or forged transaction)")
        for name, sink in self.sinks.items():
            txn = gtxn.member(name)
            own = MemberSink(sink).check(txn)
            if own.group is None or own.group.get("uri", "").rstrip("/") != self.uri \
                    or own.group.get("member") != name:
                raise InvalidState(f"{txn.txn_id} on {sink.target} is not member {name!r} of "
                                   f"group {self.uri}")
        return begin

    def _fence(self, gtxn: GroupTransaction, attempts: dict[int, AttemptRecords],
               verb: str) -> None:
        higher = max(attempts, default=0)
        if higher > gtxn.attempt:
            raise FencedError(f"{verb} refused for group {gtxn.txn_id}: group attempt {higher} "
                              f"of epoch {gtxn.epoch} has begun since (this attempt is a "
                              "zombie and its output will never be published)")

    # -------------------------------------------------------------- precommit
    def precommit(self, gtxn: GroupTransaction) -> dict[str, Manifest]:
        """Seal every member (each as a single target seals: schema, staging, links).
        Nothing is decided: a member that fails leaves the group undecided."""
        self._claim()
        self._check_own(gtxn)
        attempts = self.ledger.scan(gtxn.epoch).get(gtxn.epoch, {})
        self._fence(gtxn, attempts, "pre-commit")
        if DECISION in attempts.get(gtxn.attempt, AttemptRecords()).kinds:
            raise FencedError(f"pre-commit refused for group {gtxn.txn_id}: it is decided")
        return {name: sink.precommit(gtxn.member(name)) for name, sink in self.sinks.items()}

    # ----------------------------------------------------------------- commit
    def commit(self, gtxn: GroupTransaction, *,
               expected_digests: Mapping[str, str] | None = None,
               force: bool = False) -> GroupCommitResult:
        """Check every member, write the one decision, then switch every member.  Safe
        to call again: a decided group is rolled forward, never decided twice."""
        self._claim()
        self._check_own(gtxn)
        epoch, attempt = gtxn.epoch, gtxn.attempt
        attempts = self.ledger.scan(epoch).get(epoch, {})
        rec = attempts.setdefault(attempt, AttemptRecords({BEGIN}))
        decision = self.ledger.get(epoch, attempt, rec, DECISION)
        known: dict[str, Manifest] = {}
        outcome = "already_committed"
        try:
            if decision is None:
                decision, made, known = self._decide_commit(gtxn, attempts,
                                                            expected_digests or {}, force)
                rec.kinds.add(DECISION)
                outcome = "committed" if made else outcome
            if not isinstance(decision, GroupCommit):
                raise InvalidState(f"cannot commit group {gtxn.txn_id}: it was aborted "
                                   f"({decision.reason})")
            published = self._switch(epoch, attempt, decision, rec, known)
        finally:
            for sink in self.sinks.values():
                MemberSink(sink).release()
        rolled = self._roll_forward_pending(skip=epoch)
        if outcome == "committed":
            log.info("committed group %s: %s", gtxn.txn_id, ", ".join(
                f"{n} {m.total_files} files" for n, m in known.items()))
        return GroupCommitResult(gtxn, outcome, published, rolled)

    def _decide_commit(self, gtxn: GroupTransaction, attempts: dict[int, AttemptRecords],
                       expected: Mapping[str, str], force: bool
                       ) -> tuple[GroupCommit | GroupAbort, bool, dict[str, Manifest]]:
        self._fence(gtxn, attempts, "commit")
        if gtxn.expired() and not force:
            raise TransactionExpired(
                f"group {gtxn.txn_id} is {gtxn.age():.0f} s old, past its "
                f"{gtxn.timeout_s:.0f} s timeout; abort it, or commit with force=True")
        unknown = set(expected) - set(self.sinks)
        if unknown:
            raise TpcError(f"expected digests name no member of group {self.uri}: "
                           f"{sorted(unknown)}")
        docs, known = {}, {}
        for name, sink in self.sinks.items():
            txn = gtxn.member(name)
            member_attempts = sink.ledger.scan(txn.epoch).get(txn.epoch, {})
            mine = member_attempts.get(txn.attempt)
            if mine is not None and DECISION in mine.kinds and isinstance(
                    MemberSink(sink).decision(txn.epoch, txn.attempt, mine), AbortDecision):
                raise InvalidState(  # hand-written, or by an older build: never overruled
                    f"cannot commit group {gtxn.txn_id}: member {name!r} ({sink.target}) "
                    "already holds an abort decision of its own for this attempt; nothing "
                    "was decided. Abort the group and run the epoch again.")
            manifest, mdecision = MemberSink(sink).validate_commit(
                txn, member_attempts, expected.get(name), force)
            docs[name] = {**mdecision.to_doc(manifest),
                          "group": {"uri": self.uri, "member": name}}
            known[name] = manifest
        doc = {"format": GROUP_DECISION_FORMAT, "version": 1, "outcome": "commit",
               "namespace": self.namespace, "group": self.uri, "epoch": gtxn.epoch,
               "attempt": gtxn.attempt, "txn_id": gtxn.txn_id, "decided_at": time.time(),
               "forced": bool(force and gtxn.expired()), "members": docs}
        crashpoint("group.before_decision")
        made, winner = self.ledger.create_or_get(gtxn.epoch, gtxn.attempt, DECISION, doc)
        if isinstance(winner, GroupCommit) and any(
                winner.members.get(n, {}).get("manifest_digest") != d["manifest_digest"]
                for n, d in docs.items()):
            raise CommitConflict(f"group {gtxn.txn_id} was committed concurrently with "
                                 "other manifests")
        crashpoint("group.after_decision")
        return winner, made, known  # type: ignore[return-value]

    # ------------------------------------------------------------------ abort
    def abort(self, gtxn: GroupTransaction, reason: str = "aborted") -> bool:
        """Decide abort for the whole group (refused once it is committed), then abort
        every member.  True when this call made the decision."""
        if gtxn.group.rstrip("/") != self.uri:
            raise TpcError(f"{gtxn.txn_id} is a transaction of group {gtxn.group}, not "
                           f"{self.uri}")
        self._claim()
        epoch, attempt = gtxn.epoch, gtxn.attempt
        if not isinstance(self.ledger.read(epoch, attempt, BEGIN), GroupTransaction):
            raise InvalidState(f"group {self.uri}: no transaction {gtxn.txn_id}")
        made = self._decide_abort(epoch, attempt, reason)
        rec = self.ledger.scan(epoch).get(epoch, {}).get(attempt, AttemptRecords())
        self._finish(epoch, attempt, rec)
        if made:
            log.info("aborted group %s: %s", gtxn.txn_id, reason)
        return made

    def _decide_abort(self, epoch: str, attempt: int, reason: str,
                      expired: bool = False) -> bool:
        doc = {"format": GROUP_DECISION_FORMAT, "version": 1, "outcome": "abort",
               "namespace": self.namespace, "group": self.uri, "epoch": epoch,
               "attempt": attempt, "txn_id": f"{self.namespace}/{epoch}/{attempt}",
               "reason": reason, "expired": expired, "decided_at": time.time()}
        crashpoint("group.abort.before_decision")
        made, winner = False, self.ledger.read(epoch, attempt, DECISION)
        if winner is None:  # a committed group is refused before anything is written
            made, winner = self.ledger.create_or_get(epoch, attempt, DECISION, doc)
        if isinstance(winner, GroupCommit):
            raise InvalidState(f"cannot abort group {self.namespace}/{epoch}/{attempt}: it is "
                               "COMMITTED (use a new run of the epoch to replace its output)")
        crashpoint("group.abort.after_decision")
        return made
