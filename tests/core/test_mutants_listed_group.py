"""Issue 32 §3: the listed surviving mutants of group transactions, each killed.

Every test asserts what readers see and what is refused — the group's consistent cut,
each member's published files and transaction states — never which internal step ran,
so they hold whichever way the group's guards and cut are arranged.  Real local
folders; docs/mutation.md ("Listed survivors of the issue") has the mutants and how
each was checked.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time

import pytest

from airflow_tpc import Sink, TpcError, TxnState
from airflow_tpc.core import faults
from airflow_tpc.core.faults import InjectedCrash
from airflow_tpc.core.group_records import GROUP_DECISION_FORMAT
from airflow_tpc.core.ledger import Ledger
from airflow_tpc.core.manifest import MANIFEST_NAME
from airflow_tpc.core.records import DECISION, CommitDecision
from airflow_tpc.group import Group

from .helpers import full_tree, local_tree, write_staged
from .test_groups import (
    NEW,
    NS,
    OLD,
    _as_cut,
    _base,
    _cut,
    _group,
    _member_state,
    _stage,
    local,  # noqa: F401 (a fixture)
)


def _crash_after_decision(group: Group, gtxn) -> None:
    """The group's commit decided, and its committer died before any member switched."""
    with faults.armed("group.after_decision"), pytest.raises(InjectedCrash):
        group.commit(gtxn)


def _everything(group: Group) -> dict:
    """The group's folder and every member's tree (staging beside it), byte for byte."""
    out = dict(local_tree(group.storage.uri(group.ledger.layout.root)[len("file://"):]))
    for sink in group.sinks.values():
        out.update(full_tree(sink))
    return out


def _states(group: Group, epoch: str, attempt: int) -> dict[str, TxnState]:
    return {n: _member_state(group, n, epoch, attempt) for n in group.sinks}


# ----------------------------------------------------- the group's abort of members
def test_a_group_abort_never_aborts_a_writer_outside_the_group(local):  # noqa: F811
    """group_finish._abort_members: a member target's attempt is aborted only if it
    began as this group's member.  A writer outside the group that took the number on
    one member keeps its open attempt (and its staged files)."""
    group = _group(local)
    raced: list = []

    def outside_begin(_name: str) -> None:
        if not raced:
            sink = Sink(group.sinks["events"].target, NS, storage_options=local[1])
            txn = sink.begin("5")
            write_staged(sink, txn, {"x.parquet": b"the outside writer's"})
            raced.append((sink, txn))

    with faults.armed("group.begin.before_member", outside_begin):
        gtxn = group.begin("5")
    sink, txn = raced[0]
    assert txn.attempt == 1 and gtxn.attempt == 2
    assert _member_state(group, "events", "5", 1) == TxnState.OPEN
    staged = sink.storage.join(sink.layout.staging("5", 1), "x.parquet")
    assert sink.storage.read_bytes(staged) == b"the outside writer's"
    assert _member_state(group, "daily", "5", 1) == TxnState.ABORTED  # the group's own


# --------------------------------------------- published.json: every member switched
def test_the_epoch_is_not_stable_while_a_member_has_not_switched(local):  # noqa: F811
    """group_finish._switch: ``published.json`` (the epoch enters the consistent cut)
    only once *every* member publishes the group's attempt.  Here one member's commit
    was given up (its own recover, past its timeout): the epoch never becomes stable."""
    group = _group(local)
    gtxn = _stage(group, "5", NEW)
    _crash_after_decision(group, gtxn)
    daily = group.sinks["daily"]
    daily.storage.delete_files([daily.storage.join(daily.layout.staging("5", 1),
                                                   "d.parquet")])  # lost before promotion
    with pytest.raises(TpcError):
        _group(local).commit(gtxn)  # events switches; daily cannot
    given_up = Sink(daily.target, NS).recover(ignore_failures_after_timeout=True,
                                              now=time.time() + 10 ** 6)
    assert [(e, a) for e, a, _ in given_up.abandoned] == [("5", 1)]
    with contextlib.suppress(TpcError):  # it may report the member that never switched
        _group(local).recover()
    again = _group(local)
    assert again.stable_epochs() == {}
    assert again.poll(gtxn).published is False
    assert _cut(again) == {}


