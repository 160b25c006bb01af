"""Issue 32 §1, bullet 7: a group's folder lost after its decision is reported loudly.

A group commit dies right after its decision (no member decided yet), then the group's
folder is deleted.  Nobody can decide the members now, so the decided commit would be
lost without a word: every recover (the group's, each member's, dry run too) must fail
naming the member attempts, every status must show them and exit non-zero, and none
may publish or drop anything (every target, its staging and ledger, byte for byte).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from airflow_tpc.core.faults import InjectedCrash, armed
from airflow_tpc.errors import TpcError

from .helpers import full_tree
from .test_groups import NEW, OLD, _base, _group, _stage


def _decided_then_lost(store, what: str = "folder"):
    """Epoch 1 published; epoch 2 decided COMMITTED in the group's ledger only; then
    the group's whole folder (or only epoch 2's group ledger) is deleted."""
    group = _group(store)
    group.commit(_stage(group, "1", OLD))
    gtxn = _stage(group, "2", NEW)
    with armed("group.after_decision"), pytest.raises(InjectedCrash):
        group.commit(gtxn)
    root = group.ledger.layout.root
    gone = root if what == "folder" else group.storage.join(root, "_tpc", "ledger", "epoch=2")
    group.storage.delete_prefix(gone)
    return group, gtxn


def _trees(group):
    return {n: full_tree(s) for n, s in group.sinks.items()}


def test_every_recover_fails_loudly_and_changes_no_target(store):
    group, gtxn = _decided_then_lost(store)
    before = _trees(group)
    for name, sink in _group(store).sinks.items():
        with pytest.raises(TpcError, match="group folder does not hold") as err:
            sink.recover(dry_run=True)
        with pytest.raises(TpcError, match="group folder does not hold") as err:
            sink.recover(abort_undecided=True)
        report = err.value.report  # type: ignore[attr-defined]
        ((epoch, attempt, problem),) = report.errors
        assert (epoch, attempt) == ("2", gtxn.attempt) and f"member {name!r}" in problem
        assert "Restore the group's folder" in problem and report.aborted == []
    with pytest.raises(TpcError, match="group folder does not hold"):
        _group(store).recover(abort_undecided=True)
    assert _trees(group) == before  # nothing published, nothing dropped
    assert group.storage.list(group.ledger.layout.root) == []  # the lost folder stays lost
    for sink in group.sinks.values():
        assert list(sink.committed_files()) == ["1"]
        assert [x.epoch for x in sink.lost_group_attempts()] == ["2"]


def test_a_group_ledger_missing_one_attempt_is_lost_too(tmp_path):
    store = (str(tmp_path / "target"), None)
    group, gtxn = _decided_then_lost(store, what="epoch")
    (lost,) = group.sinks["daily"].lost_group_attempts()
    assert (lost.epoch, lost.attempt, lost.group, lost.member) == ("2", 1, group.uri, "daily")
    with pytest.raises(TpcError, match="group folder does not hold"):
        _group(store).recover()


def test_an_intact_group_folder_is_no_problem(tmp_path):
    """The check reports only what is lost: an undecided member attempt whose group
    holds it is left to the group, quietly, as before."""
    store = (str(tmp_path / "target"), None)
    group = _group(store)
    _stage(group, "2", NEW)
    for sink in _group(store).sinks.values():
        assert sink.lost_group_attempts() == []
        assert sink.recover().errors == []


# ---------------------------------------------------------------- the command line
def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "airflow_tpc", *args], capture_output=True,
                          text=True, timeout=300)


def _error_line(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, proc
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    return lines[0]


def _recover_error(proc: subprocess.CompletedProcess) -> str:
    """recover also logs each problem (ERROR) and its progress on stderr: the verdict is
    its last line."""
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: "), proc.stderr
    return last


def test_status_and_recover_commands_report_it_and_exit_non_zero(tmp_path):
    store = (str(tmp_path / "target"), None)
    group, gtxn = _decided_then_lost(store, what="epoch")
    before = _trees(group)
    base = _base(store)
    daily = f"{base}/daily"
    members = [x for n in ("events", "daily") for x in ("--member", f"{n}={base}/{n}")]

    text = _cli("status", daily)
    assert "group folder does not hold" in _error_line(text)
    assert "LOST GROUP ATTEMPT: attempt 1 of epoch 2" in text.stdout  # the status is shown
    doc = _cli("status", daily, "--json")
    _error_line(doc)
    (lost,) = json.loads(doc.stdout)["lost_group_attempts"]
    assert (lost["epoch"], lost["attempt"], lost["member"]) == ("2", gtxn.attempt, "daily")
    assert "group folder does not hold" in _recover_error(_cli("recover", daily))

    gtext = _cli("group", "status", group.uri, *members)
    assert "group folder" in _error_line(gtext) and "LOST GROUP ATTEMPT" in gtext.stdout
    gdoc = _cli("group", "status", group.uri, *members, "--json")
    _error_line(gdoc)
    assert sorted(x["member"] for x in json.loads(gdoc.stdout)["lost_group_attempts"]) == \
        ["daily", "events"]
    assert "group folder does not hold" in _recover_error(_cli("group", "recover", group.uri,
                                                               *members))
    assert _trees(group) == before


def test_group_status_of_a_deleted_group_folder_names_the_member_attempts(tmp_path):
    store = (str(tmp_path / "target"), None)
    group, _ = _decided_then_lost(store)
    before = _trees(group)
    base = _base(store)
    members = [x for n in ("events", "daily") for x in ("--member", f"{n}={base}/{n}")]
    line = _error_line(_cli("group", "status", group.uri, *members))
    assert "holds no airflow-tpc group, but 2 member attempt(s) name it" in line
    assert _trees(group) == before
    line = _error_line(_cli("group", "status", f"{base}/no-group", *members))
    assert "holds no airflow-tpc group (no _tpc/group.json" in line
