"""``Group.recover(dry_run=True)`` and ``airflow-tpc group recover --dry-run`` (issue 34
§2): the group's plan — a decided commit switched on each member, a stale undecided
attempt aborted on each member that began it — changes nothing, byte for byte, and is
what the real group recover then reports done."""

from __future__ import annotations

import pytest

from airflow_tpc import Sink
from airflow_tpc.cli import main
from airflow_tpc.core.faults import InjectedCrash, armed
from airflow_tpc.group import Group

from .helpers import local_tree, write_staged


def _group(tmp_path) -> Group:
    return Group({n: Sink(str(tmp_path / n), "etl") for n in ("events", "daily")},
                 str(tmp_path / "g"))


def _stage(group: Group, epoch: str):
    gtxn = group.begin(epoch)
    for name, sink in group.sinks.items():
        write_staged(sink, gtxn.member(name), {"a.parquet": name.encode()})
    group.precommit(gtxn)
    return gtxn


def test_group_dry_run_is_the_plan_the_real_recover_then_carries_out(tmp_path, capsys):
    group = _group(tmp_path)
    top = _stage(group, "e1")
    with armed("group.after_decision"), pytest.raises(InjectedCrash):
        group.commit(top)                          # e1: decided, no member switched
    _stage(group, "e2")                            # e2/1: undecided, superseded by e2/2
    _stage(group, "e2")
    before = local_tree(str(tmp_path))

    dry = group.recover(dry_run=True)
    assert local_tree(str(tmp_path)) == before
    assert dry.dry_run and dry.rolled_forward == [("e1", 1)]
    assert dry.aborted == [("e2", 1, "superseded")]
    assert sorted((s.kind, s.epoch, s.reason) for s in dry.finishing) == [
        ("abort", "e2", "member daily"), ("abort", "e2", "member events"),
        ("switch", "e1", "member daily"), ("switch", "e1", "member events")]
    argv = ["group", "recover", str(tmp_path / "g"), "--dry-run",
            *[f"--member={n}={tmp_path / n}" for n in ("events", "daily")]]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert text.startswith("dry run: nothing was changed; group recover would"), text
    assert "  switch epoch e1 attempt 1: member events" in text
    assert local_tree(str(tmp_path)) == before

    real = group.recover()
    assert not real.dry_run
    assert (real.rolled_forward, real.aborted, real.finishing) == \
        (dry.rolled_forward, dry.aborted, dry.finishing)
    assert group.stable_epochs() == {"e1": 1}
    assert group.recover(dry_run=True).finishing == []
