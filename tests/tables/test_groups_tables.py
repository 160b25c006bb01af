"""A group over mixed targets: a folder, an Iceberg table and a Delta table, one epoch.

Real parts only, local disk: a plain folder target (:class:`airflow_tpc.Sink`), an
Iceberg table through pyiceberg's SQL catalog on SQLite, a Delta table through
delta-rs.  Every member's data is Parquet with distinct ids per member and per run,
so a row shown twice, a member showing another run's rows, or a half-switched epoch
all show up as a wrong id list.  Readers: the group's consistent cut
(:meth:`Group.committed_files`) and, for the tables, the table formats' own readers
(pyiceberg's scan, delta-rs's ``to_pyarrow_table``) restricted to that cut.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from pyiceberg.catalog import load_catalog
from pyiceberg.expressions import EqualTo

from airflow_tpc import Sink, TxnState
from airflow_tpc.core import faults
from airflow_tpc.core.faults import InjectedCrash, crash_at
from airflow_tpc.core.records import DECISION
from airflow_tpc.errors import InvalidState
from airflow_tpc.group import Group, GroupTransaction
from airflow_tpc.tables import DeltaSink, IcebergSink, TableSchemaError
from airflow_tpc.tables.base import PROP_ATTEMPT, PROP_EPOCH, PROP_TXN_ID

from .conftest import TABLE, rows, write_parquet

NS = "etl"
EPOCH = "5"
#: Member names, in the order the group walks them (sorted).
DELTA, FILES, ICE = "delta", "files", "ice"
#: ids per member: distinct across members and runs, so any mix-up is visible.
OLD = {DELTA: [1, 2], FILES: [3, 4], ICE: [5, 6, 7]}
NEW = {DELTA: [10], FILES: [20, 21], ICE: [30, 31]}


@dataclass(frozen=True)
class Lake:
    """One set of targets on local disk: a folder, an Iceberg table (its own SQLite
    catalog and warehouse), a Delta table, and the group's folder apart from them."""

    root: Path

    @property
    def catalog_props(self) -> dict[str, str]:
        return {"type": "sql", "uri": f"sqlite:///{self.root}/catalog.db",
                "warehouse": f"file://{self.root}/warehouse"}

    @property
    def delta_path(self) -> str:
        return str(self.root / "delta")

    def group(self) -> Group:
        """A fresh Group of fresh sinks (a new process sees only what is in storage)."""
        sinks: dict[str, Sink] = {
            FILES: Sink(str(self.root / "files"), NS),
            ICE: IcebergSink(f"iceberg://local/{TABLE}", NS,
                             catalog_properties=self.catalog_props),
            DELTA: DeltaSink(f"delta+file://{self.delta_path}", NS),
        }
        return Group(sinks, str(self.root / "groups"))

    def iceberg(self):
        return load_catalog("local", **self.catalog_props).load_table(TABLE)


def make_lake(root: Path) -> Lake:
    (root / "warehouse").mkdir(parents=True)
    return Lake(root)


def _path(uri: str) -> str:
    return uri[len("file://"):] if uri.startswith("file://") else uri


def _stage(group: Group, ids: dict[str, list[int]], *,
           bad: dict[str, pa.Table] | None = None, precommit: bool = True
           ) -> GroupTransaction:
    """Begin the epoch and write each member's Parquet into its staging (as the job
    does); ``bad`` replaces a member's batch."""
    gtxn = group.begin(EPOCH)
    for name, sink in group.sinks.items():
        batch = (bad or {}).get(name, rows(EPOCH, ids[name]))
        write_parquet(sink, gtxn.member(name), "a.parquet", batch)
    if precommit:
        group.precommit(gtxn)
    return gtxn


def _setup(lake: Lake) -> GroupTransaction:
    """Epoch 5 committed with OLD rows (group attempt 1); the re-run with NEW rows
    begun and pre-committed (attempt 2), not committed."""
    group = lake.group()
    first = _stage(group, OLD)
    assert group.commit(first).outcome == "committed" and first.attempt == 1
    rerun = _stage(group, NEW)
    assert rerun.attempt == 2
    return rerun


def _parquet_ids(uris: list[str]) -> list[int]:
    return sorted(i for u in uris for i in pq.read_table(_path(u))["id"].to_pylist())


def _iceberg_ids(lake: Lake, epoch: str | None = None) -> tuple[list[int], set[str]]:
    """The ids pyiceberg's scan reads (of one epoch), and the data files it plans."""
    table = lake.iceberg()
    scan = table.scan(row_filter=EqualTo("epoch", epoch)) if epoch else table.scan()
    files = {_path(t.file.file_path) for t in scan.plan_files()}
    return sorted(scan.to_arrow()["id"].to_pylist()), files


