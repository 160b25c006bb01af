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


def _run(args: list[str]) -> str:
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    before = {p: p.read_bytes() for p in [*(REPO / "bench" / "results").glob("*.json"),
                                          REPO / "docs" / "benchmarks.md",
                                          REPO / "docs" / "bench-spark.md"] if p.exists()}
    proc = subprocess.run([sys.executable, *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=1100)
    assert proc.returncode == 0, f"{args[0]} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    after = {p: p.read_bytes() for p in before}
    assert after == before, "a smoke run must not write docs/ or bench/results/"
    return proc.stdout


def test_bench_core_smoke(tmp_path: Path) -> None:
    out, results = tmp_path / "benchmarks.md", tmp_path / "core.json"
    _run(["bench/bench_core.py", "--smoke", "--output", str(out), "--results", str(results)])
    data = json.loads(results.read_text())
    assert data["mode"] == "smoke" and data["local"] and data["history"] and data["memory"]
    assert {"floor", "tpc", "v1"} <= set(data["local"][0]["times"])
    assert data["memory"][0]["commit"]["rss_peak"] > 0
    assert "## 1. Local commit" in out.read_text()


def test_bench_s3_smoke(tmp_path: Path) -> None:
    results = tmp_path / "s3.json"
    report = _run(["bench/bench_s3.py", "--smoke", "--results", str(results), "--output", "-"])
    cases = json.loads(results.read_text())["cases"]
    assert {c["backend"] for c in cases} == {"moto", "seaweedfs"}
    for case in cases:
        assert {"copy", "copy, copy_workers=1", "manifest", "iceberg"} <= set(case["runs"])
        assert all(len(runs) == 1 for runs in case["runs"].values())
    assert "## 4. S3" in report


def test_bench_azure_smoke(tmp_path: Path) -> None:
    """The azurite backend (issue 35 §4): every mode, requests counted in Azure's terms."""
    results = tmp_path / "azure.json"
    report = _run(["bench/bench_s3.py", "--smoke", "--backends", "azurite", "--results",
                   str(results), "--output", "-"])
    (case,) = json.loads(results.read_text())["cases"]
    assert case["backend"] == "azurite" and case["n"] == 20
    assert {"copy", "copy, copy_workers=1", "manifest", "iceberg", "delta"} <= set(case["runs"])
    copy, manifest = case["runs"]["copy"][0], case["runs"]["manifest"][0]
    assert copy["commit_requests"]["copy"] == 20 and "copy" not in manifest["commit_requests"]
    assert "## 5. Azure" in report and "35. Azure requests per commit" in report


def test_azurite_rates_smoke() -> None:
    """Azurite's own rates (the floor under section 5): a line per size, every operation
    timed in four quarters, and every blob it made gone with its container."""
    out = _run(["bench/azurite_rates.py", "40"])
    line = out.strip().splitlines()[-1]
    assert line.startswith("40 blobs: ")
    for op in ("put", "copy", "delete"):
        (part,) = [p for p in line.split(": ", 1)[1].split("; ") if p.startswith(op + " ")]
        rates = [float(r) for r in part[len(op) + 1:-len(" per s")].split(" / ")]
        assert len(rates) == 4 and all(r > 0 for r in rates)


def test_bench_spark_smoke(tmp_path: Path) -> None:
    out, results = tmp_path / "bench-spark.md", tmp_path / "spark.json"
    _run(["bench/bench_spark.py", "--smoke", "--output", str(out), "--results", str(results)])
    assert json.loads(results.read_text())["cases"]
    assert "| 2,000 | 2 | native-eo |" in out.read_text()


def test_report_from_saved_results(tmp_path: Path) -> None:
    """bench/report.py renders the saved results (or none) without measuring."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "bench")}
    code = ("import report, sys; r = {k: report.load(k) for k in report.KINDS}; "
            "sys.stdout.write(report.benchmarks_md(r['core'], r['s3'], r['spark'], r['azure']))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("# Benchmarks")
