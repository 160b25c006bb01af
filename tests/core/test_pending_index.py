"""The pending index: a commit lists unfinished work, never the whole ledger.

``_tpc/pending/`` holds an entry per attempt with a decision and no finishing
record (written before the decision, dropped after the finishing record), plus
``index.json`` once the index is known to be complete.  These tests show that a
commit's requests do not depend on history, that a lost notification is still
rolled forward by the next commit of another epoch, that stale and orphan entries
are dropped, and that targets written before the index existed are indexed once.
"""

from __future__ import annotations

import pytest

from airflow_tpc import Sink
from airflow_tpc.core import faults
from airflow_tpc.core.faults import InjectedCrash, armed
from airflow_tpc.core.ledger import PENDING_INDEX
from airflow_tpc.core.records import DECISION, PUBLISHED

from .helpers import committed_contents, stage


class CountingStore:
    """A real store that records every request (method, first argument)."""

    def __init__(self, inner):
        self.inner = inner
        self.calls: list[tuple[str, str]] = []

    def __getattr__(self, name):
        attr = getattr(self.inner, name)
        if not callable(attr) or name.startswith("_") or name in ("join", "uri"):
            return attr

        def counted(*a, **k):
            self.calls.append((name, str(a[0]) if a else ""))
            return attr(*a, **k)

        return counted


def _entries(sink: Sink) -> set[str]:
    root = sink.layout.pending_root.rstrip("/") + "/"
    return {o.path[len(root):] for o in sink.storage.list(sink.layout.pending_root)}


def _history(sink: Sink, epochs: int) -> None:
    """Past epochs, every other one with an aborted attempt before its commit."""
    for i in range(epochs):
        epoch = f"h{i:03d}"
        if i % 2:
            aborted, _ = stage(sink, epoch, {"a.parquet": b"aborted"})
            sink.abort(aborted)
        txn, _ = stage(sink, epoch, {"a.parquet": epoch.encode()})
        sink.commit(txn)


def _commit_requests(store, target: str, epoch: str) -> list[tuple[str, str]]:
    target_uri, options = store
    counting = CountingStore(Sink(target, "pend", storage_options=options).storage)
    sink = Sink(target, "pend", storage=counting)
    txn, _ = stage(sink, epoch, {"a.parquet": b"new", "b.parquet": b"new"})
    counting.calls.clear()
    sink.commit(txn)
    return counting.calls


def test_commit_requests_do_not_grow_with_history(store):
    target, options = store
    small, large = target.rstrip("/") + "-small", target.rstrip("/") + "-large"
    _history(Sink(small, "pend", storage_options=options), 1)
    big = Sink(large, "pend", storage_options=options)
    _history(big, 12)
    calls_small = _commit_requests(store, small, "new")
    calls_large = _commit_requests(store, large, "new")
    assert [c[0] for c in calls_large] == [c[0] for c in calls_small]
    ledger_root = big.layout.ledger_root.rstrip("/")
    assert not [c for c in calls_large if c[0] == "list" and c[1].rstrip("/") == ledger_root]
    assert _entries(big) == {PENDING_INDEX}


def test_lost_notification_is_rolled_forward_through_the_index(store):
    target, options = store
    sink = Sink(target, "pend", storage_options=options)
    _history(sink, 2)  # the index is complete from here on
    assert PENDING_INDEX in _entries(sink)
    txn, _ = stage(sink, "5", {"a.parquet": b"five"})
    with armed("commit.after_decision"), pytest.raises(InjectedCrash):
        sink.commit(txn)
    assert _entries(sink) == {PENDING_INDEX, "epoch=5,attempt=000001"}
    other, _ = stage(sink, "6", {"a.parquet": b"six"})
    result = sink.commit(other)
    assert result.rolled_forward == [("5", 1)]
    assert committed_contents(sink)["5"] == [b"five"]
    assert _entries(sink) == {PENDING_INDEX}


def test_an_entry_is_written_before_its_decision(store):
    """A crash right after the entry (before the decision) leaves an entry, never a
    decision without one; the attempt stays committable and its entry goes with it."""
    target, options = store
    sink = Sink(target, "pend", storage_options=options)
    _history(sink, 1)
    txn, _ = stage(sink, "7", {"a.parquet": b"seven"})
    real_put_if_absent = sink.storage.put_if_absent

    def die_on_decision(path, data):
        if path.endswith(f"/{DECISION}.json"):
            raise InjectedCrash("died between the index entry and the decision")
        return real_put_if_absent(path, data)

    sink.storage.put_if_absent = die_on_decision
    try:
        with pytest.raises(InjectedCrash):
            sink.commit(txn)
    finally:
        del sink.storage.put_if_absent
    assert "epoch=7,attempt=000001" in _entries(sink)
    assert DECISION not in sink.ledger.scan("7")["7"][1].kinds
    sink.commit(txn)
    assert committed_contents(sink)["7"] == [b"seven"]
    assert _entries(sink) == {PENDING_INDEX}


