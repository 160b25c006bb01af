"""The command line on a real target: list, status, abort, recover, gc."""

from __future__ import annotations

import json
import subprocess
import sys

from airflow_tpc import Sink
from airflow_tpc.cli import main
from airflow_tpc.core.faults import InjectedCrash, armed

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


def test_version_and_help_for_every_option(capsys):
    import pytest

    from airflow_tpc import __version__
    from airflow_tpc.cli.commands import COMMANDS, build_parser

    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0 and capsys.readouterr().out.strip() == f"airflow-tpc {__version__}"
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    for action in parser._actions:
        assert action.help, action
    assert {c.dest for c in sub._choices_actions} == set(COMMANDS) | {"group"}
    for choice in sub._choices_actions:
        assert choice.help, choice.dest
    for name, p in sub.choices.items():
        assert p.description, name
        for action in p._actions:
            assert action.help, (name, action.dest)


def test_unreachable_endpoint_fails_fast_with_one_line(tmp_path):
    """A closed port on 127.0.0.1: one error line naming the endpoint, no traceback, no
    secret, well within a minute (before: ~80 s of silence, 10 attempts per request)."""
    import os
    import socket
    import time

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "cli-test-key",
           "AWS_SECRET_ACCESS_KEY": "cli-secret-never-shown", "AWS_DEFAULT_REGION": "us-east-1"}
    env.pop("AWS_ENDPOINT_URL", None)
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "airflow_tpc", "status", "s3://bucket/t",
                           "--endpoint-url", f"http://127.0.0.1:{port}"],
                          capture_output=True, text=True, env=env, timeout=300)
    elapsed = time.monotonic() - t0
    assert proc.returncode == 2, proc
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"error: cannot connect to the S3 endpoint http://127.0.0.1:{port}")
    assert "connect timeout 5 s" in lines[0] and "Traceback" not in proc.stderr
    assert "cli-secret-never-shown" not in proc.stderr + proc.stdout
    assert proc.stdout == ""
    assert elapsed < 60, elapsed  # generous: process start and imports on a busy machine


def test_recover_and_gc_report_each_epoch_on_stderr(tmp_path, capsys):
    sink = Sink(str(tmp_path / "t"), "cli-ns")
    epochs = [f"2026-10-{d:02d}" for d in range(1, 5)]
    for epoch in epochs:
        stale, _ = stage(sink, epoch, {"old.parquet": b"old"})
        txn, _ = stage(sink, epoch, {"a.parquet": epoch.encode()})
        sink.commit(txn)
    assert main(["recover", sink.target]) == 0
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert lines == [f"recover: epoch {e} ({i}/{len(epochs)})"
                     for i, e in enumerate(epochs, 1)], captured.err
    assert "aborted" in captured.out  # the superseded attempts: the report stays on stdout
    assert main(["gc", sink.target, "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out) == {"cleaned": []}
    assert main(["recover", sink.target, "--quiet"]) == 0
    assert capsys.readouterr().err == ""
