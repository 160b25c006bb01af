"""Issue 32 §3: survivors of the second sampled mutation run (seed 2, docs/mutation.md
"A second sample"), each killed here with real local files and checked against its
mutant with ``scripts/mutants_by_hand.py``.

- ``sink_trust.record_validated__mutmut_29``: a failed write of ``validated.json``
  reported as written.
- ``SinkQueries.describe__mutmut_27``: ``describe`` blind to a committed attempt's
  being superseded by a higher decided attempt whose roll-forward has not run yet.
- ``SinkQueries._info__mutmut_71``: ``describe`` without a committed attempt's rows.
- ``SinkMaintenance._commit_failed__mutmut_28``: recover crashing (``AttributeError``)
  instead of reporting a commit it cannot finish when the attempt's begin record is lost.
- ``Group._decide_commit__mutmut_43``: ``force=True`` not passed on to the members, so
  the forced commit of an expired group was refused by its first member.
- ``GroupFinish._roll_forward_pending__mutmut_11``: a group commit rolled forward only
  its own epoch from the pending index, leaving an earlier decided, unfinished group
  attempt unpublished (its members' readers without the epoch until a recover).
- ``Group._decide_abort__mutmut_55``: the crash point after a group's abort decision
  renamed, so no crash test could stop a process there.
"""

from __future__ import annotations

import json
import logging
import os

import pytest

from airflow_tpc import Sink, SinkConfig, TxnState
from airflow_tpc.core.faults import InjectedCrash, armed
from airflow_tpc.core.records import BEGIN, VALIDATED
from airflow_tpc.core.sink_trust import record_validated
from airflow_tpc.errors import LedgerError, PlacementError, TpcError, TransactionExpired
from airflow_tpc.group import Group

from .helpers import committed_contents, stage, write_staged
from .test_groups import NEW, NS, _group, _member_state, _stage

FILES = {"a.parquet": b"rows of a", "b.parquet": b"rows of b"}


def test_a_validation_record_that_cannot_be_written_is_reported_as_not_written(tmp_path,
                                                                               caplog):
    """``record_validated`` is best effort: when the record cannot be written (here a
    damaged one stands in its place) it says so — False and a WARNING naming the
    transaction — and the commit then decodes the manifest in full, as it must."""
    sink = Sink(str(tmp_path / "t"), "trust")
    txn, manifest = stage(sink, "1", FILES)
    path = sink.layout.record("1", txn.attempt, VALIDATED)
    sink.storage.put(path, b"{ not json")
    with caplog.at_level(logging.WARNING, logger="airflow_tpc"):
        assert record_validated(sink.ledger, manifest, "sensor") is False
    assert f"could not record that {txn.txn_id}'s manifest" in caplog.text
    assert sink.storage.read_bytes(path) == b"{ not json"


def test_describe_says_a_committed_attempt_is_superseded_as_soon_as_a_higher_one_decides(
        tmp_path):
    """Between a re-run's decision and its roll-forward (a committer that died after
    deciding), the first attempt is no longer what the epoch will hold: ``describe``
    says so from the decisions alone, before any ``superseded.json`` is written."""
    sink = Sink(str(tmp_path / "t"), "runs")
    first, m1 = stage(sink, "1", {"a.parquet": b"first"})
    sink.commit(first, expected_digest=m1.digest)
    second, m2 = stage(sink, "1", {"a.parquet": b"second"})
    with armed("commit.after_decision"), pytest.raises(InjectedCrash):
        sink.commit(second, expected_digest=m2.digest)
    infos = {i.attempt: i for i in sink.describe("1")}
    assert infos[first.attempt].state is TxnState.COMMITTED
    assert infos[first.attempt].superseded is True
    assert infos[second.attempt].superseded is False
    assert committed_contents(sink) == {"1": [b"first"]}  # not rolled forward yet


def test_describe_gives_a_committed_attempts_files_bytes_and_rows(tmp_path):
    sink = Sink(str(tmp_path / "t"), "runs")
    txn = sink.begin("1")
    write_staged(sink, txn, FILES)
    manifest = sink.precommit(txn, rows={"a.parquet": 3, "b.parquet": 4})
    sink.commit(txn, expected_digest=manifest.digest)
    [info] = sink.describe("1")
    assert (info.files, info.bytes, info.rows) == (2, sum(map(len, FILES.values())), 7)