# ------------------------------------------- a member's decision carries the group's
def test_a_member_decision_not_carrying_the_groups_digest_is_refused(local):  # noqa: F811
    """group_finish.decide_member: the member's decision must commit the manifest the
    group decided.  A decision found there for other files (the staging re-sealed and a
    record written by hand) is refused by the group's commit and none of those files is
    published, nor by the member's own recover or commit (member_guard.py)."""
    group = _group(local)
    gtxn = _stage(group, "5", NEW)
    _crash_after_decision(group, gtxn)
    daily = group.sinks["daily"]
    txn = gtxn.member("daily")
    daily.storage.delete_files([daily.storage.join(daily.layout.sealed("5", 1),
                                                   MANIFEST_NAME)])
    write_staged(daily, txn, {"extra.parquet": b"never decided by the group"})
    resealed = daily.precommit(txn)
    forged = CommitDecision.for_manifest(resealed, decided_at=time.time(), mode="move",
                                         verify=daily.config.verify, forced=False)
    daily.ledger.create("5", 1, DECISION, {**forged.to_doc(resealed),
                                           "group": {"uri": group.uri, "member": "daily"}})
    before = full_tree(daily)
    # refused by the check of every member's copy before any switch (group_finish), or
    # by the member's own digest check: either names the disagreeing manifest
    with pytest.raises(TpcError, match="does not carry its group's commit of manifest|"
                                       "but its group decided commit of manifest"):
        _group(local).commit(gtxn)
    assert full_tree(daily) == before
    assert Sink(daily.target, NS).committed_files() == {}
    assert _group(local).stable_epochs() == {}
    # Nor does the member's own recover (or commit) carry out a copy its group never made.
    with pytest.raises(TpcError, match="epoch 5: .* but the group decided commit of manifest"):
        Sink(daily.target, NS).recover()
    with pytest.raises(TpcError, match="but the group decided commit of manifest"):
        Sink(daily.target, NS).commit(daily.transaction("5", 1))
    # the recover's pending index (bookkeeping, §5.8) aside, nothing changed
    assert {p: b for p, b in full_tree(daily).items() if not p.endswith("pending/index.json")
            } == {p: b for p, b in before.items() if not p.endswith("pending/index.json")}
    assert Sink(daily.target, NS).committed_files() == {}


# -------------------------------------------- a group commit rolls earlier ones forward
def test_a_group_commit_rolls_an_earlier_decided_epoch_forward(local):  # noqa: F811
    """Group.commit finishes every decided, unfinished group attempt it finds (a
    committer that died after its decision), as a target's commit does."""
    group = _group(local)
    _crash_after_decision(group, _stage(group, "4", OLD))
    assert _group(local).stable_epochs() == {}
    _group(local).commit(_stage(_group(local), "5", NEW))
    assert _group(local).stable_epochs() == {"4": 1, "5": 1}
    assert _cut(_group(local)) == {"4": _as_cut(OLD), "5": _as_cut(NEW)}


# ------------------------------------------------------- the cut: one attempt an epoch
class _RerunWhileRead(Sink):
    """A real member sink read the way a reader reads: its files' bytes as it lists
    them (``seen``).  The first time, a re-run of the epoch then commits (another
    process) before the reader reaches the next member."""

    rerun = None
    seen: dict[str, list[bytes]] = {}

    def committed_files(self, *args, **kwargs):
        out = super().committed_files(*args, **kwargs)
        type(self).seen = {e: sorted(self.storage.read_bytes(u[len("file://"):]) for u in uris)
                           for e, uris in out.items()}
        rerun, type(self).rerun = type(self).rerun, None
        if rerun is not None:
            rerun()
        return out


