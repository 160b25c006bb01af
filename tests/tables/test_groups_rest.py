"""A group of two Iceberg tables in one real REST catalog (SeaweedFS): both tables'
commits are made by ONE multi-table catalog call (``transactions/commit``), so even
engine readers see the tables move together; a refused call changes neither table and
each member then switches on its own; a crash around the call is recovered."""

from __future__ import annotations

import pytest

from airflow_tpc import Group
from airflow_tpc.core import faults
from airflow_tpc.core.faults import InjectedCrash
from airflow_tpc.tables import IcebergSink

from .conftest import rows, write_parquet

NS = "etl"
NAMES = ("daily", "events")


@pytest.fixture()
def make_group(seaweed, tmp_path):
    props = seaweed.catalog_properties(seaweed.new_warehouse())
    ledgers = {n: seaweed.new_prefix() for n in NAMES}

    def make() -> Group:  # a new process: only what is in storage survives
        return Group({n: IcebergSink(f"iceberg://sw/analytics.{n}", NS,
                                     catalog_properties=props,
                                     storage_options=seaweed.s3_options(),
                                     ledger_uri=ledgers[n]) for n in NAMES},
                     str(tmp_path / "_tpc_groups" / NS))
    make.props = props  # type: ignore[attr-defined]
    return make


def _stage(group: Group, epoch: str, ids: dict[str, list[int]]):
    gtxn = group.begin(epoch)
    for name, sink in group.sinks.items():
        write_parquet(sink, gtxn.member(name), "part-0.parquet", rows(epoch, ids[name]))
    group.precommit(gtxn)
    return gtxn


def _table(props, name: str):
    from pyiceberg.catalog import load_catalog

    return load_catalog("sw", **props).load_table(f"analytics.{name}")


def _ours(props, name: str, epoch: str) -> list[str]:
    """The attempts of ``epoch`` this pipeline committed to the table, oldest first."""
    return [s.summary.get("airflow-tpc.attempt") for s in _table(props, name).snapshots()
            if s.summary and s.summary.get("airflow-tpc.epoch") == epoch]


def _ids(props, name: str) -> list[int]:
    return sorted(_table(props, name).scan().to_arrow()["id"].to_pylist())


def test_both_tables_switch_in_one_catalog_commit(make_group):
    props = make_group.props
    group = make_group()
    group.commit(_stage(group, "1", {"daily": [1], "events": [10]}))  # creates the tables
    gtxn = _stage(group, "2", {"daily": [2], "events": [20, 21]})
    seen = {}

    def look(_name: str) -> None:  # after the one call, before any member's own switch
        seen.update({n: _ours(props, n, "2") for n in NAMES})

    with faults.armed("group.after_tables_commit", look):
        make_group().commit(gtxn)
    assert seen == {"daily": ["1"], "events": ["1"]}  # both moved by the one call
    assert _ids(props, "daily") == [1, 2] and _ids(props, "events") == [10, 20, 21]
    assert make_group().stable_epochs() == {"1": 1, "2": 1}


def test_a_refused_catalog_commit_changes_neither_table_then_each_switches(make_group):
    """A foreign commit to one table between the build and the call fails that table's
    requirement: the catalog applies neither table's change (409); each member then
    switches on its own (its own retry keeps the foreign rows)."""
    props = make_group.props
    group = make_group()
    group.commit(_stage(group, "1", {"daily": [1], "events": [10]}))
    gtxn = _stage(group, "2", {"daily": [2], "events": [20]})
    refused = {}

    def foreign_append(_name: str) -> None:
        _table(props, "events").append(rows("foreign", [99]))

    def look(_name: str) -> None:
        refused.update({n: _ours(props, n, "2") for n in NAMES})

    with faults.armed("group.before_tables_commit", foreign_append), \
            faults.armed("group.tables_commit_refused", look):
        make_group().commit(gtxn)
    assert refused == {"daily": [], "events": []}  # neither table took its change
    assert _ours(props, "daily", "2") == ["1"] and _ours(props, "events", "2") == ["1"]
    assert _ids(props, "daily") == [1, 2] and _ids(props, "events") == [10, 20, 99]
    assert make_group().stable_epochs() == {"1": 1, "2": 1}


@pytest.mark.parametrize("step", ["group.before_tables_commit", "group.after_tables_commit"])
def test_a_crash_around_the_catalog_commit_is_recovered_once(make_group, step):
    props = make_group.props
    group = make_group()
    group.commit(_stage(group, "1", {"daily": [1], "events": [10]}))
    gtxn = _stage(group, "2", {"daily": [2], "events": [20]})
    with faults.armed(step), pytest.raises(InjectedCrash):
        make_group().commit(gtxn)
    moved = step == "group.after_tables_commit"
    assert {n: _ours(props, n, "2") for n in NAMES} == \
        {n: (["1"] if moved else []) for n in NAMES}
    assert "2" not in make_group().stable_epochs()
    make_group().recover()
    assert {n: _ours(props, n, "2") for n in NAMES} == {n: ["1"] for n in NAMES}
    assert _ids(props, "daily") == [1, 2] and _ids(props, "events") == [10, 20]
    assert make_group().stable_epochs() == {"1": 1, "2": 1}
