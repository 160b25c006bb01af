"""SIGKILL the process running a group commit (or the recover after it) at each step,
then a fresh process recovers: a group of a local folder and an S3 folder (moto).

The child pauses at the first time it reaches a named step (``AIRFLOW_TPC_PAUSE_AT``)
and we SIGKILL it there — no exception handler, no ``finally`` — as a worker dies.
A real kill is a process start each (seconds on a busy machine), so a commit is killed
at one step of each kind of state a dead worker can leave (``KILLED_STEPS``); every
occurrence of every step is crashed by the in-process tests: a group's steps by
tests/core/test_groups.py, an S3 member's promotion steps by
tests/core/test_crashpoints.py, and tests/core/test_process_kill.py SIGKILLs each
promotion step of one sink, on local disk and on S3.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from airflow_tpc import Group, Sink
from airflow_tpc.core import faults

from .helpers import write_staged
from .test_process_kill import kill_when_paused

pytestmark = pytest.mark.timeout(1200)

NS = "killed"
OLD = {"events": {"a.parquet": b"events-old"}, "daily": {"d.parquet": b"daily-old"}}
NEW = {"events": {"a.parquet": b"events-new", "b.parquet": b"events-new-2"},
       "daily": {"d.parquet": b"daily-new"}}

CHILD = textwrap.dedent("""
    import json, sys
    from airflow_tpc import Group, Sink
    targets, options, group_uri, epoch, attempt, verb = sys.argv[1:7]
    options = json.loads(options)
    group = Group({n: Sink(t, "killed", storage_options=options.get(n))
                   for n, t in json.loads(targets).items()}, group_uri)
    if verb == "commit":
        group.commit(group.transaction(epoch, int(attempt)))
    else:
        group.recover()
""")


@pytest.fixture()
def mixed(request, tmp_path):
    """member -> (target, storage options): events on local disk, daily on S3 (moto)."""
    bucket = request.getfixturevalue("s3_bucket")
    options = request.getfixturevalue("s3_options")

    def make(k: int) -> tuple[dict[str, tuple[str, dict | None]], str]:
        return ({"events": (str(tmp_path / f"k{k}" / "events"), None),
                 "daily": (f"s3://{bucket}/k{k}/daily", options)},
                str(tmp_path / f"k{k}" / "_tpc_groups" / NS))
    return make


def _group(members, group_uri) -> Group:
    return Group({n: Sink(t, NS, storage_options=o) for n, (t, o) in members.items()},
                 group_uri)


def _stage(group: Group, files):
    gtxn = group.begin("5")
    for name, sink in group.sinks.items():
        write_staged(sink, gtxn.member(name), files[name])
    group.precommit(gtxn)
    return gtxn


def _contents(group: Group) -> dict[str, list[bytes]]:
    out = {}
    for name, per_epoch in group.committed_files().items():
        sink = group.sinks[name]
        for uri in per_epoch.get("5", []):
            path = uri.split("://", 1)[1] if uri.startswith("s3://") else uri[len("file://"):]
            out.setdefault(name, []).append(sink.storage.read_bytes(path))
    return {n: sorted(v) for n, v in out.items()}


def _want(files) -> dict[str, list[bytes]]:
    return {n: sorted(f.values()) for n, f in files.items()}


def _kill(tmp_path, members, group_uri, gtxn, verb: str, step: str, k: int) -> None:
    flag = tmp_path / f"paused-{verb}-{k}"
    env = dict(os.environ, AIRFLOW_TPC_PAUSE_AT=step, AIRFLOW_TPC_PAUSE_FLAG=str(flag))
    proc = subprocess.Popen([
        sys.executable, "-c", CHILD, json.dumps({n: t for n, (t, _) in members.items()}),
        json.dumps({n: o for n, (_, o) in members.items()}), group_uri, gtxn.epoch,
        str(gtxn.attempt), verb], env=env)
    kill_when_paused(proc, flag, step)


def _distinct_steps(mixed) -> list[str]:
    members, group_uri = mixed(0)
    group = _group(members, group_uri)
    group.commit(_stage(group, OLD))
    gtxn = _stage(group, NEW)
    faults.reset()
    group.commit(gtxn)
    return list(dict.fromkeys(faults.seen()))


#: One kill per kind of state: nothing decided; decided, no member switched; the S3
#: member half-way through its switch (files copied, no marker); one member switched,
#: the other not; every member switched, the group not yet published.
KILLED_STEPS = ["group.before_decision", "group.after_decision", "promote.before_marker",
                "group.after_member", "group.before_published"]


def test_sigkill_at_each_kind_of_step_of_a_group_commit_then_recover(mixed, tmp_path):
    steps = _distinct_steps(mixed)
    assert {"group.before_decision", "group.after_decision", "group.after_member",
            "group.before_published", "promote.before_copy", "promote.before_swap"} <= set(steps)
    # Each killed step is one a group commit really passes, in the order it passes them;
    # the S3 member (daily) switches first, so its promotion's marker comes before the
    # first group.after_member.
    assert [s for s in steps if s in KILLED_STEPS] == KILLED_STEPS, steps
    assert steps.index("promote.before_marker") < steps.index("group.after_member"), steps
    for k, step in enumerate(KILLED_STEPS, 1):
        members, group_uri = mixed(k)
        group = _group(members, group_uri)
        group.commit(_stage(group, OLD))
        gtxn = _stage(group, NEW)
        _kill(tmp_path, members, group_uri, gtxn, "commit", step, k)
        assert _contents(_group(members, group_uri)) in (_want(OLD), _want(NEW), {}), step
        _group(members, group_uri).recover()
        decided = step != "group.before_decision"
        assert _contents(_group(members, group_uri)) == _want(NEW if decided else OLD), step
        if not decided:
            _group(members, group_uri).commit(gtxn)
            assert _contents(_group(members, group_uri)) == _want(NEW), step


@pytest.mark.parametrize("step", ["group.after_member", "commit.before_published"])
def test_sigkill_during_the_recover_of_a_decided_group_then_recover_again(mixed, tmp_path,
                                                                           step):
    members, group_uri = mixed(1)
    group = _group(members, group_uri)
    gtxn = _stage(group, NEW)
    with faults.armed("group.after_decision"), pytest.raises(faults.InjectedCrash):
        group.commit(gtxn)
    _kill(tmp_path, members, group_uri, gtxn, "recover", step, 1)
    assert _contents(_group(members, group_uri)) in (_want(NEW), {})
    _group(members, group_uri).recover()
    assert _contents(_group(members, group_uri)) == _want(NEW)
    assert _group(members, group_uri).stable_epochs() == {"5": 1}
