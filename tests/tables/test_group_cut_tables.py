"""A group's cut with table members (issue 32 §1): an Iceberg member re-committed by a
plain single-target run leaves the epoch out of the cut — for ``Group.stable_epochs``
and for the job-side look ``read_committed(group=...)`` takes, which opens each
member's ledger as a plain folder (no table library).  Real pyiceberg SQL catalog and
delta-rs tables on local disk."""

from __future__ import annotations

from airflow_tpc.group.cut import MovedOn
from airflow_tpc.spark.readers import _group_cut

from .conftest import rows, write_parquet
from .test_groups_tables import EPOCH, ICE, OLD, _stage, make_lake


def test_a_table_member_recommitted_alone_is_left_out_of_the_cut(tmp_path):
    lake = make_lake(tmp_path)
    group = lake.group()
    group.commit(_stage(group, OLD))
    look = _group_cut(group.uri, None)
    assert group.stable_epochs() == {EPOCH: 1} and look() == {EPOCH: 1}
    ice = lake.group().sinks[ICE]  # a plain single-target run of the same namespace
    txn = ice.begin(EPOCH)
    write_parquet(ice, txn, "a.parquet", rows(EPOCH, [99]))
    ice.precommit(txn)
    ice.commit(txn)
    fresh = lake.group()
    assert fresh.stable_epochs() == {} and look() == {}
    assert fresh.moved_on() == [MovedOn(EPOCH, ICE, 1, 2, "single-target")]
    assert all(per_epoch == {} for per_epoch in fresh.committed_files().values())
