"""Issue 32 §3: surviving mutants of ``member_guard.py``, killed with real stores.

A member target reads its group's ledger with its own store's options; a group folder
on another kind of store (here: the group on moto's S3 server, the members on local
disk) cannot be read from the member at all.  Then the member cannot know whether its
group decided commit, so its own recover, gc and abort must keep the staging: the
group's recover (which holds the options of both) still promotes it.  Removing it —
``kept_for_group`` answering False for an unreadable group, mutmut's
``kept_for_group__mutmut_25`` — loses that member's output of a committed epoch while
the other members publish theirs.

The test names avoid the letters "s3": mutmut's test selection (``-k "not s3 ..."``,
pyproject.toml) would drop them, and this path is reached only across two stores.
"""

from __future__ import annotations

import os
import time

import pytest

from airflow_tpc import Sink, TxnState
from airflow_tpc.core.faults import InjectedCrash, armed
from airflow_tpc.core.records import DECISION, AbortDecision
from airflow_tpc.errors import GroupMemberError
from airflow_tpc.group import Group, GroupTransaction

from .helpers import full_tree, write_staged

NS = "etl"
NEW = {"events": {"a.parquet": b"events-new"}, "daily": {"d.parquet": b"daily-new"}}


@pytest.fixture()
def split(tmp_path, s3_options, s3_bucket):
    """(member base folder, group URI on moto's S3, the group's storage options)."""
    return str(tmp_path / "lake"), f"s3://{s3_bucket}/_tpc_groups/etl", s3_options


def _group(split) -> Group:
    """A fresh Group, as a new process opens it: local members, its folder on S3."""
    base, uri, options = split
    return Group({n: Sink(f"{base}/{n}", NS) for n in NEW}, uri, storage_options=options)


def _decided(split) -> tuple[Group, GroupTransaction]:
    """Both members pre-committed, the group's commit decided, its committer dead
    before any member switched."""
    group = _group(split)
    gtxn = group.begin("5")
    for name, sink in group.sinks.items():
        write_staged(sink, gtxn.member(name), NEW[name])
    group.precommit(gtxn)
    with armed("group.after_decision"), pytest.raises(InjectedCrash):
        group.commit(gtxn)
    return group, gtxn


def _without_pending(tree: dict) -> dict:
    """A member's tree but its pending index (recover's bookkeeping, PROTOCOL §5.8)."""
    return {k: v for k, v in tree.items() if "/_tpc/pending/" not in k}


def test_a_member_that_cannot_read_its_group_keeps_its_staging(split):
    """``daily`` holds an abort record of its own (an older build, or a hand) while its
    group, on another store, decided commit.  Its own recover, gc and abort cannot read
    the group: each keeps the staging, byte for byte.  With the record removed, the
    group's recover publishes both members' files."""
    group, gtxn = _decided(split)
    daily = group.sinks["daily"]
    daily.ledger.create_or_get("5", gtxn.attempt, DECISION, AbortDecision(
        "written by hand", False, time.time()).to_doc(NS, daily.target, "5", gtxn.attempt))
    staged = daily.layout.staging("5", gtxn.attempt)
    before = _without_pending(full_tree(daily))
    alone = Sink(daily.target, NS)  # the member alone: no options for the group's store
    alone.recover()
    assert _without_pending(full_tree(daily)) == before
    assert alone.gc(dry_run=True) == [] and alone.gc() == []
    with pytest.raises(GroupMemberError, match="does not confirm its abort from here"):
        alone.abort(gtxn.member("daily"))
    assert _without_pending(full_tree(daily)) == before and os.path.isdir(staged)

    os.remove(daily.layout.record("5", gtxn.attempt, DECISION))  # the operator's fix
    assert _group(split).recover().rolled_forward == [("5", gtxn.attempt)]
    again = _group(split)
    assert again.stable_epochs() == {"5": gtxn.attempt}
    for name, sink in again.sinks.items():
        assert [i.state for i in sink.describe("5")] == [TxnState.COMMITTED], name
        ((uri,),) = sink.committed_files().values()
        assert sink.storage.read_bytes(uri[len("file://"):]) == next(iter(NEW[name].values()))


def test_a_member_that_cannot_read_its_group_finishes_its_own_decided_commit(split):
    """The group decided commit and ``daily``'s own copy of it was written (copies are
    written only after the group's decision, §14.3); the commit died before daily was
    promoted.  daily's own recover cannot read its group, and carries its copy out:
    the member publishes the group's files.  The group's recover finishes the rest."""
    group = _group(split)
    gtxn = group.begin("5")
    for name, sink in group.sinks.items():
        write_staged(sink, gtxn.member(name), NEW[name])
    group.precommit(gtxn)
    with armed("promote.before_marker"), pytest.raises(InjectedCrash):
        group.commit(gtxn)  # daily (first in name order) decided, not yet promoted
    daily = Sink(group.sinks["daily"].target, NS)
    assert [i.state for i in daily.describe("5")] == [TxnState.COMMITTED]
    assert daily.committed_files() == {}
    daily.recover()
    ((uri,),) = daily.committed_files().values()
    assert daily.storage.read_bytes(uri[len("file://"):]) == b"daily-new"
    assert _group(split).recover().rolled_forward == [("5", gtxn.attempt)]
    assert _group(split).stable_epochs() == {"5": gtxn.attempt}


def test_a_member_copy_of_a_commit_is_carried_out_when_its_group_lost_the_record(tmp_path):
    """The group decided commit and ``daily``'s copy was written, then the group's
    ledger of the epoch was lost.  A copy is written only after its group's decision
    (§14.3), so daily's own recover still publishes it — and never reads the missing
    group decision as an abort.  (``events``, undecided, is reported as lost: see
    test_group_lost_folder.py.)"""
    from .test_groups import _group as _local_group

    store = (str(tmp_path / "target"), None)
    group = _local_group(store)
    gtxn = group.begin("5")
    for name, sink in group.sinks.items():
        write_staged(sink, gtxn.member(name), NEW[name])
    group.precommit(gtxn)
    with armed("promote.before_marker"), pytest.raises(InjectedCrash):
        group.commit(gtxn)  # daily (first in name order) decided, not yet promoted
    group.storage.delete_prefix(group.storage.join(group.ledger.layout.root, "_tpc",
                                                   "ledger", "epoch=5"))
    daily = Sink(group.sinks["daily"].target, NS)
    daily.recover()
    ((uri,),) = daily.committed_files().values()
    assert daily.storage.read_bytes(uri[len("file://"):]) == b"daily-new"
