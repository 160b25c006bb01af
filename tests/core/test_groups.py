"""One epoch, many targets: a group transaction commits every target or none.

Every claim is checked with real stores (local disk and moto's S3 server) and, for
the mixes, real Iceberg (pyiceberg's SQL catalog) and Delta (delta-rs) tables.
The crash test does not trust a hand-kept list of steps: it records every crash
point one group commit passes and crashes at each occurrence in turn.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from airflow_tpc import Sink, TxnState
from airflow_tpc.core import faults
from airflow_tpc.core.faults import InjectedCrash, crash_at
from airflow_tpc.errors import FencedError, GroupMemberError, InvalidState, ManifestError
from airflow_tpc.group import Group, GroupTransaction

from ..conftest import make_store
from .helpers import snapshot, write_staged

NS = "etl"
OLD = {"events": {"a.parquet": b"events-old"}, "daily": {"d.parquet": b"daily-old"}}
NEW = {"events": {"a.parquet": b"events-new", "b.parquet": b"events-new-2"},
       "daily": {"d.parquet": b"daily-new"}}


def _base(store) -> str:
    return store[0].rsplit("/", 1)[0]


def _group(store, names=("events", "daily"), folder="_tpc_groups/etl", **config) -> Group:
    """A fresh Group (as a new process opens it): only what is in storage survives."""
    base, options = _base(store), store[1]
    sinks = {n: Sink(f"{base}/{n}", NS, storage_options=options) for n in names}
    return Group(sinks, f"{base}/{folder}", storage_options=options, **config)


def _stage(group: Group, epoch: str, files: dict[str, dict[str, bytes]]) -> GroupTransaction:
    gtxn = group.begin(epoch)
    for name, sink in group.sinks.items():
        write_staged(sink, gtxn.member(name), files.get(name, {}))
    group.precommit(gtxn)
    return gtxn


def _cut(group: Group) -> dict[str, dict[str, list[bytes]]]:
    """What a reader of the group's consistent cut reads: epoch -> member -> contents."""
    out: dict[str, dict[str, list[bytes]]] = {}
    for name, per_epoch in group.committed_files().items():
        sink = group.sinks[name]
        for epoch, uris in per_epoch.items():
            out.setdefault(epoch, {})[name] = sorted(
                sink.storage.read_bytes(u.split("://", 1)[1] if u.startswith("s3://")
                                        else u[len("file://"):]) for u in uris)
    return out


def _as_cut(files: dict[str, dict[str, bytes]]) -> dict[str, list[bytes]]:
    return {n: sorted(f.values()) for n, f in files.items()}


def _member_state(group: Group, name: str, epoch: str, attempt: int) -> TxnState:
    sink = group.sinks[name]
    (info,) = [i for i in sink.describe(epoch) if i.attempt == attempt]
    return info.state


@pytest.fixture()
def local(tmp_path):
    """Protocol logic that does not depend on the store: local disk only."""
    return str(tmp_path / "target"), None


def test_a_group_commits_every_member_with_one_decision(store):
    group = _group(store)
    gtxn = _stage(group, "5", NEW)
    assert group.stable_epochs() == {}
    result = group.commit(gtxn)
    assert result.outcome == "committed" and result.published == {"events": 1, "daily": 1}
    assert group.stable_epochs() == {"5": 1}
    assert _cut(group) == {"5": _as_cut(NEW)}
    for name in group.sinks:
        assert _member_state(group, name, "5", 1) == TxnState.COMMITTED
    again = _group(store).commit(gtxn)  # a retried commit: rolled forward, not decided again
    assert again.outcome == "already_committed" and _cut(group) == {"5": _as_cut(NEW)}


def _steps(store) -> list[str]:
    """Every crash point one group commit of a re-run passes, in order."""
    group = _group(store)
    group.commit(_stage(group, "5", OLD))
    gtxn = _stage(group, "5", NEW)
    faults.reset()
    group.commit(gtxn)
    return list(faults.seen())


def test_crash_at_every_step_of_a_group_commit_then_recover(request, tmp_path):
    """Local disk; S3 promotion's own steps are crashed by test_crashpoints, and a group
    with a member on S3 is SIGKILLed at one step of each kind by
    test_group_process_kill.py."""
    kind = "local"
    steps = _steps(make_store(kind, request, tmp_path / "probe"))
    assert "group.before_decision" in steps and steps.count("group.after_member") == 2
    assert len(steps) == 13  # 3 group steps, 4 of each member's promotion, 2 after members
    for k in range(1, len(steps) + 1):
        store = make_store(kind, request, tmp_path / f"k{k}")
        group = _group(store)
        group.commit(_stage(group, "5", OLD))
        gtxn = _stage(group, "5", NEW)
        with crash_at(steps, k), pytest.raises(InjectedCrash):
            group.commit(gtxn)
        decided = k > steps.index("group.before_decision") + 1
        # At the crash, the cut shows all old, all new, or (mid-switch) not the epoch.
        assert _cut(_group(store)).get("5") in (_as_cut(OLD), _as_cut(NEW), None), steps[k - 1]
        _group(store).recover()
        want = NEW if decided else OLD
        assert _cut(_group(store)) == {"5": _as_cut(want)}, f"crash at step {k}: {steps[k-1]}"
        if not decided:  # the attempt is still open: it commits now, once
            assert _group(store).commit(gtxn).outcome == "committed"
            assert _cut(_group(store)) == {"5": _as_cut(NEW)}


