"""Issue 32 §1, bullet 1: a group's consistent cut never mixes attempts.

Group A = {events, daily} publishes epoch 5 at attempt 1; then daily's epoch 5 is
re-committed outside A — by group B = {daily, audit} sharing the target, or by a plain
single-target run of the same namespace.  daily now publishes the other attempt, so A's
cut must leave epoch 5 out (never daily at the other attempt beside events at A's) and
say which member moved on and by what.  Real stores: local disk and moto's S3 server.
"""

from __future__ import annotations

import pytest

from airflow_tpc import Sink
from airflow_tpc.core import faults
from airflow_tpc.group.cut import MovedOn

from .helpers import stage
from .test_groups import NS, _as_cut, _base, _cut, _group, _stage

OLD = {"events": {"a.parquet": b"events-A"}, "daily": {"d.parquet": b"daily-A"}}
B_FILES = {"daily": {"d.parquet": b"daily-B"}, "audit": {"x.parquet": b"audit-B"}}


def _published_a(store):
    a = _group(store, ("events", "daily"), "_tpc_groups/a")
    a.commit(_stage(a, "5", OLD))
    a.commit(_stage(a, "6", OLD))
    assert a.stable_epochs() == {"5": 1, "6": 1}
    return a


def _moved_by_group_b(store):
    b = _group(store, ("daily", "audit"), "_tpc_groups/b")
    gtxn = _stage(b, "5", B_FILES)
    b.commit(gtxn)
    assert gtxn.attempt == 2 and b.stable_epochs() == {"5": 2}
    return MovedOn("5", "daily", 1, 2, "group", b.uri)


def _moved_by_single_target(store):
    daily = Sink(f"{_base(store)}/daily", NS, storage_options=store[1])
    txn, _ = stage(daily, "5", {"d.parquet": b"daily-single"})
    daily.commit(txn)
    assert txn.attempt == 2
    return MovedOn("5", "daily", 1, 2, "single-target")


@pytest.mark.parametrize("move", [_moved_by_group_b, _moved_by_single_target],
                         ids=["another-group", "single-target"])
def test_a_member_recommitted_outside_the_group_leaves_the_epoch_out_of_the_cut(store, move):
    _published_a(store)
    want = move(store)
    fresh = _group(store, ("events", "daily"), "_tpc_groups/a")
    # daily publishes the other attempt now: A's cut never shows it beside events at 1.
    assert fresh.sinks["daily"].committed_files(["5"]) != {}
    assert fresh.stable_epochs() == {"6": 1}
    assert fresh.moved_on() == [want]
    assert _cut(fresh) == {"6": _as_cut(OLD)}
    assert "moved on to attempt 2 of epoch 5" in want.describe()
    # A re-run of epoch 5 by A brings every member back to one group attempt.
    gtxn = _stage(fresh, "5", OLD)
    fresh.commit(gtxn)
    assert gtxn.attempt == 3
    assert fresh.stable_epochs() == {"5": 3, "6": 1} and fresh.moved_on() == []
    assert _cut(fresh) == {"5": _as_cut(OLD), "6": _as_cut(OLD)}


def test_a_recommit_decided_while_the_cut_is_read_leaves_the_epoch_out(tmp_path):
    """The second look of committed_files sees a member decision made after the first
    look (a member's files change only after one): the epoch is left out, not mixed.
    Here the single-target commit of daily lands, switched, between the two looks."""
    store = (str(tmp_path / "target"), None)
    a = _published_a(store)
    daily = Sink(f"{_base(store)}/daily", NS)
    txn, _ = stage(daily, "5", {"d.parquet": b"daily-single"})
    with faults.armed("group.cut.between_looks", lambda _n: daily.commit(txn)):
        files = a.committed_files()
    assert {n: sorted(f) for n, f in files.items()} == {"daily": ["6"], "events": ["6"]}
    assert a.moved_on() == [MovedOn("5", "daily", 1, 2, "single-target")]


def test_group_status_says_which_member_moved_on_and_how(tmp_path):
    """``airflow-tpc group status`` (a real process): the epoch is not stable, and the
    text and ``--json`` name the member, its winning attempt and what committed it."""
    import json
    import subprocess
    import sys

    store = (str(tmp_path / "target"), None)
    a = _published_a(store)
    moved = _moved_by_group_b(store)
    base = _base(store)
    members = [x for n in ("events", "daily") for x in ("--member", f"{n}={base}/{n}")]

    def cli(*extra: str) -> subprocess.CompletedProcess:
        proc = subprocess.run([sys.executable, "-m", "airflow_tpc", "group", "status", a.uri,
                               *members, *extra], capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0 and proc.stderr == "", proc
        return proc

    doc = json.loads(cli("--json").stdout)
    assert doc["stable_epochs"] == {"6": 1}
    assert doc["moved_on"] == [moved.to_dict()] == [{
        "epoch": "5", "member": "daily", "group_attempt": 1, "attempt": 2, "by": "group",
        "group": f"file://{base}/_tpc_groups/b"}]
    five = next(r for r in doc["attempts"] if r["epoch"] == "5")
    assert (five["state"], five["published"], five["stable"]) == ("COMMITTED", True, False)
    lines = cli().stdout.splitlines()
    assert lines[1] == "stable epochs: 6 (attempt 1)"
    assert lines[2] == ("left out of the cut: member daily moved on to attempt 2 of epoch 5, "
                        f"committed by another group (file://{base}/_tpc_groups/b); the "
                        "group's attempt is 1")
    _moved_by_single_target_again(store)
    assert json.loads(cli("--json").stdout)["moved_on"] == [{
        "epoch": "5", "member": "daily", "group_attempt": 1, "attempt": 3,
        "by": "single-target", "group": None}]
    assert "committed by a single-target commit" in cli().stdout


def _moved_by_single_target_again(store) -> None:
    daily = Sink(f"{_base(store)}/daily", NS, storage_options=store[1])
    txn, _ = stage(daily, "5", {"d.parquet": b"daily-single"})
    daily.commit(txn)
    assert txn.attempt == 3