def test_recover_reports_a_commit_it_cannot_finish_whose_begin_record_is_lost(tmp_path):
    """A decided attempt whose promotion fails (a file added to its staging after the
    decision) and whose ``begin.json`` is gone (a damaged ledger): recover reports the
    error for that epoch and publishes nothing, with the configured timeout standing in
    for the lost record's."""
    sink = Sink(str(tmp_path / "t"), "runs")
    txn, manifest = stage(sink, "1", FILES)
    with armed("commit.after_decision"), pytest.raises(InjectedCrash):
        sink.commit(txn, expected_digest=manifest.digest)
    write_staged(sink, txn, {"straggler.parquet": b"late"})
    begin = sink.layout.record("1", txn.attempt, BEGIN)
    sink.storage.delete_files([begin])
    with pytest.raises(TpcError, match="could not finish 1 decided commit") as err:
        Sink(str(tmp_path / "t"), "runs").recover(ignore_failures_after_timeout=True)
    report = err.value.report  # type: ignore[attr-defined]
    assert [(e, a) for e, a, _ in report.errors] == [("1", txn.attempt)]
    assert "straggler.parquet" in report.errors[0][2]
    assert report.abandoned == []
    assert committed_contents(sink) == {}


def test_a_forced_commit_of_an_expired_group_reaches_every_member(tmp_path):
    """``force=True`` is the operator's word for the whole group: each member's own
    check of its attempt (expired too: the members' timeouts are their own sinks') must
    take it as well, or the group could never be committed past its timeout."""
    base = str(tmp_path)
    sinks = {n: Sink(f"{base}/{n}", NS, config=SinkConfig(timeout_s=0.001))
             for n in ("events", "daily")}
    group = Group(sinks, f"{base}/_tpc_groups/etl", timeout_s=0.001)
    gtxn = _stage(group, "5", NEW)
    assert gtxn.expired() and all(gtxn.member(n).expired() for n in sinks)
    with pytest.raises(TransactionExpired, match="commit with force=True"):
        group.commit(gtxn)
    result = group.commit(gtxn, force=True)
    assert result.outcome == "committed"
    for name, sink in group.sinks.items():
        assert _member_state(group, name, "5", gtxn.attempt) is TxnState.COMMITTED
        assert committed_contents(sink) == {"5": sorted(NEW[name].values())}


def test_a_group_commit_rolls_forward_an_earlier_decided_epoch_the_index_names(tmp_path):
    """The pending index exists once a group has committed; a later commit finishes
    every other decided, unfinished group attempt it names (a committer that died after
    its decision), not only its own epoch."""
    store = (str(tmp_path / "target"), None)
    group = _group(store)
    first = _stage(group, "1", NEW)
    group.commit(first)
    assert group.ledger.pending() is not None  # the index, not a full listing
    second = _stage(group, "2", NEW)
    with armed("group.after_decision"), pytest.raises(InjectedCrash):
        _group(store).commit(second)
    third = _stage(_group(store), "3", NEW)
    result = _group(store).commit(third)
    assert ("2", second.attempt) in result.rolled_forward
    for name, sink in group.sinks.items():
        assert set(committed_contents(sink)) == {"1", "2", "3"}, name


def test_a_group_abort_can_be_stopped_right_after_its_decision_and_recovered(tmp_path):
    """``group.abort.after_decision`` is where a crash test stops a group abort (the
    process-kill tests arm it by name): the decision stands, the members are aborted
    by the next recover."""
    store = (str(tmp_path / "target"), None)
    group = _group(store)
    gtxn = _stage(group, "5", NEW)
    with armed("group.abort.after_decision"), pytest.raises(InjectedCrash):
        group.abort(gtxn, "operator")
    for name in group.sinks:
        assert _member_state(group, name, "5", gtxn.attempt) is TxnState.PRECOMMITTED
    _group(store).recover()
    for name, sink in group.sinks.items():
        assert _member_state(group, name, "5", gtxn.attempt) is TxnState.ABORTED
        assert not sink.storage.list(sink.layout.staging("5", gtxn.attempt))


