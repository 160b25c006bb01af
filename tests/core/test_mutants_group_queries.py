"""Issue 32 §3: surviving or unreached mutants of the group's read-only answers, killed.

What a waiting task (``Group.poll``), a resumed task (``Group.transaction``), a job-side
reader of the cut (``group_cut.read_group_claim``, ``member_staging_roots``) and an
operator (``MovedOn.describe``, ``LostGroupAttempt.to_dict``) are told.  Before, these
were checked only through the CLI in a child process or the Airflow and Spark tests,
none of which mutmut's test set runs.  Real local folders.
"""

from __future__ import annotations

import json
import os

import pytest

from airflow_tpc import Sink, TpcError
from airflow_tpc.core.faults import InjectedCrash, crash_at
from airflow_tpc.errors import InvalidState, LedgerError
from airflow_tpc.group import Group, GroupTransaction
from airflow_tpc.group.cut import MovedOn, member_staging_roots, read_group_claim

from .helpers import stage
from .test_group_cut import B_FILES, _published_a
from .test_groups import NEW, NS, _base, _group, _stage, local  # noqa: F401


# ------------------------------------------------------------------ poll
def test_poll_answers_through_a_group_attempts_life(local):  # noqa: F811
    group = _group(local)
    gtxn = _stage(group, "5", NEW)
    status = _group(local).poll(gtxn)
    assert (status.outcome, status.highest_attempt, status.published, status.reason) == \
        (None, 1, False, None)
    second = _stage(_group(local), "5", NEW)  # a re-run began: the first is fenced
    status = _group(local).poll(gtxn)
    assert (status.outcome, status.highest_attempt, status.published) == (None, 2, False)
    _group(local).abort(gtxn, "superseded by the re-run")
    status = _group(local).poll(gtxn)
    assert (status.outcome, status.highest_attempt, status.published, status.reason) == \
        ("abort", 2, False, "superseded by the re-run")
    _group(local).commit(second)
    status = _group(local).poll(second)
    assert (status.outcome, status.highest_attempt, status.published, status.reason) == \
        ("commit", 2, True, None)


def test_poll_of_an_epoch_the_group_never_began_is_undecided_at_its_own_attempt(local):  # noqa: F811
    """A task polling a transaction whose records are not (or no longer) in the group's
    ledger: undecided, nothing above it, not published — never an error or a guess."""
    group = _group(local)
    gtxn = _stage(group, "5", NEW)
    other = GroupTransaction(NS, group.uri, "6", 3, gtxn.started_at, gtxn.timeout_s, {})
    status = _group(local).poll(other)
    assert (status.outcome, status.highest_attempt, status.published, status.reason) == \
        (None, 3, False, None)
    missing = GroupTransaction(NS, group.uri, "5", 4, gtxn.started_at, gtxn.timeout_s, {})
    status = _group(local).poll(missing)
    assert (status.outcome, status.highest_attempt, status.published) == (None, 1, False)


# ------------------------------------------------------------ transaction
def test_a_transaction_loaded_by_number_is_the_one_begun(local):  # noqa: F811
    """A resumed task loads its group transaction by (epoch, attempt): the very one
    begun (its clock too), which commit accepts."""
    group = _group(local, timeout_s=600)
    gtxn = _stage(group, "5", NEW)
    loaded = _group(local).transaction("5", "1")
    assert loaded == gtxn and (loaded.namespace, loaded.epoch, loaded.started_at,
                               loaded.timeout_s) == (NS, "5", gtxn.started_at, 600.0)
    assert {n: t.to_dict() for n, t in loaded.members.items()} == \
        {n: t.to_dict() for n, t in gtxn.members.items()}
    assert _group(local).commit(loaded).outcome == "committed"


def test_loading_a_transaction_that_is_not_there_names_what_is_missing(local):  # noqa: F811
    group = _group(local)
    _stage(group, "5", NEW)
    with pytest.raises(InvalidState, match=r"group .*etl: no transaction for epoch 5 "
                                           r"attempt 2"):
        _group(local).transaction("5", 2)
    with pytest.raises(LedgerError, match=r"group .*etl epoch 5 attempt 1 has no member "
                                          r"'weekly'"):
        _group(local, names=("events", "daily", "weekly")).transaction("5", 1)


def test_a_member_whose_begin_died_is_loaded_as_the_group_planned_it(local):  # noqa: F811
    """The group's begin record holds every member's planned transaction: a member whose
    own begin never landed is loaded from it (and can be aborted with the group)."""
    group = _group(local)
    with crash_at(["group.begin.before_member"], 2), pytest.raises(InjectedCrash):
        group.begin("5")  # the first member (daily, in name order) began, then the crash
    loaded = _group(local).transaction("5", 1)
    assert sorted(loaded.members) == ["daily", "events"]
    assert loaded.member("events") == group.ledger.read("5", 1, "begin").members["events"]
    assert loaded.member("events").staging_uri.endswith("epoch=5/attempt=000001")
    assert _group(local).abort(loaded, "its begin died") is True
    assert _group(local).poll(loaded).outcome == "abort"


