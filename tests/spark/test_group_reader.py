"""A Spark reader of one member of a group sees only the group's consistent cut
(``read_committed(spark, target, group=...)``): real Spark, real local folders."""

from __future__ import annotations

import pytest

from airflow_tpc import Group, Sink
from airflow_tpc.core import faults
from airflow_tpc.core.faults import InjectedCrash
from airflow_tpc.spark import read_committed

from ..core.helpers import write_staged


def _parquet(tmp_path, rows: list[int]) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / f"p{rows[0]}.parquet"
    pq.write_table(pa.table({"id": rows}), path)
    return path.read_bytes()


def _group(tmp_path) -> Group:
    return Group({n: Sink(str(tmp_path / n), "etl") for n in ("events", "daily")},
                 str(tmp_path / "_tpc_groups" / "etl"))


def _commit(tmp_path, epoch: str, ids: dict[str, list[int]], crash: str | None = None):
    group = _group(tmp_path)
    gtxn = group.begin(epoch)
    for name, sink in group.sinks.items():
        write_staged(sink, gtxn.member(name), {"part-0.parquet": _parquet(tmp_path, ids[name])})
    group.precommit(gtxn)
    if crash is None:
        group.commit(gtxn)
        return
    with faults.armed(crash), pytest.raises(InjectedCrash):
        group.commit(gtxn)


def _ids(spark, target: str, group: str | None) -> dict[str, list[int]]:
    rows = read_committed(spark, target, group=group).collect()
    out: dict[str, list[int]] = {}
    for row in rows:
        out.setdefault(row["epoch"], []).append(row["id"])
    return {e: sorted(v) for e, v in out.items()}


def test_a_member_is_read_at_the_groups_stable_cut_only(spark, tmp_path):
    group_uri = str(tmp_path / "_tpc_groups" / "etl")
    events = str(tmp_path / "events")
    _commit(tmp_path, "1", {"events": [1, 2], "daily": [10]})
    # Epoch 2's commit dies after its first member ("daily") switched: "events" has not.
    _commit(tmp_path, "2", {"events": [3], "daily": [20]}, crash="group.after_member")
    daily = str(tmp_path / "daily")
    assert _ids(spark, daily, None) == {"1": [10], "2": [20]}  # a plain reader: switched
    assert _ids(spark, daily, group_uri) == {"1": [10]}        # the cut: not yet
    assert _ids(spark, events, group_uri) == {"1": [1, 2]}
    _group(tmp_path).recover()
    assert _ids(spark, daily, group_uri) == {"1": [10], "2": [20]}
    assert _ids(spark, events, group_uri) == {"1": [1, 2], "2": [3]}