def test_crash_during_group_recover_then_recover_again(request, tmp_path):
    """A commit dies right after its decision; each recover that follows dies at its
    k-th step, and the next one still finishes every member exactly once.  (Local
    only: the group's steps do not depend on the store, the members' are crashed on
    S3 by test_crashpoints.)"""
    kind = "local"
    probe = make_store(kind, request, tmp_path / "probe")
    group = _group(probe)
    gtxn = _stage(group, "5", NEW)
    with faults.armed("group.after_decision"), pytest.raises(InjectedCrash):
        group.commit(gtxn)
    faults.reset()
    _group(probe).recover()
    steps = list(faults.seen())
    assert steps.count("group.after_member") == 2
    for k in range(1, len(steps) + 1):
        store = make_store(kind, request, tmp_path / f"k{k}")
        group = _group(store)
        gtxn = _stage(group, "5", NEW)
        with faults.armed("group.after_decision"), pytest.raises(InjectedCrash):
            group.commit(gtxn)
        with crash_at(steps, k), pytest.raises(InjectedCrash):
            _group(store).recover()
        assert _cut(_group(store)).get("5") in (_as_cut(NEW), None)
        _group(store).recover()
        assert _cut(_group(store)) == {"5": _as_cut(NEW)}, f"step {k}: {steps[k - 1]}"


def test_a_member_that_fails_its_check_leaves_the_group_undecided_and_nothing_changed(local):
    store = local
    group = _group(store)
    group.commit(_stage(group, "5", OLD))
    gtxn = _stage(group, "5", NEW)
    daily = group.sinks["daily"]
    staged = daily.storage.join(daily.layout.staging("5", gtxn.attempt), "d.parquet")
    daily.storage.put(staged, b"changed after pre-commit")
    before = {n: snapshot(s, include_ledger=True) for n, s in group.sinks.items()}
    with pytest.raises(ManifestError):
        _group(store).commit(gtxn)
    assert {n: snapshot(s, include_ledger=True) for n, s in group.sinks.items()} == before
    assert _group(store).stable_epochs() == {"5": 1}
    assert _cut(group) == {"5": _as_cut(OLD)}
    assert _group(store).abort(gtxn, "bad input") is True
    for name in group.sinks:
        assert _member_state(group, name, "5", gtxn.attempt) == TxnState.ABORTED
    with pytest.raises(InvalidState, match="aborted"):
        _group(store).commit(gtxn)
    assert _cut(group) == {"5": _as_cut(OLD)}


def test_a_member_cannot_be_decided_on_its_own(local):
    store = local
    group = _group(store)
    gtxn = _stage(group, "5", NEW)
    events = Sink(group.sinks["events"].target, NS, storage_options=store[1])
    txn = gtxn.member("events")
    with pytest.raises(GroupMemberError, match="commit the group"):
        events.commit(txn)
    with pytest.raises(GroupMemberError, match="abort the group"):
        events.abort(txn)
    assert events.recover(abort_undecided=True, dry_run=True).aborted == []
    events.recover(abort_undecided=True)  # leaves the member to its group
    assert _member_state(group, "events", "5", 1) == TxnState.PRECOMMITTED
    group.commit(gtxn)
    assert events.commit(txn).outcome == "already_committed"  # decided: a plain roll-forward
    everything = lambda: {p: p.read_bytes() for p in Path(_base(store)).rglob("*")  # noqa: E731
                          if p.is_file()}
    before = everything()
    with pytest.raises(InvalidState, match="COMMITTED"):
        _group(store).abort(gtxn)
    with pytest.raises(InvalidState, match="COMMITTED"):
        events.abort(txn)
    assert everything() == before  # refused before anything is written


def test_a_zombie_group_attempt_is_fenced_and_recover_aborts_it(local):
    store = local
    group = _group(store)
    zombie = _stage(group, "5", OLD)
    live = _stage(_group(store), "5", NEW)
    assert live.attempt == zombie.attempt + 1
    with pytest.raises(FencedError):
        group.commit(zombie)
    with pytest.raises(FencedError):
        group.precommit(zombie)
    _group(store).commit(live)
    report = _group(store).recover()
    assert ("5", zombie.attempt, "superseded") in report.aborted
    for name in group.sinks:
        assert _member_state(group, name, "5", zombie.attempt) == TxnState.ABORTED
    assert _cut(group) == {"5": _as_cut(NEW)}