def _delta_ids(lake: Lake, epoch: str | None = None) -> tuple[list[int], set[str]]:
    """The ids delta-rs reads (of one epoch), and the table's files (of that epoch)."""
    table = DeltaTable(lake.delta_path)
    data = table.to_pyarrow_table().to_pylist()
    ids = sorted(r["id"] for r in data if epoch is None or r["epoch"] == epoch)
    parts = [("epoch", "=", epoch)] if epoch is not None else None
    return ids, {_path(u) for u in table.file_uris(file_pruning_predicate=parts)}


def _cut(group: Group) -> dict[str, dict[str, list[int]]]:
    """epoch -> member -> ids, as a reader of the group's consistent cut reads them:
    the folder's files the cut names; each table through its own reader, for the
    epochs the cut says are stable, checked to be exactly the files the cut names."""
    lake = Lake(Path(_path(group.uri)).parent)
    out: dict[str, dict[str, list[int]]] = {}
    for name, per_epoch in group.committed_files().items():
        for epoch, uris in per_epoch.items():
            named = {_path(u) for u in uris}
            if name == FILES:
                got = _parquet_ids(uris)
            else:
                got, files = (_iceberg_ids if name == ICE else _delta_ids)(lake, epoch)
                assert files == named, (name, epoch, files, named)
                assert got == _parquet_ids(uris), (name, epoch)
            out.setdefault(epoch, {})[name] = got
    return out


def _cut_of(ids: dict[str, list[int]]) -> dict[str, list[int]]:
    return {n: sorted(v) for n, v in ids.items()}


def _folder_files(lake: Lake) -> dict[str, bytes]:
    """What a plain lister of the folder target sees: its visible data files."""
    root = lake.root / "files"
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not d.startswith(("_", "."))]
        for f in filenames:
            if not f.startswith(("_", ".")):
                path = Path(dirpath) / f
                out[str(path.relative_to(root))] = path.read_bytes()
    return out


def _ours(lake: Lake) -> dict[str, list[str]]:
    """The attempts airflow-tpc committed to each table, oldest first, from the
    tables' own histories (one snapshot / version per attempt, never two)."""
    snaps = [s.summary for s in lake.iceberg().snapshots()]
    infos = reversed(DeltaTable(lake.delta_path).history())
    return {ICE: [s[PROP_ATTEMPT] for s in snaps if s.get(PROP_TXN_ID)
                  and s.get(PROP_EPOCH) == EPOCH],
            DELTA: [i[PROP_ATTEMPT] for i in infos if i.get(PROP_TXN_ID)
                    and i.get(PROP_EPOCH) == EPOCH]}


def _holds_exactly(lake: Lake, want: dict[str, list[int]]) -> None:
    """Every member holds exactly ``want``'s rows, each once, read past the cut too:
    the whole tables and every visible file of the folder."""
    assert _iceberg_ids(lake)[0] == sorted(want[ICE])
    assert _delta_ids(lake)[0] == sorted(want[DELTA])
    files = _folder_files(lake)
    assert sorted(files) == [f"epoch={EPOCH}/a.parquet"]
    assert sorted(pq.read_table(pa.BufferReader(files[f"epoch={EPOCH}/a.parquet"]))["id"]
                  .to_pylist()) == sorted(want[FILES])


def _tables_state(lake: Lake) -> dict[str, object]:
    """What a table's readers could notice changing: snapshots and versions, rows."""
    ice = lake.iceberg()
    delta = DeltaTable(lake.delta_path)
    return {"ice_snapshots": [s.snapshot_id for s in ice.snapshots()],
            "ice_current": ice.current_snapshot().snapshot_id,
            "ice_ids": _iceberg_ids(lake)[0],
            "delta_version": delta.version(), "delta_ids": _delta_ids(lake)[0],
            "files": _folder_files(lake)}


def _undecided(lake: Lake, gtxn: GroupTransaction) -> None:
    """No decision for the attempt: not in the group's ledger, not in any member's."""
    group = lake.group()
    assert group.ledger.read(gtxn.epoch, gtxn.attempt, DECISION) is None
    for name, sink in group.sinks.items():
        assert sink.ledger.read(gtxn.epoch, gtxn.attempt, DECISION) is None, name
    assert group.stable_epochs() == {EPOCH: 1}


def _states(lake: Lake, attempt: int) -> dict[str, TxnState]:
    group = lake.group()
    return {name: next(i.state for i in sink.describe(EPOCH) if i.attempt == attempt)
            for name, sink in group.sinks.items()}