def test_a_rerun_in_manifest_mode_removes_the_copies_an_earlier_attempt_published(
        s3_options, s3_bucket):
    """On an object store, epoch 1 published by copy (attempt-tagged keys in the epoch
    folder), then re-run with ``promotion="manifest"``: the re-run's files are read
    where they were staged, and its clean-up removes the displaced attempt's copies —
    readers list the marker's files only, but the copies would be left behind forever
    (``ManifestOnly.clean__mutmut_6``: the clean-up compared their tags with None)."""
    target = f"s3://{s3_bucket}/t"
    copying = Sink(target, "modes", storage_options=s3_options)
    first, m1 = stage(copying, "1", {"p.parquet": b"old", "day=1/q.parquet": b"old q"})
    copying.commit(first, expected_digest=m1.digest)
    folder = copying.layout.published_dir("1").rstrip("/") + "/"
    assert sorted(o.path[len(folder):] for o in copying.storage.list(folder)) == [
        "_tpc_published.json", "a000001-p.parquet", "day=1/a000001-q.parquet"]
    manifest_mode = Sink(target, "modes", storage_options=s3_options,
                         config=SinkConfig(promotion="manifest"))
    second, m2 = stage(manifest_mode, "1", {"p.parquet": b"new"})
    assert manifest_mode.commit(second, expected_digest=m2.digest).outcome == "committed"
    assert committed_contents(manifest_mode) == {"1": [b"new"]}
    assert [o.path[len(folder):] for o in copying.storage.list(folder)] == ["_tpc_published.json"]


def test_a_target_at_a_group_folder_is_refused_saying_why_and_what_to_do(tmp_path):
    """``placement.check_claims_around``'s refusal of a target that *is* a group's
    folder says what would break and that nothing was written (mutants 52 and 55 of the
    sample reworded exactly those sentences)."""
    store = (str(tmp_path / "target"), None)
    group = _group(store)
    group.commit(_stage(group, "5", NEW))
    with pytest.raises(PlacementError) as err:
        Sink(group.uri, NS).begin("1")
    assert "the target's ledger and the group's would be one and damage each other. " \
           "Nothing was written; choose a folder that is no group's." in str(err.value)


def test_a_staging_root_inside_a_published_epoch_folder_is_refused_by_its_reason(tmp_path):
    root = str(tmp_path / "t")
    with pytest.raises(TpcError) as err:
        Sink(root, NS, config=SinkConfig(staging_root=f"{root}/epoch=1/scratch")).begin("1")
    assert str(err.value).endswith(
        f"cannot hold the staging of file://{root}: it lies inside a published epoch folder")
    assert not os.path.exists(f"{root}/epoch=1")


def test_a_begin_record_naming_other_staging_is_refused_naming_that_staging(tmp_path):
    """``begin.json`` says where the attempt staged; one that names another folder (a
    changed ``staging_root``, a copied record) is refused naming the folder it names."""
    sink = Sink(str(tmp_path / "t"), NS)
    txn, _ = stage(sink, "1", FILES)
    path = sink.layout.record("1", txn.attempt, BEGIN)
    doc = json.loads(sink.storage.read_bytes(path))
    doc["staging_uri"] = "file:///elsewhere/epoch=1/attempt=000001"
    sink.storage.put(path, json.dumps(doc).encode())
    with pytest.raises(LedgerError) as err:
        Sink(str(tmp_path / "t"), NS).describe("1")
    assert "names staging 'file:///elsewhere/epoch=1/attempt=000001', but this " \
           "attempt's staging is" in str(err.value)


def test_a_published_marker_whose_attempt_is_a_boolean_is_corrupt(tmp_path):
    """JSON's ``true`` is a Python ``int``: a marker saying ``"attempt": true`` must be
    refused as corrupt, not read as attempt 1."""
    sink = Sink(str(tmp_path / "t"), NS)
    txn, manifest = stage(sink, "1", FILES)
    sink.commit(txn, expected_digest=manifest.digest)
    marker = sink.layout.marker("1")
    doc = json.loads(sink.storage.read_bytes(marker))
    assert doc["attempt"] == 1
    sink.storage.put(marker, json.dumps({**doc, "attempt": True}).encode())
    with pytest.raises(LedgerError, match="published marker .* is corrupt"):
        sink.committed_files()


def test_a_target_whose_name_ends_in_x_reads_its_own_records(tmp_path):
    """Records name their target; the comparison ignores only a trailing ``/`` (a mutant
    that stripped ``X`` too refused every record of a target named ``...X``)."""
    sink = Sink(str(tmp_path / "eventsX"), NS)
    txn, manifest = stage(sink, "1", FILES)
    assert sink.commit(txn, expected_digest=manifest.digest).outcome == "committed"
    [info] = Sink(str(tmp_path / "eventsX"), NS).describe("1")
    assert info.state is TxnState.COMMITTED and info.published
