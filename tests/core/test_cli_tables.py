"""The command line on a table target: list, status, abort, recover and gc of an Iceberg
table (real pyiceberg SQL catalog on SQLite, local warehouse), the catalog given as
``--catalog-property`` or ``--catalog-config``; a missing pyiceberg and an unreachable
catalog are one ``error:`` line."""

from __future__ import annotations

import json
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pyiceberg  # noqa: F401  (the tables extra, in dev: a missing one fails, never skips)

from airflow_tpc.cli import main
from airflow_tpc.core.faults import InjectedCrash, armed
from airflow_tpc.tables import open_sink

TABLE = "iceberg://local/analytics.events"


def _props(tmp_path) -> dict[str, str]:
    (tmp_path / "warehouse").mkdir(exist_ok=True)
    return {"type": "sql", "uri": f"sqlite:///{tmp_path}/catalog.db",
            "warehouse": f"file://{tmp_path}/warehouse"}


def _flags(props: dict[str, str]) -> list[str]:
    return [x for k, v in props.items() for x in ("--catalog-property", f"{k}={v}")]


def _stage(sink, epoch: str, ids: list[int]):
    txn = sink.begin(epoch)
    path = txn.staging_uri.removeprefix("file://") + "/part-0.parquet"
    sink.storage.put(path, b"")
    pq.write_table(pa.table({"id": pa.array(ids, pa.int64()),
                             "epoch": pa.array([epoch] * len(ids))}), path)
    return txn, sink.precommit(txn)


def _target(tmp_path):
    props = _props(tmp_path)
    sink = open_sink(TABLE, "cli-ns", catalog_properties=props)
    txn, m = _stage(sink, "2026-11-01", [1, 2, 3])
    sink.commit(txn, expected_digest=m.digest)
    pending, _ = _stage(sink, "2026-11-02", [4])
    decided, m3 = _stage(sink, "2026-11-03", [5])
    try:
        with armed("commit.after_decision"):
            sink.commit(decided, expected_digest=m3.digest)
    except InjectedCrash:
        pass
    return sink, props


def _snapshots(props) -> list:
    from pyiceberg.catalog import load_catalog

    return list(load_catalog("local", **props).load_table("analytics.events").snapshots())