def test_an_expired_group_attempt_is_aborted_by_recover(local):
    store = local
    group = _group(store, timeout_s=60)
    gtxn = _stage(group, "5", NEW)
    assert _group(store).recover(now=gtxn.started_at + 10).aborted == []
    report = _group(store).recover(now=gtxn.started_at + 61)
    assert report.aborted == [("5", gtxn.attempt, "expired")]
    for name in group.sinks:
        assert _member_state(group, name, "5", gtxn.attempt) == TxnState.EXPIRED
    assert _cut(group) == {}


def test_two_groups_racing_on_a_shared_target(local):
    store = local
    """Group A writes events+daily, group B daily+audit: B's begin fences A on the
    target they share, so A decides nothing and leaves every target as it was."""
    a = _group(store, ("events", "daily"), "_tpc_groups/a")
    b = _group(store, ("daily", "audit"), "_tpc_groups/b")
    ta = _stage(a, "5", OLD)
    tb = _stage(b, "5", {"daily": {"d.parquet": b"daily-b"}, "audit": {"x": b"audit-b"}})
    assert tb.attempt > ta.attempt
    with pytest.raises(FencedError):
        a.commit(ta)
    assert a.stable_epochs() == {} and a.sinks["events"].committed_files() == {}
    b.commit(tb)
    assert _cut(b) == {"5": {"daily": [b"daily-b"], "audit": [b"audit-b"]}}
    a.abort(ta, "fenced")
    assert a.sinks["events"].committed_files() == {}


def test_racing_committers_of_one_group_attempt_decide_once(store):
    group = _group(store)
    gtxn = _stage(group, "5", NEW)
    outcomes = []

    def second(_name: str) -> None:  # another committer runs inside our decision step
        with faults.armed("group.before_decision", lambda _n: None):
            outcomes.append(_group(store).commit(gtxn).outcome)

    with faults.armed("group.before_decision", second):
        outcomes.append(group.commit(gtxn).outcome)
    assert sorted(outcomes) == ["already_committed", "committed"]
    assert _cut(group) == {"5": _as_cut(NEW)}


def test_concurrent_commits_in_threads_publish_once(store):
    group = _group(store)
    gtxn = _stage(group, "5", NEW)
    results, errors = [], []

    def run() -> None:
        try:
            results.append(_group(store).commit(gtxn).outcome)
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and results.count("committed") == 1
    assert _cut(group) == {"5": _as_cut(NEW)}


def test_members_and_namespace_of_a_group_never_change(local):
    store = local
    group = _group(store)
    group.commit(_stage(group, "5", NEW))
    with pytest.raises(Exception, match="members never change"):
        _group(store, ("events", "audit")).begin("6")
    base, options = _base(store), store[1]
    with pytest.raises(Exception, match="folder of its own"):
        Group({"events": Sink(f"{base}/events", NS, storage_options=options)},
              f"{base}/events/_groups", storage_options=options)


def test_a_begin_that_dies_between_members_never_commits_and_recover_aborts_it(local):
    store = local
    group = _group(store)
    points = []

    def die_at_second_member(name: str) -> None:
        points.append(name)
        if len(points) == 2:
            raise InjectedCrash("begin died after the first member")

    with faults.armed("group.begin.before_member", die_at_second_member), \
            pytest.raises(InjectedCrash):
        group.begin("5")
    half = _group(store).transaction("5", 1)  # loads: the missing member as planned
    with pytest.raises(InvalidState):
        _group(store).commit(half)
    gtxn = _stage(_group(store), "5", NEW)
    assert gtxn.attempt == 2
    _group(store).commit(gtxn)
    report = _group(store).recover()
    assert ("5", 1, "superseded") in report.aborted
    assert _member_state(group, "daily", "5", 1) == TxnState.ABORTED  # the member that began
    assert [i.attempt for i in group.sinks["events"].describe("5")] == [2]
    assert _cut(group) == {"5": _as_cut(NEW)}


def test_a_member_number_taken_by_a_racing_writer_aborts_that_group_attempt(local):
    """A writer outside the group takes the attempt number on one member between the
    group's record and that member's begin: the group decides abort for that number
    and begins again above it."""
    store = local
    group = _group(store)
    raced = []

    def outside_begin(_name: str) -> None:
        if not raced:
            raced.append(Sink(group.sinks["events"].target, NS,
                              storage_options=store[1]).begin("5"))

    with faults.armed("group.begin.before_member", outside_begin):
        gtxn = group.begin("5")
    assert raced[0].attempt == 1 and gtxn.attempt == 2
    assert group.poll(GroupTransaction(NS, group.uri, "5", 1, 0, 1, {})).outcome == "abort"
    assert _member_state(group, "daily", "5", 1) == TxnState.ABORTED
    for name, sink in group.sinks.items():
        write_staged(sink, gtxn.member(name), NEW[name])
    group.precommit(gtxn)
    group.commit(gtxn)
    assert _cut(group) == {"5": _as_cut(NEW)}
