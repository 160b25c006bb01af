"""``Ledger.create``: a record written once, when it is already there.

Its one caller (giving up a decided commit: ``abandoned.json``) reaches the
record-already-there branch only when two restorers abandon the same attempt at once,
which no selected test did, so mutation testing (docs/mutation.md) let every edit of
that branch through: a conflicting record taken as ours, our own record (a lost answer)
taken as a conflict, the record overwritten.  Real local files; the lost answer is the
store writing our bytes and then saying it did not, as an SDK retry sees it.
"""

from __future__ import annotations

import json

import pytest

from airflow_tpc import Sink
from airflow_tpc.core.ledger import ABANDONED, WRITER_FIELD
from airflow_tpc.errors import CommitConflict

from .helpers import full_tree, stage


def test_create_writes_once_and_refuses_a_different_record_changing_nothing(tmp_path):
    sink = Sink(str(tmp_path / "t"), "once")
    txn, _ = stage(sink, "0", {"p.parquet": b"x"})
    assert sink.ledger.create("0", txn.attempt, ABANDONED, {"at": 1.0, "error": "first"})
    path = sink.layout.record("0", txn.attempt, ABANDONED)
    written = json.loads(sink.storage.read_bytes(path))
    assert (written["at"], written["error"]) == (1.0, "first")
    assert len(written[WRITER_FIELD]) == 32
    before = full_tree(sink)

    # A second restorer's record (another writer id, other fields): refused, by name.
    with pytest.raises(CommitConflict, match=r"abandoned record of epoch 0 attempt 1 "
                                             r"already exists with different content"):
        sink.ledger.create("0", txn.attempt, ABANDONED, {"at": 2.0, "error": "second"})
    # Even the same fields are another writer's record, never ours.
    with pytest.raises(CommitConflict):
        sink.ledger.create("0", txn.attempt, ABANDONED, {"at": 1.0, "error": "first"})
    assert full_tree(sink) == before


def test_create_takes_its_own_record_found_after_a_lost_answer_as_written(tmp_path):
    sink = Sink(str(tmp_path / "t"), "lost")
    txn, _ = stage(sink, "0", {"p.parquet": b"x"})
    storage = sink.storage
    real_put = storage.put_if_absent

    def lost_answer(path: str, data: bytes) -> bool:
        real_put(path, data)
        return False

    storage.put_if_absent = lost_answer  # type: ignore[method-assign]
    assert sink.ledger.create("0", txn.attempt, ABANDONED, {"at": 3.0, "error": "e"}) is True
    doc = json.loads(storage.read_bytes(sink.layout.record("0", txn.attempt, ABANDONED)))
    assert (doc["at"], doc["error"]) == (3.0, "e")