def test_list_and_status_of_a_table(tmp_path, capsys):
    """A table is named as itself (its location beside it), each commit by the snapshot
    it made; the committed attempt's staged files, which the table took in place, are
    not counted as staging left, while the undecided and the decided-but-not-yet-in-the-
    table attempts' are."""
    _, props = _target(tmp_path)
    [snap] = _snapshots(props)
    assert main(["list", TABLE, *_flags(props)]) == 0
    out = capsys.readouterr().out
    head, columns, _, *lines = out.splitlines()
    assert head.startswith(f"table {TABLE}  location file://")
    assert columns.split() == ["EPOCH", "ATTEMPT", "STATE", "FILES", "BYTES", "ROWS", "AGE",
                               "SNAPSHOT_ID", "STAGING_FILES", "NOTE"]
    rows = {line.split()[0]: line for line in lines}
    committed = rows["2026-11-01"].split()
    assert committed[2] == "COMMITTED" and committed[-2:] == [str(snap.snapshot_id), "-"]
    assert "staged" not in rows["2026-11-01"]
    pending = rows["2026-11-02"].split()
    assert pending[2] == "PRECOMMITTED" and pending[-2] == "-" and int(pending[-1]) >= 1
    assert rows["2026-11-03"].endswith("decided, not yet in the table")
    assert main(["list", TABLE, "--json", *_flags(props)]) == 0
    by_epoch = {r["epoch"]: r for r in json.loads(capsys.readouterr().out)}
    assert {r["table"] for r in by_epoch.values()} == {TABLE}
    assert by_epoch["2026-11-01"]["snapshot_id"] == str(snap.snapshot_id)
    assert by_epoch["2026-11-01"]["in_table"] is True
    assert by_epoch["2026-11-01"]["staging_files"] >= 1  # the raw fact: the table's files
    for epoch in ("2026-11-02", "2026-11-03"):
        assert by_epoch[epoch]["snapshot_id"] is None and by_epoch[epoch]["in_table"] is False
        assert by_epoch[epoch]["staging_files"] >= 1
    assert main(["status", TABLE, "--json", *_flags(props)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["namespace"] == "cli-ns" and doc["committed_epochs"] == ["2026-11-01"]
    assert doc["target"] == TABLE and doc["location"].startswith("file://")  # as itself
    assert doc["format"] == "iceberg" and TABLE not in doc["location"]
    assert [(e["epoch"], e["snapshot_id"]) for e in doc["epochs"]] == [
        ("2026-11-01", str(snap.snapshot_id)), ("2026-11-02", None), ("2026-11-03", None)]
    assert main(["status", TABLE, *_flags(props)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"table {TABLE}  location file://")
    assert str(snap.snapshot_id) in out.splitlines()[3]


def test_abort_recover_gc_of_a_table(tmp_path, capsys):
    sink, props = _target(tmp_path)
    assert len(_snapshots(props)) == 1
    assert main(["abort", TABLE, "--epoch", "2026-11-02", *_flags(props)]) == 0
    assert "aborted cli-ns/2026-11-02/1" in capsys.readouterr().out
    assert main(["recover", TABLE, "--json", *_flags(props)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["rolled_forward"] == [["2026-11-03", 1]]
    # the roll-forward is one snapshot; the aborted epoch never reached the table
    assert [s.summary["airflow-tpc.epoch"] for s in _snapshots(props)] == \
        ["2026-11-01", "2026-11-03"]
    assert set(sink.committed_files()) == {"2026-11-01", "2026-11-03"}
    assert main(["gc", TABLE, *_flags(props)]) == 0
    assert "removed staging" in capsys.readouterr().out
    assert [i.staging_files for i in sink.describe("2026-11-02")] == [0]


def test_catalog_config_file_json_and_pyiceberg_yaml(tmp_path, capsys):
    _, props = _target(tmp_path)
    flat = tmp_path / "cat.json"
    flat.write_text(json.dumps(props))
    assert main(["status", TABLE, "--json", "--catalog-config", str(flat)]) == 0
    assert json.loads(capsys.readouterr().out)["committed_epochs"] == ["2026-11-01"]
    yaml_file = tmp_path / ".pyiceberg.yaml"
    yaml_file.write_text("catalog:\n  local:\n" + "".join(
        f"    {k}: '{v}'\n" for k, v in props.items()))
    assert main(["list", TABLE, "--json", "--catalog-config", str(yaml_file)]) == 0
    assert len(json.loads(capsys.readouterr().out)) == 3
    other = tmp_path / "other.yaml"
    other.write_text("catalog:\n  elsewhere:\n    type: sql\n")
    assert main(["list", TABLE, "--catalog-config", str(other)]) == 2
    assert "no catalog 'local'" in capsys.readouterr().err


def test_bad_input_is_one_line(tmp_path, capsys):
    _, props = _target(tmp_path)
    assert main(["list", TABLE, "--catalog-property", "no-equals-sign"]) == 2
    assert "KEY=VALUE" in capsys.readouterr().err
    assert main(["list", str(tmp_path / "folder"), *_flags(props)]) == 2
    assert "not a table" in capsys.readouterr().err
    assert main(["abort", TABLE, "--epoch", "2026-11-02", "--namespace", "other",
                 *_flags(props)]) == 2
    assert "belongs to namespace 'cli-ns'" in capsys.readouterr().err


def test_unreachable_catalog_and_missing_pyiceberg_are_one_error_line(tmp_path):
    bad = ["--catalog-property", "type=sql", "--catalog-property",
           f"uri=sqlite:///{tmp_path}/no/such/dir/catalog.db",
           "--catalog-property", f"warehouse=file://{tmp_path}"]
    proc = subprocess.run([sys.executable, "-m", "airflow_tpc", "list", TABLE, *bad],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error:") and "Traceback" not in proc.stderr
    assert "catalog 'local'" in proc.stderr
    # pyiceberg not installed: the import is blocked the way a missing package fails
    code = ("import sys; sys.modules['pyiceberg'] = None; from airflow_tpc.cli import main; "
            f"sys.exit(main(['list', {TABLE!r}, '--catalog-property', 'type=sql']))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert "pip install 'airflow-tpc[tables]'" in proc.stderr and "Traceback" not in proc.stderr


def test_a_delta_table_target(tmp_path, capsys):
    """A Delta target (no catalog): the same commands through the same open_sink."""
    target = f"delta+file://{tmp_path}/dt"
    sink = open_sink(target, "cli-delta")
    txn, m = _stage(sink, "2026-11-01", [1, 2])
    sink.commit(txn, expected_digest=m.digest)
    _stage(sink, "2026-11-02", [3])
    assert main(["status", target, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["namespace"] == "cli-delta" and doc["committed_epochs"] == ["2026-11-01"]
    assert doc["target"] == target and doc["format"] == "delta"
    assert [(e["epoch"], e["version"]) for e in doc["epochs"]] == [
        ("2026-11-01", "0"), ("2026-11-02", None)]  # the commit made version 0
    assert main(["list", target]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"table {target}  location file://")
    assert out.splitlines()[1].split()[7:] == ["VERSION", "STAGING_FILES", "NOTE"]
    assert main(["list", target, "--json"]) == 0
    rows = {r["epoch"]: r for r in json.loads(capsys.readouterr().out)}
    assert (rows["2026-11-01"]["version"], rows["2026-11-01"]["in_table"]) == ("0", True)
    assert (rows["2026-11-02"]["version"], rows["2026-11-02"]["in_table"]) == (None, False)
    assert main(["abort", target, "--epoch", "2026-11-02"]) == 0
    assert "aborted cli-delta/2026-11-02/1" in capsys.readouterr().out
    assert [str(i.state) for i in sink.describe("2026-11-02")] == ["ABORTED"]
