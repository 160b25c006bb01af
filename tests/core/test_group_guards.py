"""Group guards (issue 32 §1): what is checked before any member is switched or anything
is written.

* a group decision whose members differ from ``group.json`` is refused, naming the
  difference, before any member switches;
* every member's own copy of the decision is checked before any member switches, and
  no recover, gc or abort (the group's or the member's own) removes the staging of a
  member whose group decided commit;
* a group folder at, inside or around a target, and a target at, inside or around a
  group folder, are refused both ways; one target given twice (a symbolic link) is
  refused when the Group is built, naming both spellings;
* ``Group.recover()`` (and commit, abort) from the API with a subset of the members, or
  another target under a member's name, is refused before anything is written.

Every refusal is one clear error and changes nothing, byte for byte: every target, its
staging and ledger, and the group's folder.  Real local folders; the API checks also on
moto's S3 server.
"""

from __future__ import annotations

import json
import os
import time

import pytest

from airflow_tpc import PlacementError, Sink, TpcError, TxnState
from airflow_tpc.core.faults import InjectedCrash, armed
from airflow_tpc.core.ledger import Ledger
from airflow_tpc.core.records import DECISION, AbortDecision
from airflow_tpc.errors import GroupMemberError, InvalidState, LedgerError
from airflow_tpc.group import Group, GroupTransaction

from .helpers import local_tree, write_staged

NS = "etl"
NEW = {"events": {"a.parquet": b"events-new"}, "daily": {"d.parquet": b"daily-new"}}


def _base(store) -> str:
    return store[0].rsplit("/", 1)[0]


def _group(store, names=("events", "daily"), folder="_tpc_groups/etl",
           targets: dict[str, str] | None = None) -> Group:
    """A fresh Group, as a new process opens it (``targets``: member -> its folder)."""
    base, options = _base(store), store[1]
    sinks = {n: Sink(f"{base}/{(targets or {}).get(n, n)}", NS, storage_options=options)
             for n in names}
    return Group(sinks, f"{base}/{folder}", storage_options=options)


def _stage(group: Group, epoch: str) -> GroupTransaction:
    gtxn = group.begin(epoch)
    for name, sink in group.sinks.items():
        write_staged(sink, gtxn.member(name), NEW[name])
    group.precommit(gtxn)
    return gtxn


def _decided(store) -> tuple[Group, GroupTransaction]:
    """Epoch 4 committed (the group's and members' pending indexes are built); epoch 5
    decided COMMITTED, its committer dead before any member switched."""
    group = _group(store)
    group.commit(_stage(group, "4"))
    gtxn = _stage(group, "5")
    with armed("group.after_decision"), pytest.raises(InjectedCrash):
        group.commit(gtxn)
    return group, gtxn


def _everything(store) -> dict:
    """Every file of the test's store folder: every target, its staging and ledger, the
    group's folder, byte for byte (links as their destination, never followed)."""
    base, options = _base(store), store[1]
    if not base.startswith("s3://"):
        return local_tree(base)
    storage = Sink(f"{base}/probe", NS, storage_options=options).storage
    prefix = base[len("s3://"):]
    return {i.path: storage.read_bytes(i.path) for i in storage.list(prefix)}


def _cut(group: Group) -> dict[str, dict[str, list[bytes]]]:
    out: dict[str, dict[str, list[bytes]]] = {}
    for name, per_epoch in group.committed_files().items():
        storage = group.sinks[name].storage
        for epoch, uris in per_epoch.items():
            out.setdefault(epoch, {})[name] = sorted(
                storage.read_bytes(u.split("://", 1)[1] if u.startswith("s3://")
                                   else u[len("file://"):]) for u in uris)
    return out


@pytest.fixture()
def local(tmp_path):
    return str(tmp_path / "target"), None


