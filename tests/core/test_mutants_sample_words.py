"""Issue 32 §3: the "wording" and "fail closed" survivors of the sampled mutation run
(docs/mutation.md, "Every survivor of the sample, read"), each killed here and checked
against its mutant with ``scripts/mutants_by_hand.py``.

The wording tests pin what an operator relies on in a refusal or a log line: what it
names (the file, the attempt, the group) and its key words, not every word.  A log line
whose arguments no longer fit its format is caught too: pytest's log capture raises on
a record that cannot be formatted.

Real local files everywhere, but for the two object-store-only paths (the copy guard
and the marker's compare-and-swap), which run on Azurite.  No test name here holds
"s3", "seaweed", "rest" or "azure" but those on Azurite (mutmut's ``-k`` leaves those
out: Azurite lives in ``.tools/``, which mutmut's copy has not).
"""

from __future__ import annotations

import hashlib
import json
import os

import pytest

from airflow_tpc import Sink, TxnState
from airflow_tpc.core.faults import InjectedCrash, armed
from airflow_tpc.core.manifest import MANIFEST_NAME, Manifest
from airflow_tpc.core.manifest_codec import canonical_json, digest_of
from airflow_tpc.core.promote import ManifestOnly, strategy_for
from airflow_tpc.core.records import DECISION
from airflow_tpc.errors import LedgerError, ManifestError, TpcError, UnsupportedStorage
from airflow_tpc.storage import LocalStorage

from . import test_group_guards as guards
from .helpers import assert_invariant, committed_contents, full_tree, stage, staging_files

NS = guards.NS


def _lines(caplog, start: str) -> list[str]:
    """The formatted log lines whose format string starts with ``start``."""
    return [r.getMessage() for r in caplog.records if str(r.msg).startswith(start)]


# ------------------------------------------------------------------ wording
def test_a_sealed_manifest_with_malformed_totals_is_refused_naming_it(tmp_path):
    """A sealed manifest whose bytes prove the trusted digest but whose totals are not
    counts (a buggy writer's): refused naming the manifest and the totals
    (``manifest_codec.checked_totals__mutmut_36``: the message lost)."""
    sink = Sink(str(tmp_path / "t"), NS)
    _, manifest = stage(sink, "1", {"a.parquet": b"abc"})
    doc = manifest.to_dict()
    doc.pop("digest")
    doc["totals"] = {**doc["totals"], "files": "one"}
    digest = digest_of(doc)
    data = canonical_json({**doc, "digest": digest})
    with pytest.raises(ManifestError) as err:
        Manifest.parse(data, where="manifest of etl/1/1", trusted=digest)
    assert str(err.value).startswith("manifest of etl/1/1 has malformed totals ")
    assert "'one'" in str(err.value)


def test_a_members_own_recover_says_why_it_keeps_an_aborted_staging(tmp_path, caplog):
    """A member holds an abort of its own (an older build, or a hand) while its group
    has not decided: its own recover keeps the staging and says so, naming the attempt
    and the group (``member_guard.kept_for_group__mutmut_53``: the line's words)."""
    store = (str(tmp_path / "target"), None)
    group = guards._group(store)
    gtxn = guards._stage(group, "5")
    events = group.sinks["events"]
    guards._abort_copy(events, "5", gtxn.attempt)
    with caplog.at_level("INFO", logger="airflow_tpc"):
        Sink(events.target, NS).recover()
    assert set(_lines(caplog, "staging of")) == {
        f"staging of {NS}/5/{gtxn.attempt} kept: its group {group.uri} has not decided "
        "abort; the group's recover carries its abort out"}
    assert os.path.isdir(events.layout.staging("5", gtxn.attempt))