def _steps(lake: Lake) -> list[str]:
    """Every crash point one group commit of the re-run passes, in order."""
    gtxn = _setup(lake)
    faults.reset()
    lake.group().commit(gtxn)
    return list(faults.seen())


def test_crash_at_every_step_of_a_mixed_group_commit_then_recover(tmp_path):
    """Crashes at every occurrence of every crash point one group commit of a re-run
    passes (22 on this folder + Iceberg + Delta group, about 1 s each on a 2-core
    machine: the full list is kept, no sampling).  At the crash, the consistent cut
    shows epoch 5 all OLD (always, before the decision), all NEW, or (mid-switch)
    not at all; a fresh group's recover then leaves every member with exactly NEW
    (decided) or OLD (not decided: committing the open attempt then publishes NEW),
    each row once and one table commit per attempt."""
    steps = _steps(make_lake(tmp_path / "probe"))
    assert steps.count("group.after_member") == 3 and steps[-1] == "group.before_published"
    for point in ("group.before_decision", "group.after_decision",
                  "iceberg.before_table_commit", "iceberg.after_table_commit",
                  "delta.before_table_commit", "delta.after_table_commit",
                  "promote.before_swap"):
        assert point in steps, (point, steps)
    decision_at = steps.index("group.before_decision") + 1  # 1-based: before it is undecided
    for k, point in enumerate(steps, 1):
        where = f"crash at step {k}: {point}"
        lake = make_lake(tmp_path / f"k{k}")
        gtxn = _setup(lake)
        with crash_at(steps, k), pytest.raises(InjectedCrash, match=f"step {k}:"):
            lake.group().commit(gtxn)
        decided = k > decision_at
        at_crash = _cut(lake.group()).get(EPOCH)
        assert at_crash in (_cut_of(OLD), _cut_of(NEW), None), where
        if not decided:  # an undecided attempt never shows in the cut
            assert at_crash == _cut_of(OLD), where

        report = lake.group().recover()
        assert report.errors == [], where
        want = NEW if decided else OLD
        group = lake.group()
        assert group.stable_epochs() == {EPOCH: 2 if decided else 1}, where
        assert _cut(group) == {EPOCH: _cut_of(want)}, where
        _holds_exactly(lake, want)
        assert _ours(lake) == {ICE: ["1", "2"] if decided else ["1"],
                               DELTA: ["1", "2"] if decided else ["1"]}, where
        if decided:
            assert lake.group().commit(gtxn).outcome == "already_committed", where
        else:  # the attempt is still open: it commits now, once
            assert set(_states(lake, 2).values()) == {TxnState.PRECOMMITTED}, where
            assert lake.group().commit(gtxn).outcome == "committed", where
        assert _cut(lake.group()) == {EPOCH: _cut_of(NEW)}, where
        _holds_exactly(lake, NEW)
        assert _ours(lake) == {ICE: ["1", "2"], DELTA: ["1", "2"]}, where
        assert set(_states(lake, 2).values()) == {TxnState.COMMITTED}, where


def _wrong_id_type() -> pa.Table:
    batch = rows(EPOCH, NEW[ICE])
    return batch.set_column(0, "id", pa.array([str(i) for i in NEW[ICE]], pa.string()))


def _extra_column() -> pa.Table:
    return rows(EPOCH, NEW[DELTA], bogus=["x"] * len(NEW[DELTA]))


@pytest.mark.parametrize(("member", "batch", "words"), [
    (ICE, _wrong_id_type(), "id (string in the file, long in the table)"),
    (DELTA, _extra_column(), "columns not in the table: bogus"),
])
def test_a_member_failing_its_check_at_precommit_changes_nothing(tmp_path, member, batch,
                                                                  words):
    """One member's staged Parquet does not fit its table: the group's pre-commit
    refuses with the table and the column named, nothing is decided, no target
    changes; the group's abort then aborts every member, and the attempt can never
    be committed."""
    lake = make_lake(tmp_path)
    group = lake.group()
    group.commit(_stage(group, OLD))
    gtxn = _stage(group, NEW, bad={member: batch}, precommit=False)
    before = _tables_state(lake)

    with pytest.raises(TableSchemaError) as exc:
        lake.group().precommit(gtxn)
    message = str(exc.value)
    assert words in message and "Nothing was decided or changed" in message
    assert group.sinks[member].table_target.uri in message  # which member: its table
    _undecided(lake, gtxn)
    assert lake.group().sinks[member].read_manifest(gtxn.member(member)) is None  # not sealed
    assert _tables_state(lake) == before
    assert _cut(lake.group()) == {EPOCH: _cut_of(OLD)}

    assert lake.group().abort(gtxn, "bad input") is True
    assert _states(lake, gtxn.attempt) == {n: TxnState.ABORTED for n in group.sinks}
    assert _states(lake, 1) == {n: TxnState.COMMITTED for n in group.sinks}
    with pytest.raises(InvalidState, match="aborted"):
        lake.group().commit(gtxn)
    assert _tables_state(lake) == before
    assert _cut(lake.group()) == {EPOCH: _cut_of(OLD)}
    assert lake.group().stable_epochs() == {EPOCH: 1}