# ----------------------------------------------------- the decision vs group.json
def test_a_decision_with_a_member_dropped_is_refused_before_any_switch(local):
    """Hand-edited: ``daily`` removed from the group's decision.  Rolled forward, it
    would switch ``events`` alone and mark the epoch published: a mixed cut."""
    group, gtxn = _decided(local)
    path = group.ledger.layout.record("5", gtxn.attempt, DECISION)
    doc = json.loads(group.storage.read_bytes(path))
    del doc["members"]["daily"]
    group.storage.put(path, Ledger.encode(doc))
    before = _everything(local)
    with pytest.raises(TpcError, match=r"commits members events, but the group's members "
                                       r"\(its group.json\) are daily, events \(missing daily\)"):
        _group(local).recover()
    assert _everything(local) == before
    with pytest.raises(LedgerError, match=r"missing daily.*Nothing was switched on any member"):
        _group(local).commit(gtxn)
    assert _everything(local) == before
    assert _group(local).stable_epochs() == {"4": 1} and "5" not in _cut(group)


# ------------------------------------------------ every member's copy, first
def _abort_copy(sink: Sink, epoch: str, attempt: int) -> None:
    """A member's own abort record, as an older build or a hand wrote it."""
    sink.ledger.create_or_get(epoch, attempt, DECISION, AbortDecision(
        "written by hand", False, time.time()).to_doc(NS, sink.target, epoch, attempt))


def test_a_member_copy_that_disagrees_switches_no_member_and_keeps_its_staging(local):
    """``events`` (switched after ``daily``, in name order) holds an abort of its own
    while its group decided commit: no member is switched, the error names the member,
    and neither the group's recover nor the member's own recover, gc or abort removes
    its staging.  Once the record is removed, the group's recover finishes the epoch."""
    group, gtxn = _decided(local)
    events = group.sinks["events"]
    _abort_copy(events, "5", gtxn.attempt)
    staged = events.layout.staging("5", gtxn.attempt)
    before = _everything(local)
    with pytest.raises(TpcError, match=r"member 'events' of group .* holds its own decision "
                                       r".*ABORTED, but its group decided commit"):
        _group(local).recover()
    assert _everything(local) == before
    with pytest.raises(LedgerError, match="Nothing was switched on any member"):
        _group(local).commit(gtxn)
    assert _everything(local) == before
    alone = Sink(events.target, NS)
    with pytest.raises(TpcError, match="but the group decided commit"):
        alone.recover()
    assert alone.gc(dry_run=True) == [] and alone.gc() == []  # kept, and said so
    with pytest.raises(LedgerError, match="but the group decided commit"):
        alone.abort(gtxn.member("events"))
    assert _everything(local) == before and os.path.isdir(staged)
    os.remove(events.layout.record("5", gtxn.attempt, DECISION))  # the operator's fix
    assert _group(local).recover().rolled_forward == [("5", gtxn.attempt)]
    assert _cut(group)["5"] == {n: sorted(f.values()) for n, f in NEW.items()}


def test_a_member_that_holds_an_abort_before_the_group_decides_is_never_committed(local):
    group = _group(local)
    gtxn = _stage(group, "5")
    _abort_copy(group.sinks["events"], "5", gtxn.attempt)
    before = _everything(local)
    with pytest.raises(InvalidState, match="member 'events' .* already holds an abort"):
        _group(local).commit(gtxn)
    assert _everything(local) == before
    # Its own abort or recover keeps its staging while the group has not decided abort.
    alone = Sink(group.sinks["events"].target, NS)
    with pytest.raises(GroupMemberError, match="does not confirm its abort"):
        alone.abort(gtxn.member("events"))
    alone.recover()  # builds its pending index (its first full listing); nothing else

    def records_and_files() -> dict:
        return {k: v for k, v in _everything(local).items() if "/_tpc/pending/" not in k}
    assert records_and_files() == {k: v for k, v in before.items() if "/_tpc/pending/" not in k}
    _group(local).abort(gtxn, "its member was aborted")  # the way out: the group aborts
    for name, sink in group.sinks.items():
        assert [i.state for i in sink.describe("5")] == [TxnState.ABORTED], name
        assert not os.path.isdir(sink.layout.staging("5", gtxn.attempt))


