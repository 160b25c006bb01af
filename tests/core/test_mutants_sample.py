"""Issue 32 §3: survivors of the sampled mutation run (docs/mutation.md, "A sampled
run"), each killed here with real local files and checked against its mutant with
``scripts/mutants_by_hand.py``.

- ``GroupMaintenance.recover__mutmut_28``: recover's ``abort_undecided`` dropped on its
  way to the judgement of an open group attempt, so a restore's "abort everything
  undecided" left an open, unexpired group attempt open (its members' staging kept,
  the next begin fenced by nothing but its attempt number).
- ``SinkQueries._info__mutmut_75``: ``describe`` without an aborted attempt's reason
  (what the CLI's ``status`` and the run page show an operator).
- ``Sink.abort__mutmut_2``: the default reason recorded by an abort.
- ``SinkMaintenance._check_published_claims__mutmut_52/54/55``: the refusal of recover
  when the decision record of the attempt readers see is lost names that record (the
  file an operator must restore).
"""

from __future__ import annotations

import json

import pytest

from airflow_tpc import Sink, TxnState
from airflow_tpc.core.faults import InjectedCrash, armed
from airflow_tpc.core.ledger import Ledger
from airflow_tpc.core.manifest import MANIFEST_NAME
from airflow_tpc.core.records import DECISION
from airflow_tpc.errors import FencedError, NamespaceConflict, PlacementError, TpcError
from airflow_tpc.group import Group

from . import test_group_guards as guards
from .helpers import committed_contents, full_tree, snapshot, stage, staging_files
from .test_groups import NEW, NS, _group, _member_state, _stage


def test_group_recover_abort_undecided_aborts_an_open_attempt_and_only_then(tmp_path):
    store = (str(tmp_path / "target"), None)
    group = _group(store, timeout_s=3600)
    gtxn = _stage(group, "5", NEW)
    assert _group(store).recover().aborted == []  # open, not expired: left alone
    for name in group.sinks:
        assert _member_state(group, name, "5", gtxn.attempt) == TxnState.PRECOMMITTED
    report = _group(store).recover(abort_undecided=True)
    assert report.aborted == [("5", gtxn.attempt, "restore")]
    for name, sink in group.sinks.items():
        assert _member_state(group, name, "5", gtxn.attempt) == TxnState.ABORTED
        assert not sink.storage.list(sink.layout.staging("5", gtxn.attempt))


def test_describe_shows_an_aborted_attempts_reason_and_abort_has_a_default(tmp_path):
    sink = Sink(str(tmp_path / "t"), "events")
    first, _ = stage(sink, "1", {"a.parquet": b"a"})
    sink.abort(first, "spark job failed: OOM")
    second, _ = stage(sink, "2", {"a.parquet": b"b"})
    sink.abort(second)
    infos = {(i.epoch, i.attempt): i for e in ("1", "2") for i in sink.describe(e)}
    assert infos[("1", first.attempt)].state == TxnState.ABORTED
    assert infos[("1", first.attempt)].reason == "spark job failed: OOM"
    assert infos[("2", second.attempt)].reason == "aborted"


def test_recover_names_the_lost_decision_record_of_the_published_attempt(tmp_path):
    sink = Sink(str(tmp_path / "t"), "events")
    txn, _ = stage(sink, "1", {"a.parquet": b"a"})
    sink.commit(txn)
    record = sink.layout.record("1", txn.attempt, DECISION)
    sink.storage.delete_files([record])
    before = full_tree(sink)
    with pytest.raises(TpcError) as err:  # recover's summary quotes the LedgerError
        Sink(str(tmp_path / "t"), "events").recover()
    assert (f"readers see attempt {txn.attempt}, but its decision record "
            f"{sink.storage.uri(record)} is missing") in str(err.value)
    assert record.endswith(f"attempt=00000{txn.attempt}/decision.json")
    assert full_tree(sink) == before


