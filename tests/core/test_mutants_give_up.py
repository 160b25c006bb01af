"""Giving up a decided commit (``recover(ignore_failures_after_timeout=True)``) waits for
the transaction's *own* timeout, the one it began with, never the recovering sink's.

Mutation testing (docs/mutation.md) found that using the recovering sink's
``timeout_s`` instead survived every test: all of them recover with the sink that began.
A recovering process configured with a shorter timeout would then abandon a decided
commit early — its output never published, the loss the option warns of, before the
time its writer was promised.  Real local files; promotion refused by the store.
"""

from __future__ import annotations

import json

import pytest

from airflow_tpc import Sink, SinkConfig, TpcError, TxnState
from airflow_tpc.core.faults import InjectedCrash, armed
from airflow_tpc.storage import open_storage

from .faulty import FaultyStorage
from .helpers import full_tree, stage


def test_give_up_waits_for_the_transactions_own_timeout_not_the_recovering_sinks(tmp_path):
    target = str(tmp_path / "t")
    writer = Sink(target, "events", config=SinkConfig(timeout_s=1000.0))
    txn, _ = stage(writer, "0", {"p.parquet": b"epoch zero"})
    with armed("commit.after_decision"), pytest.raises(InjectedCrash):
        writer.commit(txn)
    started = writer.describe("0")[0]

    # Another process recovers with a shorter timeout, on a store refusing promotion.
    inner, _ = open_storage(target, None)
    faulty = FaultyStorage(inner)
    faulty.refuse = lambda op, args: op in ("replace_dir", "copy_many")
    restorer = Sink(target, "events", storage=faulty, config=SinkConfig(timeout_s=100.0))
    staged = {p: b for p, b in full_tree(restorer).items() if p.endswith(".parquet")}

    # 500 s after it began: past the restorer's 100 s, not past the commit's own 1000 s.
    with pytest.raises(TpcError, match="could not finish 1 decided commit") as info:
        restorer.recover(ignore_failures_after_timeout=True, now=txn.started_at + 500)
    assert info.value.report.abandoned == []
    tree = full_tree(restorer)
    assert not [p for p in tree if p.endswith("/abandoned.json")]
    assert [p for p in tree if p.endswith("/decision.json")]  # the decision stands
    assert {p: b for p, b in tree.items() if p.endswith(".parquet")} == staged
    assert restorer.describe("0")[0].state is started.state

    # Past its own timeout the opted-in restore gives it up, loudly, and says so.
    report = restorer.recover(ignore_failures_after_timeout=True, now=txn.started_at + 2000)
    assert [a[:2] for a in report.abandoned] == [("0", txn.attempt)]
    assert restorer.describe("0")[0].state is TxnState.ABANDONED
    # The record as PROTOCOL.md §3.4.7 specifies it: recover's clock and the last error.
    [record] = [b for p, b in full_tree(restorer).items() if p.endswith("/abandoned.json")]
    doc = json.loads(record)
    assert doc["at"] == txn.started_at + 2000
    assert "injected: store refused" in doc["error"]
    # Settled: its pending-index entry (PROTOCOL.md §5.8) is gone with it.
    assert not [p for p in full_tree(restorer) if "/_tpc/pending/epoch=" in p]