def test_stale_and_orphan_entries_are_dropped(tmp_path):
    sink = Sink(str(tmp_path / "t"), "pend")
    _history(sink, 2)
    sink.ledger.mark_pending("h000", 1)   # finished long ago (its unmark was lost)
    sink.ledger.mark_pending("zz", 3)     # no such attempt in the ledger
    sink.storage.put(sink.storage.join(sink.layout.pending_root, "notes.txt"), b"x")
    txn, _ = stage(sink, "9", {"a.parquet": b"nine"})
    assert sink.commit(txn).rolled_forward == []
    assert _entries(sink) == {PENDING_INDEX, "notes.txt"}  # foreign names are left alone


def test_a_target_without_the_index_is_indexed_by_its_next_commit(store):
    """Targets written before the index existed: the first commit lists everything
    (and rolls forward what is pending), then builds the index."""
    target, options = store
    sink = Sink(target, "pend", storage_options=options)
    _history(sink, 2)
    txn, _ = stage(sink, "5", {"a.parquet": b"five"})
    with armed("promote.before_marker"), pytest.raises(InjectedCrash):
        sink.commit(txn)
    sink.storage.delete_prefix(sink.layout.pending_root)  # as an older version left it
    assert sink.ledger.pending() is None
    other, _ = stage(sink, "6", {"a.parquet": b"six"})
    assert sink.commit(other).rolled_forward == [("5", 1)]
    assert _entries(sink) == {PENDING_INDEX}
    assert committed_contents(sink)["5"] == [b"five"]


def test_recover_builds_the_index_and_lists_what_is_still_unfinished(tmp_path):
    sink = Sink(str(tmp_path / "t"), "pend")
    _history(sink, 1)
    txn, _ = stage(sink, "5", {"a.parquet": b"five"})
    with armed("promote.before_marker"), pytest.raises(InjectedCrash):
        sink.commit(txn)
    sink.storage.delete_prefix(sink.layout.pending_root)
    staging = sink.layout.staging("5", 1)
    sink.storage.put(sink.storage.join(staging, "late.parquet"), b"straggler")
    with pytest.raises(Exception, match="changed after the commit was decided"):
        sink.recover()  # cannot finish: staging changed; it stays pending, and indexed
    assert _entries(sink) == {PENDING_INDEX, "epoch=5,attempt=000001"}
    sink.storage.delete_files([sink.storage.join(staging, "late.parquet")])
    report = sink.recover()
    assert report.rolled_forward == [("5", 1)]
    assert PUBLISHED in sink.ledger.scan("5")["5"][1].kinds
    assert _entries(sink) == {PENDING_INDEX}


def test_every_finishing_record_drops_the_entry(tmp_path):
    """Superseded, closed (abort) and published attempts all leave the index."""
    sink = Sink(str(tmp_path / "t"), "pend")
    _history(sink, 1)
    first, _ = stage(sink, "3", {"a.parquet": b"1"})
    sink.commit(first)
    aborted, _ = stage(sink, "3", {"a.parquet": b"2"})
    sink.abort(aborted)
    second, _ = stage(sink, "3", {"a.parquet": b"3"})
    sink.commit(second)
    assert _entries(sink) == {PENDING_INDEX}
    faults.reset()


def test_an_empty_entry_is_made_in_place_and_an_existing_file_is_replaced_whole(tmp_path):
    """An absent empty file (an index entry) is created in place: no temporary file is
    left or linked.  Anything already at the name (a file with bytes, a symbolic link)
    is replaced whole through a temporary file, as every other put: never truncated
    in place, never written through the link."""
    from airflow_tpc.storage import LocalStorage

    storage, folder = LocalStorage(), tmp_path / "pending"
    storage.put(str(folder / "entry"), b"")
    assert [p.name for p in folder.iterdir()] == ["entry"]
    assert (folder / "entry").read_bytes() == b""
    storage.put(str(folder / "entry"), b"")  # there already: the same outcome
    assert [p.name for p in folder.iterdir()] == ["entry"]

    (folder / "full").write_bytes(b"old bytes")
    held = open(folder / "full", "rb")  # noqa: SIM115 - a reader holding the old file
    storage.put(str(folder / "full"), b"")
    assert (folder / "full").read_bytes() == b"" and held.read() == b"old bytes"
    held.close()

    outside = tmp_path / "outside"
    outside.write_bytes(b"keep")
    (folder / "link").symlink_to(outside)
    storage.put(str(folder / "link"), b"")
    assert not (folder / "link").is_symlink() and (folder / "link").read_bytes() == b""
    assert outside.read_bytes() == b"keep"
    assert sorted(p.name for p in folder.iterdir()) == ["entry", "full", "link"]