def test_a_groups_refusals_name_what_differs_and_change_nothing(tmp_path):
    """``group/claim.py``'s refusals (``check_namespace__mutmut_6``: the message lost;
    ``check_members__mutmut_25``: its closing words): another namespace, another path
    for a member, each named with both values and "Nothing was changed"."""
    store = (str(tmp_path / "target"), None)
    group = _group(store)
    group.commit(_stage(group, "5", NEW))
    base = str(tmp_path)
    before = {name: full_tree(sink) for name, sink in group.sinks.items()}
    other_ns = Group({n: Sink(f"{base}/{n}", "other") for n in ("events", "daily")},
                     f"{base}/_tpc_groups/etl")
    with pytest.raises(NamespaceConflict) as err:
        other_ns.recover()
    assert str(err.value).startswith(f"group {other_ns.uri} belongs to namespace 'etl', "
                                     "not 'other': ")
    moved = Group({"events": Sink(f"{base}/events", NS),
                   "daily": Sink(f"{base}/elsewhere", NS)}, f"{base}/_tpc_groups/etl")
    with pytest.raises(TpcError) as err:
        moved.recover()
    assert f"member 'daily' of group {moved.uri} is " in str(err.value)
    assert str(err.value).endswith("a group's members never change. Nothing was changed.")
    assert {name: full_tree(sink) for name, sink in group.sinks.items()} == before


def test_recover_names_the_sealed_manifest_a_decided_commit_lost(tmp_path):
    """A commit decided, then its sealed manifest removed by hand before promotion:
    recover refuses by naming that file and the decided digest, publishes nothing and
    keeps staging (``SinkFinish._decided_manifest__mutmut_30``: the message lost)."""
    sink = Sink(str(tmp_path / "t"), "events")
    txn, manifest = stage(sink, "1", {"a.parquet": b"a"})
    with armed("commit.after_decision"), pytest.raises(InjectedCrash):
        sink.commit(txn)
    sealed = sink.storage.join(sink.layout.sealed("1", txn.attempt), MANIFEST_NAME)
    sink.storage.delete_files([sealed])
    before = snapshot(sink, include_ledger=True)  # the pending index is bookkeeping
    staged = staging_files(sink)
    with pytest.raises(TpcError) as err:
        Sink(str(tmp_path / "t"), "events").recover()
    assert (f"its sealed manifest {sink.storage.uri(sealed)} is gone although the commit "
            f"was decided (digest {manifest.digest})") in str(err.value)
    assert snapshot(sink, include_ledger=True) == before and staging_files(sink) == staged
    assert committed_contents(sink) == {}


def test_recover_and_gc_report_progress_by_epoch_in_epoch_order(tmp_path):
    """``progress(epoch, k, n)`` drives the CLI's progress line: each epoch once, in
    epoch order ("2" before "10"), named (``recover__mutmut_27``: plain string order;
    ``_clean_finished_staging__mutmut_18``: the epoch dropped)."""
    sink = Sink(str(tmp_path / "t"), "events")
    for epoch in ("10", "2"):
        stage(sink, epoch, {"a.parquet": epoch.encode()})  # open: kept by both
    seen: list[tuple[str, int, int]] = []
    sink.recover(progress=lambda *args: seen.append(args))
    assert seen == [("2", 1, 2), ("10", 2, 2)]
    seen.clear()
    assert sink.gc(progress=lambda *args: seen.append(args)) == []
    assert seen == [("2", 1, 2), ("10", 2, 2)]


def test_aborting_a_pre_committed_attempt_warns_what_it_discards(tmp_path, caplog):
    """Throwing away sealed output is said loudly, in words an operator can grep for
    (``SinkFinish._remove_aborted__mutmut_26``: the line's words changed unnoticed,
    every test looked for a substring only)."""
    sink = Sink(str(tmp_path / "t"), "events")
    txn, manifest = stage(sink, "1", {"a.parquet": b"abc"})
    with caplog.at_level("WARNING", logger="airflow_tpc"):
        sink.abort(txn, "upstream data was wrong")
    (line,) = [r.getMessage() for r in caplog.records if "DISCARDING" in r.getMessage()]
    assert line.startswith(f"DISCARDING events/1/{txn.attempt}, PRE-COMMITTED (1 files, "
                           f"3 bytes, digest {manifest.digest}")
    assert line.endswith("upstream data was wrong. That output is never published.")