def test_a_member_that_cannot_read_its_group_says_so_and_keeps_its_staging(tmp_path,
                                                                             caplog):
    """A group abort died after its first member's abort; then the group's decision
    record was damaged.  That member's own recover cannot read its group: it keeps the
    staging and says so, naming the attempt and the group
    (``member_guard.kept_for_group__mutmut_14``: the attempt dropped from the line)."""
    store = (str(tmp_path / "target"), None)
    group = guards._group(store)
    gtxn = guards._stage(group, "5")
    with armed("abort.after_decision"), pytest.raises(InjectedCrash):
        group.abort(gtxn, "stop")
    daily = group.sinks["daily"]  # the first member aborted (name order), then the crash
    group.storage.put(group.ledger.layout.record("5", gtxn.attempt, DECISION), b"{damaged")
    with caplog.at_level("INFO", logger="airflow_tpc"):
        Sink(daily.target, NS).recover()
    assert set(_lines(caplog, "staging of")) == {
        f"staging of {NS}/5/{gtxn.attempt} kept: its group {group.uri} cannot be read from "
        "here; the group's recover carries its abort out"}
    assert os.path.isdir(daily.layout.staging("5", gtxn.attempt))


def test_recover_warns_when_published_json_has_no_marker_behind_it(tmp_path, caplog):
    """``published.json`` is there but the epoch's marker is gone: recover does not take
    the claim on trust, and says which attempt and that no marker names it
    (``SinkMaintenance._check_published_claims__mutmut_35``: "none" → "NONE")."""
    sink = Sink(str(tmp_path / "t"), NS)
    txn, _ = stage(sink, "1", {"a.parquet": b"a"})
    sink.commit(txn)
    os.remove(sink.layout.marker("1"))
    with caplog.at_level("WARNING", logger="airflow_tpc"), pytest.raises(TpcError):
        Sink(str(tmp_path / "t"), NS).recover()
    assert _lines(caplog, "epoch %s attempt %d: published.json") == [
        f"epoch 1 attempt {txn.attempt}: published.json is there but the published marker "
        "names attempt none; promoting it again"]


def test_a_member_decision_written_while_its_group_switches_is_refused(tmp_path):
    """While the group's commit switches its members, another writer (an older build, a
    hand) puts an abort into the next member's ledger.  That member is refused, naming
    the record and the group's manifest, and nothing of it is promoted
    (``group.finish.decide_member__mutmut_53``: "Nothing" → "nothing")."""
    store = (str(tmp_path / "target"), None)
    group = guards._group(store)
    gtxn = guards._stage(group, "5")
    events = group.sinks["events"]
    raced: list[str] = []

    def abort_events(_name: str) -> None:  # after "daily", the first in name order
        if not raced:
            raced.append("events")
            guards._abort_copy(events, "5", gtxn.attempt)

    with armed("group.after_member", abort_events), pytest.raises(LedgerError) as err:
        group.commit(gtxn)
    record = events.storage.uri(events.layout.record("5", gtxn.attempt, DECISION))
    assert str(err.value).startswith(f"{record} does not carry its group's commit of "
                                     "manifest sha256:")
    assert str(err.value).endswith("the ledger was changed outside airflow-tpc. Nothing was "
                                   "promoted on its account.")
    assert Sink(events.target, NS).committed_files() == {}


def test_a_marker_whose_manifest_is_gone_is_refused_naming_the_manifest(tmp_path):
    """A version-2 marker names the manifest published with the files; with that file
    removed by hand, readers are refused with its URI (``marker._files_of__mutmut_4``:
    "file://None")."""
    sink = Sink(str(tmp_path / "t"), NS)
    txn, manifest = stage(sink, "1", {"a.parquet": b"a"})
    sink.commit(txn)
    with open(sink.layout.marker("1"), "rb") as fh:
        named = json.load(fh)["manifest"]
    path = sink.storage.join(sink.layout.root, named)
    assert path.endswith(MANIFEST_NAME)
    os.remove(path)
    with pytest.raises(LedgerError) as err:
        Sink(str(tmp_path / "t"), NS).committed_files()
    assert (f"publishes the manifest of digest {manifest.digest}, but the manifest it names, "
            f"{sink.storage.uri(path)}, is missing") in str(err.value)


def test_a_group_begin_logs_the_attempt_the_group_and_its_members(tmp_path, caplog):
    """``Group._try_begin__mutmut_109``: the attempt dropped from the line, whose
    arguments then do not fit it."""
    group = guards._group((str(tmp_path / "target"), None))
    with caplog.at_level("INFO", logger="airflow_tpc"):
        gtxn = group.begin("5")
    assert _lines(caplog, "began group") == [
        f"began group {gtxn.txn_id} of {group.uri} (daily, events)"]


