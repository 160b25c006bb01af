"""The command line on a real target: list, status, abort, recover, gc."""

from __future__ import annotations

import json
import subprocess
import sys

from airflow_tpc import Sink
from airflow_tpc.cli import main
from airflow_tpc.faults import InjectedCrash, armed

from .helpers import stage


def _target(tmp_path):
    sink = Sink(str(tmp_path / "t"), "cli-ns")
    txn, _ = stage(sink, "2026-11-01", {"a.parquet": b"A" * 10})
    sink.commit(txn)
    pending, _ = stage(sink, "2026-11-02", {"b.parquet": b"B"})
    decided, _ = stage(sink, "2026-11-03", {"c.parquet": b"C"})
    try:
        with armed("commit.after_decision"):
            sink.commit(decided)
    except InjectedCrash:
        pass
    return sink, pending


def test_list_and_status_tables_and_json(tmp_path, capsys):
    sink, _ = _target(tmp_path)
    assert main(["list", sink.target]) == 0
    out = capsys.readouterr().out
    assert "EPOCH" in out and "PRECOMMITTED" in out and "not yet promoted" in out
    assert main(["status", sink.target, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["namespace"] == "cli-ns" and doc["committed_epochs"] == ["2026-11-01"]


def test_abort_recover_gc(tmp_path, capsys):
    sink, pending = _target(tmp_path)
    assert main(["abort", sink.target, "--epoch", "2026-11-02"]) == 0
    assert "aborted cli-ns/2026-11-02/1" in capsys.readouterr().out
    assert main(["recover", sink.target, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["rolled_forward"] == [["2026-11-03", 1]]
    assert set(sink.committed_files()) == {"2026-11-01", "2026-11-03"}
    assert main(["gc", sink.target]) == 0
    assert "removed staging" in capsys.readouterr().out


def test_errors_are_one_line_not_tracebacks(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "airflow_tpc", "status", str(tmp_path / "none")],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.startswith("error:") and "Traceback" not in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "airflow_tpc", "list", "hdfs://nn/x"],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "no tested exactly-once backend" in proc.stderr