def test_recover_warns_what_it_discards_of_an_attempt_aborted_earlier(tmp_path, caplog):
    """An abort that died after its decision leaves the sealed staging to recover, which
    removes it with the same loud line, saying it was aborted earlier and why."""
    sink = Sink(str(tmp_path / "t"), "events")
    txn, manifest = stage(sink, "1", {"a.parquet": b"abc"})
    with armed("abort.after_decision"), pytest.raises(InjectedCrash):
        sink.abort(txn, "upstream data was wrong")
    caplog.clear()
    with caplog.at_level("WARNING", logger="airflow_tpc"):
        Sink(str(tmp_path / "t"), "events").recover()
    (line,) = [r.getMessage() for r in caplog.records if "DISCARDING" in r.getMessage()]
    assert line.startswith(f"DISCARDING events/1/{txn.attempt}, PRE-COMMITTED (1 files, "
                           f"3 bytes, digest {manifest.digest}")
    assert line.endswith("it was aborted earlier (upstream data was wrong). That output is "
                         "never published.")
    assert staging_files(sink) == []


def test_a_group_decision_naming_a_member_the_group_has_not_is_refused_by_name(tmp_path):
    """The other half of the member check (``GroupFinish._check_before_switch``): a
    decision edited to commit a target that is no member is refused naming it alone
    ("not members: audit"), nothing changed (``__mutmut_23`` put words in the empty
    "missing" half unnoticed)."""
    store = (str(tmp_path / "target"), None)
    group, gtxn = guards._decided(store)
    path = group.ledger.layout.record("5", gtxn.attempt, DECISION)
    doc = json.loads(group.storage.read_bytes(path))
    doc["members"]["audit"] = dict(doc["members"]["daily"])
    group.storage.put(path, Ledger.encode(doc))
    before = guards._everything(store)
    with pytest.raises(TpcError) as err:
        guards._group(store).recover()
    assert ("commits members audit, daily, events, but the group's members (its group.json) "
            "are daily, events (not members: audit); the record was edited or damaged. "
            "Nothing was switched on any member") in str(err.value)
    assert guards._everything(store) == before


def test_a_group_claim_without_a_namespace_of_text_is_refused(tmp_path):
    """``group.json`` edited so its namespace is no string (the format still right) is
    a damaged claim: refused, nothing changed (``read_group_claim__mutmut_17`` accepted
    it when only the format was checked)."""
    store = (str(tmp_path / "target"), None)
    group = _group(store)
    group.commit(_stage(group, "5", NEW))
    root = group.ledger.layout.root
    claim_path = group.storage.join(root, "_tpc", "group.json")
    doc = json.loads(group.storage.read_bytes(claim_path))
    doc["namespace"] = 5
    group.storage.put(claim_path, Ledger.encode(doc))
    before = {name: full_tree(sink) for name, sink in group.sinks.items()}
    with pytest.raises(TpcError) as err:
        _group(store).recover()
    assert f"{group.storage.uri(claim_path)} is not a group claim" in str(err.value)
    assert {name: full_tree(sink) for name, sink in group.sinks.items()} == before


def test_committed_files_come_in_epoch_order(tmp_path):
    """Readers get epochs in epoch order ("2" before "10"), as every listing of this
    package gives them (``SinkQueries.committed_files__mutmut_43``: string order)."""
    sink = Sink(str(tmp_path / "t"), "events")
    for epoch in ("10", "2"):
        txn, _ = stage(sink, epoch, {"a.parquet": epoch.encode()})
        sink.commit(txn)
    assert list(sink.committed_files()) == ["2", "10"]