def test_the_cut_never_shows_an_epoch_half_old_half_new(local):  # noqa: F811
    """Group.committed_files: an epoch whose winning group attempt changes while the
    members are read is never shown with one member's old files and another's new."""
    base = _base(local)
    group = _group(local)
    group.commit(_stage(group, "5", OLD))

    def rerun() -> None:
        other = _group(local)
        other.commit(_stage(other, "5", NEW))

    _RerunWhileRead.rerun = rerun
    reader = Group({"daily": _RerunWhileRead(f"{base}/daily", NS),
                    "events": Sink(f"{base}/events", NS)}, f"{base}/_tpc_groups/etl")
    files = reader.committed_files()
    assert _RerunWhileRead.rerun is None, "the re-run did not happen during the read"
    # daily as read when it was listed (before the re-run), events as read after it.
    cut = {e: {"daily": _RerunWhileRead.seen[e],
               "events": sorted(reader.sinks["events"].storage.read_bytes(u[len("file://"):])
                                for u in files["events"][e])}
           for e in files["daily"]}
    assert cut in ({}, {"5": _as_cut(OLD)}, {"5": _as_cut(NEW)}), f"a mixed cut: {cut}"
    assert _cut(_group(local)) == {"5": _as_cut(NEW)}


# --------------------------------------------- transactions and records not its own
def test_a_forged_group_transaction_is_refused_and_changes_nothing(local):  # noqa: F811
    """Group._check_own: the transaction must equal its begin record (here it claims a
    later start, so an expired attempt would look fresh)."""
    group = _group(local, timeout_s=60)
    gtxn = _stage(group, "5", NEW)
    forged = dataclasses.replace(gtxn, started_at=gtxn.started_at + 3600,
                                 timeout_s=gtxn.timeout_s * 100)
    before = _everything(group)
    for verb in (group.commit, group.precommit):
        with pytest.raises(TpcError, match="stale or forged"):
            verb(forged)
        assert _everything(group) == before
    assert _states(group, "5", 1) == {"daily": TxnState.PRECOMMITTED,
                                      "events": TxnState.PRECOMMITTED}


@pytest.mark.parametrize("source", ["from_epoch", "from_attempt", "from_group"])
def test_a_copied_group_abort_decision_is_refused(local, source):  # noqa: F811
    """group_records.parse_group_record: a record names its group, epoch and attempt;
    one copied from elsewhere decides nothing (here an abort, which would throw away
    a pre-committed epoch)."""
    base = _base(local)
    group = _group(local)
    if source == "from_group":
        src = Group({"x": Sink(f"{base}/x", NS)}, f"{base}/_tpc_groups/other")
        src.abort(src.begin("5"))                      # the other group's 5/1
    else:
        src = group
        src.abort(_stage(group, "4" if source == "from_epoch" else "5", OLD))
    gtxn = _stage(_group(local), "5", NEW)             # attempt 1, or 2 above the abort
    raw = src.storage.read_bytes(src.ledger.layout.record(
        "4" if source == "from_epoch" else "5", 1, DECISION))
    assert raw is not None
    group.storage.put_if_absent(group.ledger.layout.record("5", gtxn.attempt, DECISION), raw)
    with pytest.raises(TpcError):
        _group(local).recover()
    assert _states(group, "5", gtxn.attempt) == {"daily": TxnState.PRECOMMITTED,
                                                 "events": TxnState.PRECOMMITTED}
    # Restored (the copy removed), the epoch commits as staged.
    group.storage.delete_files([group.ledger.layout.record("5", gtxn.attempt, DECISION)])
    _group(local).commit(gtxn)
    assert _cut(_group(local)) == {"5": _as_cut(NEW)}


def test_an_unknown_group_outcome_is_never_read_as_abort(local):  # noqa: F811
    """group_records.parse_group_record: only ``commit`` and ``abort`` are outcomes; any
    other (a newer writer's, or an edit) is refused, and the members stay as they are."""
    group = _group(local)
    gtxn = _stage(group, "5", NEW)
    doc = {"format": GROUP_DECISION_FORMAT, "version": 1, "outcome": "rollback",
           "namespace": NS, "group": group.uri, "epoch": "5", "attempt": 1,
           "txn_id": gtxn.txn_id, "reason": "a newer writer's outcome", "expired": False,
           "decided_at": time.time()}
    group.storage.put_if_absent(group.ledger.layout.record("5", 1, DECISION),
                                Ledger.encode(doc))
    before = {n: local_tree(s.layout.staging("5", 1)) for n, s in group.sinks.items()}
    with pytest.raises(TpcError):
        _group(local).recover()
    assert _states(group, "5", 1) == {"daily": TxnState.PRECOMMITTED,
                                      "events": TxnState.PRECOMMITTED}
    assert {n: local_tree(s.layout.staging("5", 1)) for n, s in group.sinks.items()} == before
