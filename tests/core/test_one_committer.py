"""Exactly one committer of a transaction is told "committed"; every other racer is told
"already committed" — locally and on S3 through moto's server.

Before records carried a per-call writer id, two decisions written in the same clock
tick were byte-identical, and ``Ledger.create_or_get`` counted the other caller's record
as its own write whose answer was lost.  The racers here share one frozen clock, so that
tick is every tick: without the writer id several racers are told "committed".
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from airflow_tpc import Sink, TxnState
from airflow_tpc.core.ledger import WRITER_FIELD
from airflow_tpc.core.records import DECISION

from .helpers import committed_contents, stage

RACERS = 6
ROUNDS = 3

RACER = r"""
import glob, json, os, sys, time
frozen = float(sys.argv[5])
time.time = lambda: frozen          # every racer decides in the same clock tick
from airflow_tpc import Sink
from airflow_tpc.core import faults
target, epoch, gate, racers = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[6])
options = json.loads(sys.argv[4]) or None

def barrier(name):
    # Every racer has validated staging and found no decision; none writes one until
    # all are here, so all of them write the decision at once.
    open(gate + ".at." + str(os.getpid()), "w").close()
    while len(glob.glob(gate + ".at.*")) < racers:
        time.sleep(0.01)

sink = Sink(target, "race", storage_options=options)
txn = sink.transaction(epoch, 1)
try:
    with faults.armed("commit.before_decision", barrier):
        print(json.dumps({"outcome": sink.commit(txn).outcome}))
except Exception as exc:            # reported, never swallowed: the test fails on it
    print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}))
"""


def _race(target: str, options: dict | None, epoch: str, gate: Path) -> list[dict]:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    tick = repr(time.time())  # one clock tick for all racers
    procs = [subprocess.Popen([sys.executable, "-c", RACER, target, epoch, str(gate),
                               json.dumps(options), tick, str(RACERS)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for _ in range(RACERS)]
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=900)
        assert p.returncode == 0, stderr
        out.append(json.loads(stdout.strip().splitlines()[-1]))
    return out


@pytest.mark.timeout(1200)
def test_exactly_one_racer_is_told_committed(store, tmp_path):
    target, options = store
    sink = Sink(target, "race", storage_options=options)
    expected = {}
    for r in range(ROUNDS):
        epoch = f"2026-05-{r + 1:02d}"
        _, manifest = stage(sink, epoch, {f"part-{r}.parquet": f"round {r}".encode()})
        results = _race(target, options, epoch, tmp_path / f"gate-{r}")
        assert not [x for x in results if "error" in x], results
        outcomes = sorted(x["outcome"] for x in results)
        assert outcomes == ["already_committed"] * (RACERS - 1) + ["committed"], outcomes
        expected[epoch] = [f"round {r}".encode()]
        states = {(i.epoch, i.attempt): i.state for i in sink.describe(epoch)}
        assert states == {(epoch, 1): TxnState.COMMITTED}
    assert committed_contents(sink) == expected


def test_same_tick_decisions_are_not_mistaken_for_our_own(tmp_path):
    """The ledger-level contract: a second writer of a byte-identical document (same
    clock tick) is not told "created"; our own bytes found again (a lost answer) are."""
    sink = Sink(str(tmp_path / "t"), "race")
    txn, manifest = stage(sink, "e1", {"a.parquet": b"A"})
    from airflow_tpc.core.records import CommitDecision

    doc = CommitDecision.for_manifest(manifest, decided_at=1.0, mode="move",
                                      verify=sink.config.verify, forced=False).to_doc(manifest)
    first, rec = sink.ledger.create_or_get("e1", 1, DECISION, doc)
    second, same = sink.ledger.create_or_get("e1", 1, DECISION, doc)
    assert (first, second) == (True, False)
    assert same == rec
    raw = json.loads(sink.storage.read_bytes(sink.layout.record("e1", 1, DECISION)))
    assert len(raw[WRITER_FIELD]) == 32

    # A lost answer: the storage wrote our bytes, then said it did not (as an SDK retry
    # after a lost response sees its own object).  That is still our write.
    storage = sink.storage
    real_put = storage.put_if_absent

    def lost_answer(path: str, data: bytes) -> bool:
        real_put(path, data)
        return False

    storage.put_if_absent = lost_answer  # type: ignore[method-assign]
    created, _ = sink.ledger.create_or_get("e1", 1, "closed", {"closed_at": 1.0})
    assert created
