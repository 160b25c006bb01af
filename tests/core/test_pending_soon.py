"""A commit lists the pending index beside its promotion, not after it (issue 18).

The listing is a read: started once the commit's decision is known, it runs while the
epoch is promoted.  These tests show what that changes and what it does not: each
entry is still dropped exactly once (the commit's own entry by its finishing record,
not again by the roll-forward), a stale entry of the same epoch is still dropped, and
an entry another writer makes while the listing runs is finished by this commit or
the next one, exactly once either way.
"""

from __future__ import annotations

import pytest

from airflow_tpc import Sink
from airflow_tpc.core.faults import InjectedCrash, armed
from airflow_tpc.core.ledger import PENDING_INDEX
from airflow_tpc.core.records import PUBLISHED

from .helpers import committed_contents, stage
from .test_pending_index import CountingStore, _entries, _history


def _deletes(calls: list[tuple[str, str]], name: str) -> int:
    return sum(1 for op, arg in calls if op == "delete_files" and name in arg)


def test_each_entry_is_dropped_once_and_a_stale_one_still_is(store):
    target, options = store
    sink = Sink(target, "pend", storage_options=options)
    _history(sink, 1)  # the index is complete from here on
    aborted, _ = stage(sink, "3", {"a.parquet": b"aborted"})
    sink.abort(aborted)
    sink.ledger.mark_pending("3", 1)  # finished long ago; its removal was lost
    counting = CountingStore(Sink(target, "pend", storage_options=options).storage)
    committer = Sink(target, "pend", storage=counting)
    txn, _ = stage(committer, "3", {"a.parquet": b"three"})
    counting.calls.clear()
    assert committer.commit(txn).outcome == "committed"
    assert _deletes(counting.calls, "epoch=3,attempt=000002") == 1  # after published.json
    assert _deletes(counting.calls, "epoch=3,attempt=000001") == 1  # the stale entry
    assert _entries(sink) == {PENDING_INDEX}
    assert committed_contents(sink)["3"] == [b"three"]


def test_an_entry_made_while_the_index_is_listed_is_finished_exactly_once(store):
    """Another writer decides epoch 5 (and dies) while the commit of epoch 6 promotes,
    its index listing under way or done: the commit of 6 rolls 5 forward or leaves it
    to the next commit, which does; either way epoch 5 is published once."""
    target, options = store
    sink = Sink(target, "pend", storage_options=options)
    _history(sink, 1)
    other = Sink(target, "pend", storage_options=options)
    five, _ = stage(other, "5", {"a.parquet": b"five"})
    six, _ = stage(sink, "6", {"a.parquet": b"six"})

    fired = []

    def another_writer_decides_and_dies(_name: str) -> None:
        if fired:  # once: the roll-forward of 5 passes this step too
            return
        fired.append(_name)
        with armed("commit.after_decision"), pytest.raises(InjectedCrash):
            other.commit(five)

    with armed("promote.before_marker", another_writer_decides_and_dies):
        first = sink.commit(six)
    assert first.outcome == "committed"
    seven, _ = stage(sink, "7", {"a.parquet": b"seven"})
    second = sink.commit(seven)
    assert first.rolled_forward + second.rolled_forward == [("5", 1)]
    assert PUBLISHED in sink.ledger.scan("5")["5"][1].kinds
    assert committed_contents(sink)["5"] == [b"five"]
    assert committed_contents(sink)["6"] == [b"six"]
    assert _entries(sink) == {PENDING_INDEX}
