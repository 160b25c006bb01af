"""Every benchmark runs, in a smoke mode, inside the test suite.

A change that breaks a benchmark (a renamed helper, a changed signature) fails CI here
instead of surfacing months later as figures in docs/benchmarks.md nobody can reproduce.
The sizes are tiny, so the figures mean nothing and nothing is asserted about speed:
each benchmark must exit 0 and write its report and results to a temp dir (never over
docs/ or bench/results/).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.timeout(1200)


def _run(args: list[str], tmp_path: Path) -> str:
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    before = {p: p.read_bytes() for p in [*(REPO / "bench" / "results").glob("*.json"),
                                          *(REPO / "docs").glob("*.md")]}
    proc = subprocess.run([sys.executable, *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=1100)
    assert proc.returncode == 0, f"{args[0]} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    after = {p: p.read_bytes() for p in before}
    assert after == before, "a smoke run must not write docs/ or bench/results/"
    return proc.stdout


def test_bench_core_smoke(tmp_path: Path) -> None:
    out, results = tmp_path / "benchmarks.md", tmp_path / "core.json"
    _run(["bench/bench_core.py", "--smoke", "--no-plots", "--output", str(out),
          "--results", str(results)], tmp_path)
    data = json.loads(results.read_text())
    assert data["mode"] == "smoke"
    assert data["local"] and data["history"] and data["s3"] and data["memory"]
    assert "## 1. Local disk" in out.read_text()


def test_bench_tables_smoke(tmp_path: Path) -> None:
    results = tmp_path / "tables.json"
    report = _run(["bench/bench_tables.py", "--sizes", "20", "--reps", "1", "--paths", "none",
                   "--cpu-files", "20", "--results", str(results), "--output", "-"], tmp_path)
    data = json.loads(results.read_text())
    (case,) = data["cases"]
    for variant in ("iceberg", "delta", "copy", "manifest"):
        assert len(case["runs"][variant]) == 1, variant
    assert "| goal |" in report


def test_bench_spark_smoke(tmp_path: Path) -> None:
    out, results = tmp_path / "bench-spark.md", tmp_path / "spark.json"
    _run(["bench/bench_spark.py", "--rows", "2000", "--files", "2", "--reps", "1",
          "--master", "local[1]", "--no-plots", "--out", str(out), "--results", str(results)],
         tmp_path)
    assert json.loads(results.read_text())
    assert out.read_text().strip()


def test_bench_rest_smoke(tmp_path: Path) -> None:
    results = tmp_path / "rest.json"
    report = _run(["bench/bench_rest.py", "--sizes", "20", "--reps", "1", "--latency-ms", "0",
                   "0", "--results", str(results), "--output", "-"], tmp_path)
    (case,) = json.loads(results.read_text())["cases"]
    assert all(len(case["runs"][v]) == 1 for v in ("iceberg-rest", "copy"))
    assert "| files | iceberg-rest commit |" in report
