"""``read_committed(spark, target, group=...)`` never mixes attempts (issue 32 §1): a
member re-committed outside the group (here by a plain single-target run of the same
namespace) keeps the epoch out of every member's cut read; a lost group folder is an
error, not an empty read.  Real Spark, real local folders."""

from __future__ import annotations

import shutil

import pytest

from airflow_tpc import Sink
from airflow_tpc.errors import TpcError

from ..core.helpers import stage
from .test_group_reader import _commit, _ids, _parquet


def test_a_member_recommitted_outside_the_group_is_left_out_of_the_cut(spark, tmp_path):
    group_uri = str(tmp_path / "_tpc_groups" / "etl")
    events, daily = str(tmp_path / "events"), str(tmp_path / "daily")
    _commit(tmp_path, "1", {"events": [1, 2], "daily": [10]})
    _commit(tmp_path, "2", {"events": [3], "daily": [20]})
    txn, _ = stage(Sink(daily, "etl"), "1", {"part-0.parquet": _parquet(tmp_path, [99])})
    Sink(daily, "etl").commit(txn)
    assert _ids(spark, daily, None) == {"1": [99], "2": [20]}  # a plain reader: the re-run
    # The cut: epoch 1 is never daily's re-run beside events at the group's attempt.
    assert _ids(spark, daily, group_uri) == {"2": [20]}
    assert _ids(spark, events, group_uri) == {"2": [3]}
    shutil.rmtree(group_uri)
    with pytest.raises(TpcError, match="holds no airflow-tpc group"):
        _ids(spark, events, group_uri)