# ------------------------------------------------------- the cut's reader
def test_a_reader_opens_the_group_from_its_claim(local):  # noqa: F811
    """What a job-side reader (spark/readers.py) needs: the group's ledger and claim,
    and each member's staging root from the newest begin."""
    base = _base(local)
    group = _group(local)
    assert member_staging_roots(group.ledger) == {}  # never began: nothing staged
    _stage(group, "5", NEW)
    _stage(_group(local), "6", NEW)
    ledger, claim = read_group_claim(group.uri)
    assert (claim["namespace"], claim["members"]) == (NS, {
        "daily": f"file://{base}/daily", "events": f"file://{base}/events"})
    roots = member_staging_roots(ledger)
    assert roots == {n: Sink(f"{base}/{n}", NS).storage.uri(
        Sink(f"{base}/{n}", NS).layout.staging("6", 1)).rsplit("/", 2)[0]
        for n in ("daily", "events")}
    assert all(not r.endswith(("epoch=6", "attempt=000001")) for r in roots.values())


def test_a_reader_refuses_a_folder_that_holds_no_group(local):  # noqa: F811
    base = _base(local)
    with pytest.raises(TpcError, match=r"file://.*/nowhere holds no airflow-tpc group "
                                       r"\(no _tpc/group.json\): the group's folder is "
                                       r"wrong, or it was lost. Nothing is read from it; "
                                       r"restore the group's folder"):
        read_group_claim(f"{base}/nowhere")
    group = _group(local)
    _stage(group, "5", NEW)
    path = os.path.join(group.ledger.layout.root, "_tpc", "group.json")
    with open(path) as f:
        doc = json.load(f)
    with open(path, "w") as f:
        json.dump({**doc, "format": "airflow-tpc-sink"}, f)
    with pytest.raises(TpcError, match=r"group.json is not a group claim \(format "
                                       r"'airflow-tpc-sink'\); it was edited or damaged"):
        read_group_claim(group.uri)
    with open(path, "w") as f:
        json.dump({**doc, "members": ["daily", "events"]}, f)
    with pytest.raises(TpcError, match="is not a group claim"):
        read_group_claim(group.uri)
    with open(path, "w") as f:
        f.write("{damaged")
    with pytest.raises(LedgerError, match=rf"ledger record file://{path} is corrupt"):
        read_group_claim(group.uri)


# -------------------------------------------------------- operators' words
def test_a_member_that_moved_on_is_described_by_what_moved_it(local):  # noqa: F811
    base = _base(local)
    _published_a(local)
    b = _group(local, ("daily", "audit"), "_tpc_groups/b")
    b.commit(_stage(b, "5", B_FILES))
    (moved,) = _group(local, ("events", "daily"), "_tpc_groups/a").moved_on()
    assert moved.describe() == (
        "member daily moved on to attempt 2 of epoch 5, committed by another group "
        f"(file://{base}/_tpc_groups/b); the group's attempt is 1")
    daily = Sink(f"{base}/daily", NS)
    txn, _ = stage(daily, "5", {"d.parquet": b"daily-single"})
    daily.commit(txn)
    (moved,) = _group(local, ("events", "daily"), "_tpc_groups/a").moved_on()
    assert moved.describe() == (
        "member daily moved on to attempt 3 of epoch 5, committed by a single-target "
        "commit; the group's attempt is 1")
    assert MovedOn("5", "daily", 1, None, "none").describe() == (
        "member daily has no commit of epoch 5 (its ledger lost the group's attempt 1)")


def test_a_lost_group_attempt_is_reported_field_by_field(local):  # noqa: F811
    group = _group(local)
    gtxn = _stage(group, "2", NEW)
    group.storage.delete_prefix(group.ledger.layout.root)
    (lost,) = Sink(group.sinks["daily"].target, NS).lost_group_attempts()
    doc = lost.to_dict()
    assert {k: v for k, v in doc.items() if k != "problem"} == {
        "target": group.sinks["daily"].target, "epoch": "2", "attempt": gtxn.attempt,
        "group": group.uri, "member": "daily"}
    assert doc["problem"] == lost.problem and "does not hold that group attempt" in \
        doc["problem"]


def test_a_group_names_its_folder_and_members_and_logs_its_abort(local, caplog):  # noqa: F811
    group = _group(local)
    assert repr(group) == f"Group({group.uri!r}, members=['daily', 'events'])"
    gtxn = _stage(group, "5", NEW)
    with caplog.at_level("INFO", logger="airflow_tpc"):
        assert _group(local).abort(gtxn, "bad input data") is True
    assert "aborted group etl/5/1: bad input data" in caplog.messages
    caplog.clear()
    with caplog.at_level("INFO", logger="airflow_tpc"):
        assert _group(local).abort(gtxn, "again") is False  # decided already: no new line
    assert not [m for m in caplog.messages if m.startswith("aborted group")]


def test_a_reader_opens_a_group_folder_on_another_store_with_its_options(
        tmp_path, s3_options, s3_bucket):
    """The group's folder on moto's S3 server, its members on local disk: the reader
    reaches the folder with the options it was given (``read_group_claim``'s
    ``storage_options``), as the job side does."""
    base, uri = str(tmp_path / "lake"), f"s3://{s3_bucket}/_tpc_groups/etl"
    group = Group({n: Sink(f"{base}/{n}", NS) for n in NEW}, uri, storage_options=s3_options)
    _stage(group, "5", NEW)
    ledger, claim = read_group_claim(uri, s3_options)
    assert claim["members"] == {n: f"file://{base}/{n}" for n in ("daily", "events")}
    assert sorted(member_staging_roots(ledger)) == ["daily", "events"]
