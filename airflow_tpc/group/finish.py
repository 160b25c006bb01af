"""How a decided group attempt is carried out on its members: a commit switched on
every member (tables of one catalog at once), an abort carried out on each, and the
decided attempts a commit finds still unfinished rolled forward.

Apart from :mod:`airflow_tpc.group` (the verbs, up to the decision) as the single
target's roll-forward is apart from its verbs (``sink_finish.py``); both
:meth:`~airflow_tpc.group.Group.commit` and
:meth:`~airflow_tpc.group.maintenance.GroupMaintenance.recover` come here.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from ..core.faults import crashpoint
from ..core.group_records import GroupAbort, GroupCommit, GroupLedger
from ..core.ledger import AttemptRecords
from ..core.manifest import Manifest
from ..core.records import BEGIN, CLOSED, DECISION, PUBLISHED, Begin, CommitDecision
from ..core.sink import Sink, state_of_decision
from ..core.sink_member import MemberSink
from ..errors import LedgerError

log = logging.getLogger("airflow_tpc")


class GroupFinish:
    """Mixed into :class:`~airflow_tpc.group.Group` (before
    :class:`~airflow_tpc.group.maintenance.GroupMaintenance`, whose ``_finish`` this
    provides), which provides what is declared here: its ledger and members."""

    uri: str
    namespace: str
    sinks: dict[str, Sink]
    ledger: GroupLedger

    def _switch(self, epoch: str, attempt: int, decision: GroupCommit, rec: AttemptRecords,
                known: Mapping[str, Manifest] | None = None) -> dict[str, int | None]:
        """Roll a decided group commit forward on every member, then record that every
        member switched (``published.json``: the epoch is stable for readers)."""
        self._check_before_switch(epoch, attempt, decision)
        if PUBLISHED not in rec.kinds:
            self._switch_tables_at_once(epoch, attempt, decision, known or {})
        published = {}
        for name in sorted(decision.members):
            published[name] = commit_member(
                self.sinks[name], epoch, attempt, decision.members[name], (known or {}).get(name))
            crashpoint("group.after_member")
        if PUBLISHED not in rec.kinds and all(a is not None and a >= attempt
                                              for a in published.values()):
            crashpoint("group.before_published")
            self.ledger.create_or_get(epoch, attempt, PUBLISHED, {
                "published_at": time.time(), "txn_id": f"{self.namespace}/{epoch}/{attempt}"})
            rec.kinds.add(PUBLISHED)
        return published

    def _check_before_switch(self, epoch: str, attempt: int, decision: GroupCommit) -> None:
        """Before any member is switched: the decision names exactly the group's members
        (``group.json``, which every verb checked this Group against), and every member's
        own copy of it, where one is written, is that copy.  Found only at that member,
        a disagreement would leave the members before it switched: a mixed cut.  One
        read per member; nothing is written."""
        where = self.ledger.storage.uri(self.ledger.layout.record(epoch, attempt, DECISION))
        decided, members = set(decision.members), set(self.sinks)
        if decided != members:
            diff = "; ".join(part for part in (
                f"missing {', '.join(sorted(members - decided))}" if members - decided else "",
                f"not members: {', '.join(sorted(decided - members))}"
                if decided - members else "") if part)
            raise LedgerError(
                f"group decision {where} commits members {', '.join(sorted(decided))}, but "
                f"the group's members (its group.json) are {', '.join(sorted(members))} "
                f"({diff}); the record was edited or damaged. Nothing was switched on any "
                "member: restore the original record and run group recover.")
        for name in sorted(decided):
            sink, digest = self.sinks[name], decision.members[name].get("manifest_digest")
            copy = sink.ledger.read(epoch, attempt, DECISION)
            if copy is None or (isinstance(copy, CommitDecision)
                                and copy.manifest_digest == digest):
                continue
            raise LedgerError(
                f"member {name!r} of group {self.uri} holds its own decision "
                f"{sink.storage.uri(sink.layout.record(epoch, attempt, DECISION))}: "
                f"{state_of_decision(copy)}"
                + (f" of manifest {copy.manifest_digest}" if isinstance(copy, CommitDecision)
                   else "") + f", but its group decided commit of manifest "
                f"{digest} ({where}); it was written by hand or by an older build. Nothing "
                "was switched on any member and its staging is kept: remove that member's "
                "record (the group's decision is the commit point) and run group recover.")

    def _switch_tables_at_once(self, epoch: str, attempt: int, decision: GroupCommit,
                               known: Mapping[str, Manifest]) -> None:
        """When every member is a table of one catalog that commits several tables at
        once (an Iceberg REST catalog's multi-table commit), make every member's table
        commit in that one call, so engine readers see the tables move together.  Best
        effort: each member's own switch runs next and finds its commit in its table;
        if the catalog refused or lacks the call, each member switches on its own."""
        keys = {MemberSink(self.sinks[n]).switch_catalog() for n in decision.members}
        if len(decision.members) < 2 or len(keys) != 1 or None in keys:
            return
        changes = []
        for name in sorted(decision.members):
            sink = self.sinks[name]
            decide_member(sink, epoch, attempt, decision.members[name])
            change = MemberSink(sink).prepared_switch(epoch, attempt, known.get(name))
            if change is not None:
                changes.append(change)
        if len(changes) < 2:
            return  # nothing, or one table, left to switch (a retried roll-forward)
        crashpoint("group.before_tables_commit")
        try:
            type(changes[0]).commit_together(changes)
        except Exception as exc:  # refused (409), unsupported, or unknown: see above
            log.warning("group %s/%s/%d: the catalog's multi-table commit did not apply "
                        "(%s: %s); each member switches on its own", self.namespace, epoch,
                        attempt, type(exc).__name__, exc)
            crashpoint("group.tables_commit_refused")
            return
        log.info("group %s/%s/%d: %d tables switched in one catalog commit", self.namespace,
                 epoch, attempt, len(changes))
        crashpoint("group.after_tables_commit")

    def _roll_forward_pending(self, skip: str | None = None) -> list[tuple[str, int]]:
        """Finish every other decided, unfinished group attempt the pending index names
        (a commit whose process died after its decision)."""
        listed = self.ledger.pending()
        scan = self.ledger.scan() if listed is None else {
            e: self.ledger.scan(e).get(e, {}) for e in listed if e != skip}
        done = []
        for epoch, attempts in scan.items():
            for attempt, rec in sorted(attempts.items()):
                if epoch != skip and DECISION in rec.kinds \
                        and not rec.kinds & {PUBLISHED, CLOSED}:
                    self._finish(epoch, attempt, rec)
                    done.append((epoch, attempt))
        if listed is None:  # the first commit: build the index from this full listing
            self.ledger.sync_pending(scan, {}, skip={skip} if skip else set())
        return done

    def _finish(self, epoch: str, attempt: int, rec: AttemptRecords) -> None:
        decision = self.ledger.get(epoch, attempt, rec, DECISION)
        if isinstance(decision, GroupCommit):
            self._switch(epoch, attempt, decision, rec)
        elif isinstance(decision, GroupAbort):
            self._abort_members(epoch, attempt, decision.reason, decision.expired)
            self.ledger.create_or_get(epoch, attempt, CLOSED, {"closed_at": time.time()})
            rec.kinds.add(CLOSED)

    def _abort_members(self, epoch: str, attempt: int, reason: str,
                       expired: bool = False) -> None:
        """Carry a group abort out on every member that began (its own abort record,
        its staging removed)."""
        for sink in self.sinks.values():
            begin = sink.ledger.read(epoch, attempt, BEGIN)
            if isinstance(begin, Begin) and begin.group is not None \
                    and begin.group.get("uri", "").rstrip("/") == self.uri:
                MemberSink(sink).abort_for_group(epoch, attempt, f"group: {reason}", expired)
                crashpoint("group.abort.after_member")


# ------------------------------------------------------------ on one member target
def commit_member(sink: Sink, epoch: str, attempt: int, doc: dict[str, Any],
                  known: Manifest | None = None) -> int | None:
    """Carry out a group's commit decision on member target ``sink``: write the member's
    own decision (``doc``, recorded in the group's decision) once, then finish the
    epoch as any commit does.  Idempotent; the winning attempt of the epoch."""
    attempts = sink.ledger.scan(epoch).get(epoch, {})
    rec = attempts.setdefault(attempt, AttemptRecords())
    decide_member(sink, epoch, attempt, doc, rec)
    won = MemberSink(sink).finish(epoch, attempts, known=known)
    MemberSink(sink).roll_forward_pending(epoch, attempts)
    return won


def decide_member(sink: Sink, epoch: str, attempt: int, doc: dict[str, Any],
                  rec: AttemptRecords | None = None) -> None:
    """Write a member's decision (a copy of its group's) once, and check that the one
    there is that copy."""
    if rec is None:
        rec = sink.ledger.scan(epoch).get(epoch, {}).get(attempt, AttemptRecords())
    if DECISION not in rec.kinds:
        _, winner = sink.ledger.create_or_get(epoch, attempt, DECISION, doc)
        rec.kinds.add(DECISION)
        rec.docs[DECISION] = winner
    decision = MemberSink(sink).decision(epoch, attempt, rec)
    if not isinstance(decision, CommitDecision) \
            or decision.manifest_digest != doc["manifest_digest"]:
        raise LedgerError(
            f"{sink.storage.uri(sink.layout.record(epoch, attempt, DECISION))} does not "
            f"carry its group's commit of manifest {doc['manifest_digest']} (it is "
            f"{state_of_decision(decision) if decision else 'missing'}): the ledger was "
            "changed outside airflow-tpc. Nothing was promoted on its account.")
