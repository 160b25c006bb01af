"""Cleanup never deletes staging on the word of ``published.json`` alone: the published
marker must name that attempt or a higher one (``SinkMaintenance._marker_at_least``).

Mutation testing (docs/mutation.md) found no test of the case the guard exists for: a
``published.json`` (restored from a backup, copied from elsewhere) for an attempt whose
promotion never happened, while the marker still names a lower attempt.  Turning the
guard's ``and`` into ``or`` survived — gc would then delete the only copy of that
attempt's decided output.  Real local files.
"""

from __future__ import annotations

import time

import pytest

from airflow_tpc import Sink
from airflow_tpc.core.faults import InjectedCrash, armed
from airflow_tpc.core.records import PUBLISHED

from .helpers import full_tree, stage


def test_gc_keeps_staging_that_published_json_claims_but_the_marker_does_not(tmp_path):
    sink = Sink(str(tmp_path / "t"), "events")
    first, _ = stage(sink, "e", {"a.parquet": b"one"})
    sink.commit(first)  # the marker names attempt 1
    second, manifest = stage(sink, "e", {"a.parquet": b"two"})
    with armed("commit.after_decision"), pytest.raises(InjectedCrash):
        sink.commit(second)  # decided, never promoted
    # The damage: attempt 2 claims to be published; the marker says attempt 1.
    sink.ledger.create_or_get("e", second.attempt, PUBLISHED, {
        "published_at": time.time(), "txn_id": second.txn_id,
        "manifest_digest": manifest.digest})
    staging = sink.layout.staging("e", second.attempt)
    staged = {p: b for p, b in full_tree(sink).items() if p.startswith(staging)}
    assert any(p.endswith("a.parquet") for p in staged)

    assert sink.gc() == []
    assert {p: b for p, b in full_tree(sink).items() if p.startswith(staging)} == staged
