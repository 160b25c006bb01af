"""The CLI's tables: one header, aligned columns, human-readable bytes, ``-`` for unknown."""

from __future__ import annotations

from airflow_tpc import Sink
from airflow_tpc.cli import main

from .helpers import stage


def test_list_and_status_tables_read_like_tables(tmp_path, capsys):
    sink = Sink(str(tmp_path / "t"), "out")
    txn, _ = stage(sink, "2026-11-01", {"a.parquet": b"A" * 3000, "b.parquet": b"B" * 10})
    sink.commit(txn)
    assert main(["list", sink.target]) == 0
    header, rule, row = capsys.readouterr().out.splitlines()
    assert header.split() == ["EPOCH", "ATTEMPT", "STATE", "FILES", "BYTES", "ROWS", "AGE",
                              "STAGING_FILES", "NOTE"]
    assert set(rule.replace(" ", "")) == {"-"}
    assert "2.9 KiB" in row and " - " in row  # 3010 bytes; rows unknown
    # Numbers are right-aligned under their header.
    files_end = header.index("FILES") + len("FILES")
    assert row[:files_end].endswith("2")
    assert main(["status", sink.target]) == 0
    out = capsys.readouterr().out
    assert "committed epochs: 1" in out and "2.9 KiB" in out
