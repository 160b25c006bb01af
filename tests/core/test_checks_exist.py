"""Checks the protocol makes today, each with a test that fails when the check is removed.

Issue 9, "Tests the suite lacks": a manifest whose ``target`` changed; a forged
``Transaction``; pre-commit of a decided attempt; re-pre-commit after staging
changed; ``verify="size"`` end to end; a crash at ``precommit.before_manifest``
and inside ``recover``.  "Changes nothing" means byte for byte: every file (and,
locally, every folder and symlink) under the target root, ``_tpc/`` included
(ledger, staging, the namespace claim), and under a separately configured
staging root.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time

import pytest

from airflow_tpc import (
    FencedError,
    InvalidState,
    ManifestError,
    Sink,
    SinkConfig,
    TransactionExpired,
    TxnState,
)
from airflow_tpc.core.faults import InjectedCrash, armed
from airflow_tpc.core.manifest import MANIFEST_NAME, digest_of

from ..conftest import make_store
from .helpers import assert_invariant, committed_contents, read_committed, stage, write_staged

OLD = {"a.parquet": b"published A", "b.parquet": b"published B"}
NEW = {"a.parquet": b"new A", "c/d.parquet": b"new D"}


# ----------------------------------------------------------------- helpers
def _under(path: str, root: str) -> bool:
    return path.rstrip("/") == root.rstrip("/") or path.startswith(root.rstrip("/") + "/")


def full_snapshot(sink: Sink) -> dict[str, tuple[str, bytes | None]]:
    """Everything stored under the target root and the staging root, byte for byte.

    Locally also folders and symlinks (a refused verb must not leave an empty
    ``epoch=E/`` or a dangling link behind); on S3 every object with its bytes.
    """
    roots = [sink.layout.root]
    if not _under(sink.layout.staging_root, sink.layout.root):
        roots.append(sink.layout.staging_root)
    out: dict[str, tuple[str, bytes | None]] = {}
    for root in roots:
        if sink.storage.scheme == "file":
            for dirpath, dirnames, filenames in os.walk(root):
                for name in dirnames:
                    path = os.path.join(dirpath, name)
                    out[path] = ("link", os.readlink(path).encode()) if os.path.islink(path) \
                        else ("dir", None)
                for name in filenames:
                    path = os.path.join(dirpath, name)
                    if os.path.islink(path):
                        out[path] = ("link", os.readlink(path).encode())
                    else:
                        with open(path, "rb") as fh:
                            out[path] = ("file", fh.read())
        else:
            for info in sink.storage.list(root):
                out[info.path] = ("file", sink.storage.read_bytes(info.path))
    return out


def assert_same(before: dict, after: dict) -> None:
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    assert changed == [], f"storage changed: {changed[:5]}"


def _staged(sink: Sink, txn, rel: str) -> str:
    return sink.storage.join(sink.layout.staging(txn.epoch, txn.attempt), rel)


def _has_ledger_and_staging(snap: dict, sink: Sink) -> None:
    """Sanity: the snapshot really covers the ledger and staging, not only published files."""
    assert any("/_tpc/ledger/" in p for p in snap)
    assert any(_under(p, sink.layout.staging_root) and kind == "file"
               for p, (kind, _) in snap.items())


@pytest.fixture(params=["local", "s3"])
def kind(request):
    return request.param


def _staging_root(kind, request, tmp_path, where):
    if where == "inside":
        return None
    if kind == "local":
        return str(tmp_path / "elsewhere" / "staging")
    return f"s3://{request.getfixturevalue('s3_bucket')}/elsewhere/staging"


@pytest.fixture(params=["inside", "outside"])
def world(kind, request, tmp_path):
    """(store, config): each store, with staging under the target or in a configured root."""
    store = make_store(kind, request, tmp_path)
    config = SinkConfig(staging_root=_staging_root(kind, request, tmp_path, request.param))
    return store, config


def _sink(world, **config) -> Sink:
    (target, options), base = world
    return Sink(target, "checks", storage_options=options,
                config=dataclasses.replace(base, **config))


def _published_then_precommitted(sink: Sink):
    """Epoch 1 published (attempt 1, OLD); attempt 2 staged with NEW and pre-committed."""
    txn1, _ = stage(sink, "1", OLD)
    sink.commit(txn1)
    txn2, manifest = stage(sink, "1", NEW)
    return txn2, manifest


# ------------------------------------------- 1. a manifest whose target changed
@pytest.mark.parametrize("other_target", ["same-store", "other-store"])
def test_manifest_with_changed_target_is_refused_and_changes_nothing(world, other_target):
    sink = _sink(world)
    txn, manifest = _published_then_precommitted(sink)
    doc = manifest.to_dict()
    if other_target == "same-store":  # e.g. a manifest copied from a sibling table
        doc["txn"]["target"] = txn.target.rstrip("/") + "_copy"
    else:
        doc["txn"]["target"] = "s3://elsewhere/t" if txn.target.startswith("file:") \
            else "file:///elsewhere/t"
    doc["digest"] = digest_of(doc)  # a consistent document: only the transaction check can tell
    sink.storage.put(_staged(sink, txn, MANIFEST_NAME), json.dumps(doc).encode())

    before = full_snapshot(sink)
    _has_ledger_and_staging(before, sink)
    for kwargs in ({}, {"expected_digest": doc["digest"]}):
        with pytest.raises(ManifestError, match="target"):
            sink.commit(txn, **kwargs)
        assert_same(before, full_snapshot(sink))
    # a fresh process (the retried commit task) is refused the same way
    with pytest.raises(ManifestError, match="target"):
        _sink(world).commit(txn)
    assert_same(before, full_snapshot(sink))
    assert sink.describe("1")[-1].state is TxnState.PRECOMMITTED
    assert committed_contents(sink) == {"1": sorted(OLD.values())}


# ------------------------------------------------ 2. a forged Transaction
FORGERIES = {
    # a fresh start time: would dodge the expiry of an old transaction
    "started_at": lambda t: dataclasses.replace(t, started_at=time.time()),
    "timeout_s": lambda t: dataclasses.replace(t, timeout_s=t.timeout_s * 1000),
    "staging_uri": lambda t: dataclasses.replace(t, staging_uri=t.staging_uri + "x"),
    "attempt-not-begun": lambda t: dataclasses.replace(t, attempt=t.attempt + 7),
}


@pytest.mark.parametrize("forgery", sorted(FORGERIES))
def test_forged_transaction_is_refused_and_changes_nothing(world, forgery):
    """Refused by pre-commit (attempt OPEN), then by commit and abort (PRECOMMITTED)."""
    sink = _sink(world)
    txn1, _ = stage(sink, "1", OLD)
    sink.commit(txn1)
    txn = sink.begin("1")
    write_staged(sink, txn, NEW)
    forged = FORGERIES[forgery](txn)
    assert forged != txn
    for verb in ("precommit", "commit", "abort"):
        if verb == "commit":
            sink.precommit(txn)  # the real one
        before = full_snapshot(sink)
        _has_ledger_and_staging(before, sink)
        for s in (sink, _sink(world)):  # this process, and a fresh one
            with pytest.raises(InvalidState, match="begin record|no transaction"):
                getattr(s, verb)(forged)
            assert_same(before, full_snapshot(sink))
        expected = TxnState.OPEN if verb == "precommit" else TxnState.PRECOMMITTED
        assert sink.describe("1")[-1].state is expected
        assert committed_contents(sink) == {"1": sorted(OLD.values())}


def test_forged_start_time_does_not_dodge_expiry(world):
    """An expired transaction stays expired when its holder forges a fresh ``started_at``."""
    sink = _sink(world, timeout_s=0.001)
    txn, _ = stage(sink, "1", NEW)
    deadline = time.time() + 5
    while not txn.expired():  # 1 ms timeout; normally already past
        assert time.time() < deadline
    before = full_snapshot(sink)
    with pytest.raises(TransactionExpired):
        sink.commit(txn)
    assert_same(before, full_snapshot(sink))
    forged = dataclasses.replace(txn, started_at=time.time(), timeout_s=3600.0)
    assert not forged.expired()
    with pytest.raises(InvalidState, match="begin record"):
        sink.commit(forged)
    with pytest.raises(InvalidState, match="begin record"):
        _sink(world).commit(forged)  # a fresh process, same answer
    assert_same(before, full_snapshot(sink))
    assert committed_contents(sink) == {}
    assert sink.describe("1")[-1].state is TxnState.PRECOMMITTED


# --------------------------------------- 3. pre-commit of an already-decided attempt
@pytest.mark.parametrize("late_write", [False, True], ids=["as-left", "zombie-wrote-again"])
@pytest.mark.parametrize("decided", ["committed", "aborted"])
def test_precommit_of_decided_attempt_is_fenced(world, decided, late_write):
    sink = _sink(world)
    txn, manifest = _published_then_precommitted(sink)
    if decided == "committed":
        sink.commit(txn, expected_digest=manifest.digest)
        expected = sorted(NEW.values())
    else:
        sink.abort(txn)
        expected = sorted(OLD.values())
    if late_write:  # the attempt's straggling job writes into its (gone) staging again
        write_staged(sink, txn, {"late.parquet": b"late"})

    before = full_snapshot(sink)
    for fresh in (False, True):  # this process, then a retried task in a new one
        s = _sink(world) if fresh else sink
        with pytest.raises(FencedError, match="already decided"):
            s.precommit(s.transaction("1", txn.attempt))
        assert_same(before, full_snapshot(sink))
    assert sink.describe("1")[-1].state is (TxnState.COMMITTED if decided == "committed"
                                            else TxnState.ABORTED)
    assert committed_contents(sink) == {"1": expected}


# ------------------------------------------- 4. re-pre-commit after staging changed
@pytest.mark.parametrize("change", ["file-added", "file-removed", "file-resized"])
def test_reprecommit_after_staging_changed_is_refused(world, change):
    sink = _sink(world)
    txn, manifest = _published_then_precommitted(sink)
    if change == "file-added":
        write_staged(sink, txn, {"e.parquet": b"late file"})
    elif change == "file-removed":
        sink.storage.delete_files([_staged(sink, txn, "c/d.parquet")])
    else:
        write_staged(sink, txn, {"a.parquet": b"new A, longer now"})

    before = full_snapshot(sink)
    with pytest.raises(ManifestError, match="already pre-committed with different files"):
        sink.precommit(txn)
    assert_same(before, full_snapshot(sink))
    assert sink.read_manifest(txn).digest == manifest.digest  # the seal is the original one
    # and the commit refuses the changed staging as well
    with pytest.raises(ManifestError):
        sink.commit(txn, expected_digest=manifest.digest)
    assert_same(before, full_snapshot(sink))
    assert committed_contents(sink) == {"1": sorted(OLD.values())}


def test_reprecommit_after_same_size_rewrite_then_checksum_commit_refuses(world):
    """A same-size rewrite after pre-commit.

    Today a re-pre-commit compares paths and sizes only, so it returns the
    existing (sealed) manifest unchanged — it does not re-hash.  (Refusing it
    there would also be fine; the test accepts either.)  What must hold is that
    the sealed manifest is not rewritten, and that the commit, which re-checks
    checksums (``verify="checksum"``, the default), refuses the altered file.
    """
    sink = _sink(world, verify="checksum")
    txn, manifest = _published_then_precommitted(sink)
    write_staged(sink, txn, {"a.parquet": b"NEW a"})  # same size as b"new A"
    before = full_snapshot(sink)
    try:
        again = sink.precommit(txn)
    except ManifestError:
        pass
    else:
        assert again.digest == manifest.digest
    assert_same(before, full_snapshot(sink))
    with pytest.raises(ManifestError, match="checksum"):
        sink.commit(txn, expected_digest=manifest.digest)
    assert_same(before, full_snapshot(sink))
    assert sink.describe("1")[-1].state is TxnState.PRECOMMITTED
    assert committed_contents(sink) == {"1": sorted(OLD.values())}


# ------------------------------------------------------ 5. verify="size" end to end
def test_verify_size_end_to_end(world, monkeypatch):
    sink = _sink(world, verify="size")
    txn1, m1 = stage(sink, "1", OLD)
    sink.commit(txn1, expected_digest=m1.digest)
    txn = sink.begin("1")
    write_staged(sink, txn, NEW)
    manifest = sink.precommit(txn)
    assert manifest.total_files == 2 and manifest.total_bytes == sum(map(len, NEW.values()))

    hashed = []
    real = sink.storage.checksum
    monkeypatch.setattr(sink.storage, "checksum",
                        lambda path, algo: hashed.append(path) or real(path, algo))
    result = sink.commit(txn, expected_digest=manifest.digest)
    monkeypatch.undo()
    assert result.outcome == "committed"
    assert hashed == [], f"verify='size' re-hashed staged files at commit: {hashed[:3]}"
    assert_invariant(sink, {"1": list(NEW.values())}, open_staging_ok=False)
    published = read_committed(sink)["1"]
    assert sorted(published.values()) == sorted(NEW.values())
    assert all(name.endswith(("a.parquet", "d.parquet")) for name in published)
    # another epoch, read by a fresh process with the same configuration
    txn2, m2 = stage(sink, "2", {"x.parquet": b"x" * 1000})
    again = _sink(world, verify="size")
    assert again.commit(again.transaction("2", txn2.attempt),
                        expected_digest=m2.digest).outcome == "committed"
    assert_invariant(again, {"1": list(NEW.values()), "2": [b"x" * 1000]},
                     open_staging_ok=False)


@pytest.mark.parametrize("change", ["file-added", "file-missing", "file-resized"])
def test_verify_size_still_refuses_changed_staging(world, change):
    sink = _sink(world, verify="size")
    txn, manifest = _published_then_precommitted(sink)
    if change == "file-added":
        write_staged(sink, txn, {"sneaky.parquet": b"not in the manifest"})
        match = "does not list"
    elif change == "file-missing":
        sink.storage.delete_files([_staged(sink, txn, "c/d.parquet")])
        match = "missing from staging"
    else:
        write_staged(sink, txn, {"a.parquet": b"new A plus more"})
        match = "bytes in storage but the manifest says"
    before = full_snapshot(sink)
    with pytest.raises(ManifestError, match=match):
        sink.commit(txn, expected_digest=manifest.digest)
    assert_same(before, full_snapshot(sink))
    assert sink.describe("1")[-1].state is TxnState.PRECOMMITTED
    assert committed_contents(sink) == {"1": sorted(OLD.values())}


# ------------------------------------------- 6. crash points in precommit and recover
def test_crash_before_manifest_then_recover_and_retry(world):
    sink = _sink(world)
    txn1, _ = stage(sink, "1", OLD)
    sink.commit(txn1)
    txn = sink.begin("1")
    write_staged(sink, txn, NEW)
    with armed("precommit.before_manifest"), pytest.raises(InjectedCrash):
        sink.precommit(txn)

    restarted = _sink(world)  # a new process: only what is in storage survives
    report = restarted.recover()
    assert report.aborted == [] and report.rolled_forward == []
    assert committed_contents(restarted) == {"1": sorted(OLD.values())}
    assert restarted.describe("1")[-1].state is TxnState.OPEN
    assert restarted.storage.read_bytes(_staged(restarted, txn, MANIFEST_NAME)) is None
    # the retried task pre-commits and commits: NEW published exactly once
    retried = restarted.transaction("1", txn.attempt)
    assert retried == txn
    manifest = restarted.precommit(retried)
    assert manifest.total_files == len(NEW)
    assert restarted.commit(retried, expected_digest=manifest.digest).outcome == "committed"
    assert restarted.commit(retried, expected_digest=manifest.digest).outcome == \
        "already_committed"
    assert_invariant(restarted, {"1": list(NEW.values())}, open_staging_ok=False)


def _recover_world(world):
    """Every kind of work recover does, left by crashed or killed tasks.

    epoch 1: attempt 1 published (OLD); attempt 2's commit decided, then crashed
             before promotion → rolled forward to NEW.
    epoch 2: attempt 1 pre-committed, attempt 2 began → 1 is aborted (superseded),
             2 stays OPEN.
    epoch 3: attempt 1 aborted; its zombie job wrote into staging again → cleaned.
    epoch 4: attempt 1 began with a 1 ms timeout → expired.
    """
    sink = _sink(world)
    txn, manifest = _published_then_precommitted(sink)
    with armed("commit.after_decision"), pytest.raises(InjectedCrash):
        sink.commit(txn, expected_digest=manifest.digest)
    stage(sink, "2", {"p.parquet": b"superseded"})
    e2 = sink.begin("2")
    write_staged(sink, e2, {"q.parquet": b"still running"})
    e3, _ = stage(sink, "3", {"r.parquet": b"aborted"})
    sink.abort(e3)
    write_staged(sink, e3, {"r.parquet": b"zombie's late write"})
    short = _sink(world, timeout_s=0.001)
    e4, _ = stage(short, "4", {"s.parquet": b"too late"})
    deadline = time.time() + 5
    while not e4.expired():
        assert time.time() < deadline
    return sink


def _assert_recovered(world):
    sink = _sink(world)
    assert_invariant(sink, {"1": list(NEW.values())})
    state = {(i.epoch, i.attempt): i.state for i in sink.describe()}
    assert state == {("1", 1): TxnState.COMMITTED, ("1", 2): TxnState.COMMITTED,
                     ("2", 1): TxnState.ABORTED, ("2", 2): TxnState.OPEN,
                     ("3", 1): TxnState.ABORTED, ("4", 1): TxnState.EXPIRED}
    left = {(i.epoch, i.attempt) for i in sink.describe() if i.staging_files}
    assert left == {("2", 2)}  # only the open attempt keeps its staging
    report = sink.recover()  # converged: a further recover has nothing to do
    assert (report.rolled_forward, report.aborted, report.cleaned) == ([], [], [])


def test_recover_without_crash_converges(world):
    """The baseline the two crash tests below are compared with."""
    _recover_world(world)
    report = _sink(world).recover()
    assert report.rolled_forward == [("1", 2)]
    assert sorted(report.aborted) == [("2", 1, "superseded"), ("4", 1, "expired")]
    assert ("3", 1) in report.cleaned
    _assert_recovered(world)


def _crash_on_call(n: int):
    calls = []

    def action(name):
        calls.append(name)
        if len(calls) == n:
            raise InjectedCrash(f"injected crash at {name} (call {n})")
    return action, calls


# recover.before_abort is passed once for each undecided attempt it judges: epoch 2
# attempts 1 and 2, epoch 4 attempt 1.
@pytest.mark.parametrize("nth", [1, 2, 3])
def test_crash_in_recover_before_abort_then_recover_again(world, nth):
    _recover_world(world)
    action, calls = _crash_on_call(nth)
    with armed("recover.before_abort", action), pytest.raises(InjectedCrash):
        _sink(world).recover()
    assert len(calls) == nth
    assert committed_contents(_sink(world)) == {"1": sorted(NEW.values())}  # rolled forward
    _sink(world).recover()  # a fresh process
    _assert_recovered(world)


def test_crash_in_recover_before_cleanup_then_recover_again(world):
    _recover_world(world)
    with armed("recover.before_cleanup"), pytest.raises(InjectedCrash):
        _sink(world).recover()
    sink = _sink(world)
    # everything but the clean-up happened: the zombie's staging of epoch 3 is still there
    assert {(i.epoch, i.attempt): i.state for i in sink.describe()}[("2", 1)] \
        is TxnState.ABORTED
    assert any(i.epoch == "3" and i.staging_files for i in sink.describe())
    report = sink.recover()  # a fresh process
    assert ("3", 1) in report.cleaned
    _assert_recovered(world)