class _NoSwapNoCopy(LocalStorage):
    """A real local store declaring neither capability a move promotion needs (as a
    store without an atomic exchange or a server-side copy would)."""

    atomic_dir_rename = False


def test_a_store_that_can_neither_swap_nor_copy_is_refused_by_name():
    """``promote.strategy_for__mutmut_7``: the refusal lost its words; it names the store
    and the way out, which works for the same store."""
    storage = _NoSwapNoCopy()
    with pytest.raises(UnsupportedStorage) as err:
        strategy_for(storage, "move")
    assert str(err.value) == ("_NoSwapNoCopy can neither swap directories nor copy "
                              "server-side: use promotion='manifest'")
    assert isinstance(strategy_for(storage, "manifest"), ManifestOnly)


def test_a_commit_decision_of_version_1_without_its_manifest_is_refused(tmp_path):
    """A decision record of the first format (the manifest embedded) whose manifest is
    gone: recover refuses naming the record and why, and changes nothing
    (``records._commit_decision__mutmut_16``: the why lost)."""
    sink = Sink(str(tmp_path / "t"), NS)
    txn, _ = stage(sink, "1", {"a.parquet": b"a"})
    sink.commit(txn)
    record = sink.layout.record("1", txn.attempt, DECISION)
    with open(record, "w") as fh:
        json.dump({"outcome": "commit", "decided_at": 1.0}, fh)
    before = full_tree(sink)
    with pytest.raises(TpcError) as err:
        Sink(str(tmp_path / "t"), NS).recover()
    assert (f"ledger record {sink.storage.uri(record)} is a commit decision without a "
            "manifest; records are never rewritten") in str(err.value)
    assert {k: v for k, v in full_tree(sink).items() if "/_tpc/pending/" not in k} == \
        {k: v for k, v in before.items() if "/_tpc/pending/" not in k}


# -------------------------------------------------------------- fail closed
def test_gc_removes_the_staging_an_abort_left_behind(tmp_path):
    """An abort died after its decision: gc removes the staging it left, having asked
    (no group here) whether to keep it."""
    sink = Sink(str(tmp_path / "t"), NS)
    txn, _ = stage(sink, "1", {"a.parquet": b"abc"})
    with armed("abort.after_decision"), pytest.raises(InjectedCrash):
        sink.abort(txn, "upstream data was wrong")
    assert staging_files(sink)
    assert Sink(str(tmp_path / "t"), NS).gc() == [("1", txn.attempt)]
    assert staging_files(sink) == []
    assert [i.state for i in sink.describe("1")] == [TxnState.ABORTED]


def test_a_members_aborted_attempt_below_its_groups_commit_is_removed(tmp_path):
    """Group attempt 1 was left undecided while ``events`` holds an abort of its own for
    it (an older build, or a hand); group attempt 2 commits.  On ``events`` a higher
    commit won, so the aborted attempt's staging is removed by that commit without
    asking the group (``SinkFinish._remove_aborted__mutmut_2``: asked again, the group
    not having decided attempt 1, the staging was kept: a leak)."""
    store = (str(tmp_path / "target"), None)
    group = guards._group(store)
    first = guards._stage(group, "5")
    events = group.sinks["events"]
    guards._abort_copy(events, "5", first.attempt)
    second = guards._stage(guards._group(store), "5")
    guards._group(store).commit(second)
    assert not os.path.isdir(events.layout.staging("5", first.attempt))
    assert os.path.isdir(group.sinks["daily"].layout.staging("5", first.attempt))
    assert guards._cut(guards._group(store)) == {
        "5": {n: sorted(f.values()) for n, f in guards.NEW.items()}}