def test_a_fenced_group_verb_says_which_verb_and_which_attempt_fenced_it(tmp_path):
    """A zombie group attempt's pre-commit and commit are refused naming the verb, the
    zombie and the attempt that fenced it (``Group.precommit__mutmut_14``,
    ``Group._decide_commit__mutmut_3``: the verb lost)."""
    store = (str(tmp_path / "target"), None)
    group = _group(store)
    zombie = _stage(group, "5", NEW)
    live = _group(store).begin("5")
    tail = (f"refused for group {zombie.txn_id}: group attempt {live.attempt} of epoch 5 "
            "has begun since (this attempt is a zombie and its output will never be "
            "published)")
    with pytest.raises(FencedError) as err:
        group.precommit(zombie)
    assert str(err.value) == "pre-commit " + tail
    with pytest.raises(FencedError) as err:
        group.commit(zombie)
    assert str(err.value) == "commit " + tail


def test_a_group_record_copied_to_another_epoch_is_refused_naming_both(tmp_path):
    """A group's begin record copied into another epoch's folder is refused naming the
    file and what it names instead (``parse_group_record__mutmut_37/38``,
    ``GroupLedger._parse__mutmut_2``: the message lost its parts)."""
    store = (str(tmp_path / "target"), None)
    group = _group(store)
    gtxn = _stage(group, "5", NEW)
    group.commit(gtxn)
    layout, storage = group.ledger.layout, group.storage
    copy = layout.record("6", 1, "begin")
    storage.put(copy, storage.read_bytes(layout.record("5", gtxn.attempt, "begin")))
    with pytest.raises(TpcError) as err:
        _group(store).recover()
    assert (f"group ledger record {storage.uri(copy)} names group {group.uri!r} epoch '5' "
            f"attempt {gtxn.attempt}, not this one; it was edited, copied from elsewhere or "
            "damaged") in str(err.value)


def test_a_group_folder_holding_targets_is_refused_counting_them(tmp_path):
    """A group folder that holds three targets is refused naming the first and counting
    the rest (``check_group_folder__mutmut_71``: "and 1 more")."""
    base = tmp_path / "target"
    for name in ("a", "b", "c"):
        sink = Sink(str(base / "lake" / name), NS)
        txn, _ = stage(sink, "1", {"x.parquet": b"x"})
        sink.commit(txn)
    with pytest.raises(PlacementError) as err:
        guards._group((str(base / "t"), None), folder="lake").begin("5")
    assert str(err.value).endswith(
        f"it contains target file://{base}/lake/a and 2 more. Nothing was written; give the "
        "group a folder apart from every target.")


def test_a_rerun_warns_of_exactly_the_files_put_in_the_epoch_by_hand(tmp_path, caplog):
    """Replacing an epoch folder names, in one WARNING, the files a user put there by
    hand (the commit replaces the epoch whole): never the files the previous attempt
    published, never a hidden one (``_x``, ``.x`` or under ``_d/``), no "..." for a short
    list (``promote.check_displaced__mutmut_38/57/83/115``: the previous attempt's files
    named, the hidden test or the "..." changed, unnoticed)."""
    sink = Sink(str(tmp_path / "t"), "events")
    first, _ = stage(sink, "1", {"a.parquet": b"a", "b.parquet": b"b"})
    sink.commit(first)
    folder = tmp_path / "t" / "epoch=1"
    (folder / "notes.txt").write_bytes(b"mine")
    (folder / "_d").mkdir()
    (folder / "_d" / "x.txt").write_bytes(b"hidden")
    (folder / ".x").write_bytes(b"hidden")
    (folder / "_x").write_bytes(b"hidden")
    second, _ = stage(sink, "1", {"a.parquet": b"a2"})
    with caplog.at_level("WARNING", logger="airflow_tpc"):
        sink.commit(second)
    (line,) = [r.getMessage() for r in caplog.records if "by hand" in r.getMessage()]
    assert line.endswith("1 file(s) in file://" + str(folder) + " were not published by "
                         "airflow-tpc (put there by hand?) and are replaced by this commit, "
                         "as the whole epoch is: notes.txt")
    assert committed_contents(sink) == {"1": [b"a2"]}
