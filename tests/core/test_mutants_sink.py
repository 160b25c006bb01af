"""Small answers of the sink that mutation testing (docs/mutation.md) found unproved:
whose namespace claims a target (the CLI asks it before it opens a target for any verb)
and a decision's state in words (the refusal a second committer gets).  Real local files.
"""

from __future__ import annotations

import pytest

from airflow_tpc import Sink
from airflow_tpc.core.faults import InjectedCrash, armed
from airflow_tpc.core.ledger import DECISION
from airflow_tpc.core.sink import state_of_decision
from airflow_tpc.errors import InvalidState

from .helpers import stage


def test_the_claimed_namespace_of_an_unclaimed_and_of_a_claimed_target(tmp_path):
    target = str(tmp_path / "t")
    assert Sink(target, "ours").claimed_namespace() is None  # nothing written yet
    stage(Sink(target, "ours"), "0", {"p.parquet": b"x"})
    assert Sink(target, "theirs").claimed_namespace() == "ours"


def test_a_decision_in_words_for_a_commit_an_abort_and_an_expiry(tmp_path):
    sink = Sink(str(tmp_path / "t"), "words")
    committed, _ = stage(sink, "0", {"p.parquet": b"x"})
    with armed("commit.after_decision"), pytest.raises(InjectedCrash):
        sink.commit(committed)
    aborted, _ = stage(sink, "1", {"p.parquet": b"y"})
    sink.abort(aborted, reason="no")
    sink.begin("2")
    sink.recover(now=10**12)  # attempt 1 of epoch 2 expires

    def decision(epoch: str):
        return sink.ledger.read(epoch, 1, DECISION)

    assert state_of_decision(decision("0")) == "COMMITTED"
    assert state_of_decision(decision("1")) == "ABORTED"
    assert state_of_decision(decision("2")) == "EXPIRED"
    with pytest.raises(InvalidState, match=r"cannot commit .*: it was ABORTED \(no\)"):
        sink.commit(aborted)