def test_gc_of_a_member_removes_the_staging_its_group_aborted(tmp_path):
    """A group abort died after its first member's abort: that member's own gc removes
    the staging (its group decided abort), and the other member's is left to the
    group (it holds no abort of its own yet).  (``_clean_finished_staging__mutmut_122/
    129``, which make ``_remove_aborted`` ask the group again, survive this: the second
    question gets the answer the first just got, docs/mutation.md.)"""
    store = (str(tmp_path / "target"), None)
    group = guards._group(store)
    gtxn = guards._stage(group, "5")
    with armed("abort.after_decision"), pytest.raises(InjectedCrash):
        group.abort(gtxn, "stop")
    daily, events = group.sinks["daily"], group.sinks["events"]
    assert Sink(daily.target, NS).gc() == [("5", gtxn.attempt)]
    assert not os.path.isdir(daily.layout.staging("5", gtxn.attempt))
    assert Sink(events.target, NS).gc() == []
    assert os.path.isdir(events.layout.staging("5", gtxn.attempt))


def test_a_group_whose_member_path_ends_in_x_works_beside_a_folder_named_without(tmp_path):
    """A member target whose name ends in "X" (``events_X``) and the group's folder
    beside it named without (``events_``): the group begins, commits and recovers, and
    its members publish (``group.claim.check_members__mutmut_15``,
    ``read_group_claim__mutmut_41``: "X" stripped with the "/" from one side of the
    claim check; ``Group.__init____mutmut_50``: from the target, then taken for the
    group's own folder)."""
    store = (str(tmp_path / "target"), None)
    targets = {"events": "events_X"}
    group = guards._group(store, folder="events_", targets=targets)
    assert group.sinks["events"].target.endswith("/events_X")
    gtxn = guards._stage(group, "5")
    group.commit(gtxn)
    again = guards._group(store, folder="events_", targets=targets)
    again.recover()
    assert again.stable_epochs() == {"5": gtxn.attempt}
    assert guards._cut(again) == {"5": {n: sorted(f.values()) for n, f in guards.NEW.items()}}


@pytest.fixture()
def azure_target(azurite):
    return f"{azurite.new_prefix()}/t", azurite.options()


def test_azure_md5_checksums_of_another_writer_are_no_copy_guard(azure_target):
    """A manifest sealed with MD5 checksums (the format takes them from any writer) on
    Azure, whose ETags are no MD5s: the commit verifies the bytes and publishes; the
    copies are not guarded by those MD5s as if they were ETags
    (``CopyThenSwapMarker.switch__mutmut_10``: every copy refused)."""
    sink = Sink(azure_target[0], NS, storage_options=azure_target[1])
    files = {"a.parquet": b"A" * 100, "p=1/b.parquet": b"B" * 50}
    txn, manifest = stage(sink, "1", files)
    doc = manifest.to_dict()
    doc.pop("digest")
    doc["files"] = [{**f, "checksum": "md5:" + hashlib.md5(files[f["path"]]).hexdigest()}
                    for f in doc["files"]]
    seal = sink.storage.join(sink.layout.sealed("1", txn.attempt), MANIFEST_NAME)
    sink.storage.put(seal, canonical_json({**doc, "digest": digest_of(doc)}))
    assert sink.commit(txn).outcome == "committed"
    assert_invariant(sink, {"1": sorted(files.values())}, open_staging_ok=False)


def test_azure_commit_that_loses_the_marker_race_to_its_own_recover(azure_target):
    """A recover runs beside a commit and publishes the same decided attempt first: the
    commit's compare-and-swap of the marker loses, reads the marker, finds its own
    attempt there and reports the commit done (``marker.swap_marker__mutmut_40``:
    ``is_this(None, ...)``, a TypeError)."""
    sink = Sink(azure_target[0], NS, storage_options=azure_target[1])
    txn, _ = stage(sink, "1", {"a.parquet": b"abc"})
    raced: list[bool] = []

    def recover_first(_name: str) -> None:
        if not raced:
            raced.append(True)
            Sink(azure_target[0], NS, storage_options=azure_target[1]).recover()

    with armed("promote.before_marker", recover_first):
        assert sink.commit(txn).outcome == "committed"
    assert raced == [True]
    assert committed_contents(sink) == {"1": [b"abc"]}
    assert_invariant(sink, {"1": [b"abc"]}, open_staging_ok=False)
