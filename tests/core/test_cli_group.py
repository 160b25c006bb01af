"""``airflow-tpc group status|recover|abort`` on real local folders, the CLI run as a real
process (``python -m airflow_tpc``), as an operator runs it after a crash: the group is
crashed in this process (``faults.armed``), the CLI sees only what is in storage."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_tpc import Sink
from airflow_tpc.cli.commands import build_parser, main
from airflow_tpc.core.faults import InjectedCrash, armed
from airflow_tpc.group import Group, GroupTransaction

from .helpers import write_staged

NS = "etl"
NAMES = ("events", "daily")


def _group(base: Path) -> Group:
    sinks = {n: Sink(str(base / n), NS) for n in NAMES}
    return Group(sinks, str(base / "groups" / "etl"))


def _stage(group: Group, epoch: str, data: bytes) -> GroupTransaction:
    gtxn = group.begin(epoch)
    for name, sink in group.sinks.items():
        write_staged(sink, gtxn.member(name), {"part-0.parquet": data + name.encode()})
    group.precommit(gtxn)
    return gtxn


def _crashed(base: Path) -> Group:
    """Epoch 1 committed and published; epoch 2 decided COMMITTED in the group's ledger,
    its process gone before any member switched; epoch 3 begun, never finished."""
    group = _group(base)
    group.commit(_stage(group, "1", b"one"))
    with armed("group.after_decision"), pytest.raises(InjectedCrash):
        group.commit(_stage(group, "2", b"two"))
    group.begin("3")
    return group


def _members(base: Path) -> list[str]:
    return [x for n in NAMES for x in ("--member", f"{n}={base / n}")]


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "airflow_tpc", *args], capture_output=True,
                          text=True, timeout=300)


def _tree(base: Path) -> dict[str, bytes]:
    """Every file under ``base``: ledgers, staging and published files, byte for byte."""
    return {str(p.relative_to(base)): p.read_bytes() for p in sorted(base.rglob("*"))
            if p.is_file()}


def _one_error(proc: subprocess.CompletedProcess, *needles: str) -> str:
    assert proc.returncode == 2, proc
    assert proc.stdout == "" and "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def test_status_then_recover_of_a_group_crashed_after_its_decision(tmp_path):
    group = _crashed(tmp_path)
    uri = str(tmp_path / "groups" / "etl")
    proc = _cli("group", "status", uri, *_members(tmp_path), "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["namespace"] == NS and set(doc["members"]) == set(NAMES)
    assert doc["stable_epochs"] == {"1": 1}  # epoch 2 is decided, not stable
    rows = {(r["epoch"], r["attempt"]): r for r in doc["attempts"]}
    assert set(rows) == {("1", 1), ("2", 1), ("3", 1)}
    one, two, three = rows["1", 1], rows["2", 1], rows["3", 1]
    assert (one["state"], one["published"], one["stable"]) == ("COMMITTED", True, True)
    assert one["members"] == {n: {"state": "COMMITTED", "published": True} for n in NAMES}
    assert (two["state"], two["published"], two["stable"]) == ("COMMITTED", False, False)
    assert two["txn_id"] == "etl/2/1" and "group recover" in two["note"]
    # The members have not seen the decision: each is still its sealed attempt.
    assert two["members"] == {n: {"state": "PRECOMMITTED", "published": False}
                              for n in NAMES}
    assert three["state"] == "OPEN" and three["members"]["events"]["state"] == "OPEN"

    text = _cli("group", "status", uri, *_members(tmp_path))
    assert text.returncode == 0, text.stderr
    head, stable, columns, _, *lines = text.stdout.splitlines()
    assert head.startswith(f"group file://{uri}  namespace etl  members: daily (")
    assert stable == "stable epochs: 1 (attempt 1)"
    assert columns.split() == ["EPOCH", "ATTEMPT", "STATE", "PUBLISHED", "daily", "events",
                               "AGE", "NOTE"]
    assert lines[1].split()[:6] == ["2", "1", "COMMITTED", "no", "PRECOMMITTED",
                                    "PRECOMMITTED"]
    only = _cli("group", "status", uri, *_members(tmp_path), "--epoch", "2", "--json")
    assert [r["epoch"] for r in json.loads(only.stdout)["attempts"]] == ["2"]
    assert json.loads(only.stdout)["stable_epochs"] == {}

    proc = _cli("group", "recover", uri, *_members(tmp_path), "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["rolled_forward"] == [["2", 1]] and report["errors"] == []
    assert report["aborted"] == []  # epoch 3 is neither superseded nor expired
    assert report["stable_epochs"] == {"1": 1, "2": 1}
    assert group.stable_epochs() == {"1": 1, "2": 1}
    for sink in group.sinks.values():
        assert set(sink.committed_files()) == {"1", "2"}
    after = json.loads(_cli("group", "status", uri, *_members(tmp_path), "--json").stdout)
    two = next(r for r in after["attempts"] if r["epoch"] == "2")
    assert (two["state"], two["published"], two["stable"]) == ("COMMITTED", True, True)
    assert two["members"] == {n: {"state": "COMMITTED", "published": True} for n in NAMES}

    proc = _cli("group", "recover", uri, *_members(tmp_path), "--abort-undecided")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["rolled forward: none",
                                        "aborted (1):",
                                        "  epoch 3  attempt 1  (restore)",
                                        "stable epochs: 1 (attempt 1), 2 (attempt 1)"]
    assert group.poll(group.transaction("3", 1)).outcome == "abort"


def test_abort_an_open_attempt_and_refuse_a_committed_one(tmp_path):
    group = _crashed(tmp_path)
    uri = str(tmp_path / "groups" / "etl")
    proc = _cli("group", "abort", uri, *_members(tmp_path), "--epoch", "3", "--attempt", "1",
                "--reason", "bad input data")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "aborted group etl/3/1 on every member (daily, events)"
    assert group.poll(group.transaction("3", 1)).reason == "bad input data"
    for name, sink in group.sinks.items():
        (info,) = sink.describe("3")
        assert str(info.state) == "ABORTED", name
    again = _cli("group", "abort", uri, *_members(tmp_path), "--epoch", "3", "--attempt", "1")
    assert again.returncode == 0 and "already ABORTED" in again.stdout

    # A committed group attempt, published (epoch 1) or not yet switched (epoch 2): refused,
    # and nothing changes, not a byte of any ledger, staging or published file.
    before = _tree(tmp_path)
    for epoch in ("1", "2"):
        proc = _cli("group", "abort", uri, *_members(tmp_path), "--epoch", epoch,
                    "--attempt", "1")
        _one_error(proc, f"cannot abort group etl/{epoch}/1: it is COMMITTED",
                   "nothing was changed")
        assert _tree(tmp_path) == before
    assert main(["group", "abort", uri, *_members(tmp_path), "--epoch", "2", "--attempt",
                 "1", "--json"]) == 2
    assert _tree(tmp_path) == before
    assert group.stable_epochs() == {"1": 1}
    # An attempt that never began is named, not invented.
    _one_error(_cli("group", "abort", uri, *_members(tmp_path), "--epoch", "2", "--attempt",
                    "7"), "no transaction for epoch 2 attempt 7")


def test_bad_input_is_one_clear_error(tmp_path):
    _crashed(tmp_path)
    other = Sink(str(tmp_path / "other"), NS)
    other.begin("1")  # a claimed target, not a member of the group
    uri = str(tmp_path / "groups" / "etl")
    events, daily = (f"{n}={tmp_path / n}" for n in NAMES)
    before = _tree(tmp_path)
    # Member syntax: argparse's usage line, then its error line naming --member.
    for bad in ("events", f"={tmp_path / 'events'}", "events=", f"no name!={tmp_path}"):
        proc = _cli("group", "status", uri, "--member", bad, "--member", daily)
        assert proc.returncode == 2 and proc.stdout == "", proc
        assert "Traceback" not in proc.stderr
        last = proc.stderr.strip().splitlines()[-1]
        assert last.startswith("airflow-tpc group status: error: argument --member:"), last
    # A member set that differs from the group's claim, or a member at another target.
    _one_error(_cli("group", "status", uri, "--member", events),
               "was created with members daily (", "the --member options name events")
    _one_error(_cli("group", "recover", uri, "--member", events, "--member", daily,
                    "--member", f"other={other.target}"), "name daily, events, other")
    _one_error(_cli("group", "recover", uri, "--member", events,
                    "--member", f"daily={tmp_path / 'other'}"),
               f"member 'daily' of group file://{uri} is file://{tmp_path / 'daily'}, not")
    _one_error(_cli("group", "abort", uri, "--member", events, "--member", events,
                    "--epoch", "3", "--attempt", "1"), "names member 'events' twice")
    _one_error(_cli("group", "status", uri, "--member", events, "--member", daily,
                    "--namespace", "other-ns"), "belongs to namespace 'etl', not 'other-ns'")
    _one_error(_cli("group", "status", str(tmp_path / "events"), "--member", events,
                    "--member", daily), "holds no airflow-tpc group")
    _one_error(_cli("group", "status", uri, "--member", events, "--member", daily,
                    "--ledger-uri", f"other={tmp_path}"), "--ledger-uri names 'other'")
    assert _tree(tmp_path) == before


def test_a_recover_that_fails_is_one_error_and_the_next_one_finishes(tmp_path):
    """A member whose sealed staging is out of reach cannot be switched: recover exits 2
    with one ``error:`` line naming the group; nothing is lost, and once the staging is
    back (the same files: a rename keeps their fingerprints) the next recover finishes
    the epoch on every member."""
    group = _crashed(tmp_path)
    events = group.sinks["events"]
    staging = Path(events.layout.staging("2", 1))
    away = staging.with_name(staging.name + ".away")
    staging.rename(away)
    uri = str(tmp_path / "groups" / "etl")
    proc = _cli("group", "recover", uri, *_members(tmp_path))
    assert proc.returncode == 2 and proc.stdout == "" and "Traceback" not in proc.stderr, proc
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: recover of group file://{uri} left 2 problem(s)"), last
    assert "its sealed manifest" in last and "is gone although the commit was decided" in last
    assert "the next recover retries" in last
    assert group.stable_epochs() == {"1": 1}
    away.rename(staging)
    proc = _cli("group", "recover", uri, *_members(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[:2] == ["rolled forward (1):", "  epoch 2  attempt 1"]
    assert group.stable_epochs() == {"1": 1, "2": 1}


def test_help_names_every_group_command_and_option(capsys):
    parser = build_parser()
    assert "'airflow-tpc group --help'" in parser.epilog
    sub = next(a for a in parser._actions if a.dest == "command")
    group = sub.choices["group"]
    assert group.description
    gsub = next(a for a in group._actions if a.dest == "group_command")
    assert {c.dest for c in gsub._choices_actions} == {"status", "recover", "abort"}
    for choice in gsub._choices_actions:
        assert choice.help, choice.dest
    for name, p in gsub.choices.items():
        assert p.description, name
        for action in p._actions:
            assert action.help, (name, action.dest)
    with pytest.raises(SystemExit) as exit_:
        main(["group", "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert all(c in out for c in ("status", "recover", "abort"))


def test_table_members_are_opened_as_the_single_target_commands_open_them(tmp_path, capsys):
    """A folder, an Iceberg table (pyiceberg's SQL catalog on SQLite, named by a
    .pyiceberg.yaml as the single-target commands take it) and a Delta table in one
    group, crashed after its decision: status sees it decided, recover switches every
    member (a new Iceberg snapshot, a new Delta version)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyiceberg.catalog import load_catalog

    from airflow_tpc.tables import open_sink

    (tmp_path / "warehouse").mkdir()
    props = {"type": "sql", "uri": f"sqlite:///{tmp_path}/catalog.db",
             "warehouse": f"file://{tmp_path}/warehouse"}
    config = tmp_path / ".pyiceberg.yaml"
    config.write_text("catalog:\n  local:\n" + "".join(f"    {k}: '{v}'\n"
                                                      for k, v in props.items()))
    targets = {"events": str(tmp_path / "events"), "daily": "iceberg://local/analytics.daily",
               "hourly": f"delta+file://{tmp_path}/hourly"}
    sinks = {"events": Sink(targets["events"], NS),
             "daily": open_sink(targets["daily"], NS, catalog_properties=props),
             "hourly": open_sink(targets["hourly"], NS)}
    group = Group(sinks, str(tmp_path / "groups" / "etl"))

    def stage(epoch: str) -> GroupTransaction:
        gtxn = group.begin(epoch)
        for name, sink in sinks.items():
            path = gtxn.member(name).staging_uri.removeprefix("file://") + "/part-0.parquet"
            sink.storage.put(path, b"")
            pq.write_table(pa.table({"id": pa.array([int(epoch)], pa.int64()),
                                     "epoch": pa.array([epoch])}), path)
        group.precommit(gtxn)
        return gtxn

    group.commit(stage("1"))
    with armed("group.after_decision"), pytest.raises(InjectedCrash):
        group.commit(stage("2"))
    uri = str(tmp_path / "groups" / "etl")
    members = [x for n, t in targets.items() for x in ("--member", f"{n}={t}")]
    flags = [*members, "--catalog-config", str(config)]

    assert main(["group", "status", uri, *flags, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["stable_epochs"] == {"1": 1}
    two = next(r for r in doc["attempts"] if r["epoch"] == "2")
    assert (two["state"], two["published"]) == ("COMMITTED", False)
    assert {m["state"] for m in two["members"].values()} == {"PRECOMMITTED"}
    # Without the catalog the Iceberg member cannot be opened: one error line.
    assert main(["group", "status", uri, *members,
                 "--catalog-property", f"uri=sqlite:///{tmp_path}/none/catalog.db"]) == 2
    assert capsys.readouterr().err.startswith("error:")

    assert main(["group", "recover", uri, *flags, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["rolled_forward"] == [["2", 1]] and report["stable_epochs"] == {"1": 1,
                                                                                 "2": 1}
    table = load_catalog("local", **props).load_table("analytics.daily")
    assert sorted(s.summary["airflow-tpc.epoch"] for s in table.snapshots()) == ["1", "2"]
    from deltalake import DeltaTable

    assert DeltaTable(f"{tmp_path}/hourly").version() == 1  # epoch 1: version 0
    assert set(group.sinks["events"].committed_files()) == {"1", "2"}
