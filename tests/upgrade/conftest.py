"""The previous release's code, extracted once per session, and a way to run it.

The previous release is tag ``v0.1.0`` (main at ``0aa13e2``).  CI runs in a fresh
clone of main, where the tag may be missing but the history is there: the tree is
resolved by the tag when present, else by the commit.  ``git archive`` extracts only
``airflow_tpc/`` into a temporary folder (no worktree registration left behind); the
old code then runs in subprocesses with the same Python and libraries, its tree
alone on ``PYTHONPATH`` (tests/upgrade/old_build.py checks that it is the old code
that runs).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
PREVIOUS_TAG, PREVIOUS_COMMIT = "v0.1.0", "0aa13e2"
OLD_BUILD = Path(__file__).with_name("old_build.py")


def _resolve_previous() -> str:
    """The previous release's commit: by its tag if this clone has it, else by hash."""
    for rev in (PREVIOUS_TAG, PREVIOUS_COMMIT):
        found = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--verify", "--quiet",
                                f"{rev}^{{commit}}"], capture_output=True, text=True)
        if found.returncode == 0:
            return found.stdout.strip()
    raise AssertionError(f"neither tag {PREVIOUS_TAG} nor commit {PREVIOUS_COMMIT} is in "
                         f"{REPO}'s history (a shallow clone?): fetch it, the upgrade "
                         "tests run that release's code")


@pytest.fixture(scope="session")
def old_tree(tmp_path_factory) -> Path:
    """A folder holding the previous release's ``airflow_tpc`` package."""
    commit = _resolve_previous()
    tree = tmp_path_factory.mktemp("v0.1.0")
    archive = subprocess.run(["git", "-C", str(REPO), "archive", commit, "airflow_tpc"],
                             capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    assert (tree / "airflow_tpc" / "sink.py").is_file()
    return tree


@pytest.fixture(scope="session")
def run_old(old_tree) -> Callable[..., dict[str, Any]]:
    """``run_old(scenario, spec, killed=False)``: run tests/upgrade/old_build.py under the
    previous release; its JSON result.  ``killed``: the scenario ends in a real death
    at a step (exit 137), its result printed before it."""
    def run(scenario: str, spec: dict[str, Any], *, killed: bool = False) -> dict[str, Any]:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("AIRFLOW_TPC_CRASH", "AIRFLOW_TPC_PAUSE", "COVERAGE_"))}
        env["PYTHONPATH"] = str(old_tree)
        proc = subprocess.run([sys.executable, str(OLD_BUILD), str(old_tree), scenario,
                               json.dumps(spec)], cwd=old_tree, env=env,
                              capture_output=True, text=True, timeout=300)
        want = 137 if killed else 0
        assert proc.returncode == want, \
            f"old build {scenario}: exit {proc.returncode}\n{proc.stderr[-3000:]}"
        return json.loads(proc.stdout.strip().splitlines()[-1])
    return run


@pytest.fixture(scope="module")
def spark():
    """The worker's SparkSession if one runs already (tests/spark's), else one of our
    own for this module: ``read_committed`` is read through Spark itself once.  Ours
    stops with the module, so a later module's ``getOrCreate`` (tests/spark's
    ``local[2,2]``, whose retries its tests rely on) never gets this one instead."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    existing = SparkSession.getActiveSession()
    session = existing or (
        SparkSession.builder.master("local[1]").appName("airflow-tpc-upgrade")
        .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "1").getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    yield session
    if existing is None:
        session.stop()