def test_an_incompatible_table_change_after_precommit_fails_the_commit_undecided(tmp_path):
    """Every member pre-committed; then a foreign writer drops a column of the Iceberg
    table the staged files hold (plain pyiceberg).  The group's commit refuses before
    its decision: no member switched (the folder, the Delta table and the Iceberg
    table's snapshots as they were), nothing decided anywhere."""
    lake = make_lake(tmp_path)
    gtxn = _setup(lake)
    foreign = lake.iceberg()
    with foreign.update_schema() as update:
        update.delete_column("value")
    before = _tables_state(lake)

    with pytest.raises(TableSchemaError, match="columns not in the table: value") as exc:
        lake.group().commit(gtxn)
    assert "Nothing was decided or changed" in str(exc.value)
    _undecided(lake, gtxn)
    assert _tables_state(lake) == before
    assert _ours(lake) == {ICE: ["1"], DELTA: ["1"]}
    assert _states(lake, gtxn.attempt) == {n: TxnState.PRECOMMITTED for n in lake.group().sinks}
    assert _cut(lake.group()) == {EPOCH: _cut_of(OLD)}
    # A retry meets the same table: refused again, still nothing decided.
    with pytest.raises(TableSchemaError, match="columns not in the table: value"):
        lake.group().commit(gtxn)
    _undecided(lake, gtxn)
    assert lake.group().abort(gtxn, "table changed") is True
    assert _states(lake, gtxn.attempt) == {n: TxnState.ABORTED for n in lake.group().sinks}
    assert _tables_state(lake) == before


KILLED_CHILD = """
import sys
sys.path.insert(0, {repo!r})
from pathlib import Path
from tests.tables.test_groups_tables import Lake
lake = Lake(Path({root!r}))
group = lake.group()
group.commit(group.transaction({epoch!r}, {attempt}))
"""


#: Where the SIGKILL test kills (a child process costs ~5 s of imports here; the
#: in-process test above crashes at every occurrence of every step): before the
#: decision, between the two tables' commits, inside Iceberg's, before the last fact.
KILL_AT = ["group.before_decision", "delta.after_table_commit",
           "iceberg.before_table_commit", "group.before_published"]


def test_sigkill_at_steps_of_a_mixed_group_commit_then_recover(tmp_path):
    """The process committing the folder + Iceberg + Delta group is SIGKILLed when it
    first reaches each step of :data:`KILL_AT` (no exception handler, no ``finally``);
    a fresh process's recover leaves every member with exactly NEW (the decision was
    written) or OLD, each row once, one table commit per attempt."""
    import subprocess
    import sys

    from ..core.test_process_kill import kill_when_paused

    assert set(KILL_AT) <= set(_steps(make_lake(tmp_path / "probe")))
    repo = str(Path(__file__).resolve().parents[2])
    for k, step in enumerate(KILL_AT, 1):
        lake = make_lake(tmp_path / f"k{k}")
        gtxn = _setup(lake)
        flag = tmp_path / f"paused-{k}"
        env = dict(os.environ, AIRFLOW_TPC_PAUSE_AT=step, AIRFLOW_TPC_PAUSE_FLAG=str(flag))
        proc = subprocess.Popen([sys.executable, "-c", KILLED_CHILD.format(
            repo=repo, root=str(lake.root), epoch=gtxn.epoch, attempt=gtxn.attempt)],
            env=env)
        kill_when_paused(proc, flag, step)
        assert _cut(lake.group()).get(EPOCH) in (_cut_of(OLD), _cut_of(NEW), None), step
        assert lake.group().recover().errors == [], step
        decided = step != "group.before_decision"
        want = NEW if decided else OLD
        assert _cut(lake.group()) == {EPOCH: _cut_of(want)}, step
        _holds_exactly(lake, want)
        assert _ours(lake) == {ICE: ["1", "2"] if decided else ["1"],
                               DELTA: ["1", "2"] if decided else ["1"]}, step