def test_a_member_aborted_by_its_group_is_still_cleaned_by_its_own_recover(local):
    """The guard keeps a member's staging only while its group may still publish it:
    a group abort whose cleanup died is finished by the member's own recover too."""
    group = _group(local)
    gtxn = _stage(group, "5")
    with armed("abort.after_decision"), pytest.raises(InjectedCrash):
        group.abort(gtxn, "stop")
    daily = group.sinks["daily"]  # the first member aborted (name order), then the crash
    staged = daily.layout.staging("5", gtxn.attempt)
    assert os.path.isdir(staged)
    Sink(daily.target, NS).recover()
    assert not os.path.isdir(staged)


# ------------------------------------------------------------ placement
def test_a_group_folder_at_inside_or_around_a_target_is_refused(local):
    base = _base(local)
    other = Sink(f"{base}/lake/t", NS)
    txn = other.begin("1")
    write_staged(other, txn, {"x.parquet": b"x"})
    other.precommit(txn)
    other.commit(txn)
    before = _everything(local)
    for folder, what in (("lake/t", "it is the folder of target"),
                         ("lake/t/groups", "it lies inside target"),
                         ("lake", "it contains target")):
        with pytest.raises(PlacementError, match=f"group folder .*{folder} refused: {what}"):
            _group(local, folder=folder).begin("5")
        assert _everything(local) == before, folder
    assert other.recover().errors == [] and other.committed_files()


def test_a_target_at_inside_or_around_a_group_folder_is_refused(local):
    group, _ = _decided(local)
    base = _base(local)
    before = _everything(local)
    for rel, what in (("_tpc_groups/etl", "it is the folder of group"),
                      ("_tpc_groups/etl/inner", "it lies inside the folder of group"),
                      ("_tpc_groups", "it contains the folder of group")):
        with pytest.raises(PlacementError, match=f"target .*{rel} refused: {what}"):
            Sink(f"{base}/{rel}", NS).begin("1")
        assert _everything(local) == before, rel
    assert _group(local).recover().rolled_forward == [("5", 1)]


def test_one_target_under_two_spellings_is_refused_when_the_group_is_built(local):
    base = _base(local)
    os.makedirs(f"{base}/events")
    os.symlink(f"{base}/events", f"{base}/alias")
    before = _everything(local)
    with pytest.raises(TpcError, match=rf"members 'alias' \(file://{base}/alias\) and "
                                       rf"'events' \(file://{base}/events\) .* are one target"):
        Group({"events": Sink(f"{base}/events", NS), "alias": Sink(f"{base}/alias", NS)},
              f"{base}/_tpc_groups/etl")
    os.symlink(f"{base}/events", f"{base}/glink")  # the group's folder through a link
    with pytest.raises(TpcError, match="lie inside one another"):
        Group({"events": Sink(f"{base}/events", NS)}, f"{base}/glink/groups")
    assert {k: v for k, v in _everything(local).items() if "glink" not in k} == before


# --------------------------------------------- the API checks group.json first
def test_the_api_refuses_a_subset_or_another_target_before_writing(store):
    group, gtxn = _decided(store)
    base = _base(store)
    stray = Sink(f"{base}/other", NS, storage_options=store[1])
    txn = stray.begin("1")  # a claimed target, not a member
    write_staged(stray, txn, {"o.parquet": b"o"})
    before = _everything(store)
    subset = _group(store, names=("events",))
    with pytest.raises(TpcError, match=r"created with members daily \(.*\), events \(.*\); "
                                       r"this Group names events \(missing daily\)"):
        subset.recover()
    with pytest.raises(TpcError, match=r"missing daily"):
        subset.abort(GroupTransaction(NS, group.uri, "5", gtxn.attempt, 0, 1, {}))
    swapped = _group(store, targets={"daily": "other"})
    with pytest.raises(TpcError, match=r"member 'daily' of group .* is .*/daily, not "
                                       r".*/other"):
        swapped.recover()
    with pytest.raises(TpcError, match=r"member 'daily' of group .* is .*/daily, not"):
        swapped.commit(gtxn)
    assert _everything(store) == before
    assert _group(store).recover().rolled_forward == [("5", gtxn.attempt)]
