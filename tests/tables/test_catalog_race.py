"""First runs on a fresh install: several processes open a brand-new embedded Iceberg
catalog (SQLite) at the same moment, create the same namespace and the same table, and
each commits its own epoch.  Every one must succeed on its first try, and the table must
hold every epoch once.

Seen on a fresh ``scripts/airflow-local.sh start``: three backfill runs created the
catalog together and one submit failed with ``table iceberg_tables already exists``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

RACERS = 6
ROUNDS = 2

FIRST_RUN = r"""
import glob, json, os, sys, time
import pyarrow.parquet as pq
from airflow_tpc.tables import open_sink
from tests.tables.conftest import rows

props, gate, racers, epoch = json.loads(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]
open(gate + ".at." + str(os.getpid()), "w").close()
while len(glob.glob(gate + ".at.*")) < racers:   # everybody opens the catalog at once
    time.sleep(0.01)
try:
    sink = open_sink("iceberg://local/analytics.events", "events", catalog_properties=props)
    txn = sink.begin(epoch)
    path = sink.storage.join(sink.layout.staging(txn.epoch, txn.attempt), "part-0.parquet")
    sink.storage.put(path, b"")
    pq.write_table(rows(epoch, [int(epoch[-2:])]), path)
    result = sink.commit(txn, expected_digest=sink.precommit(txn).digest)
    print(json.dumps({"outcome": result.outcome}))
except Exception as exc:
    print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}))
"""


@pytest.mark.timeout(1200)
def test_concurrent_first_runs_on_a_brand_new_catalog(tmp_path):
    from pyiceberg.catalog import load_catalog

    repo = str(Path(__file__).resolve().parents[2])
    for r in range(ROUNDS):
        home = tmp_path / f"round{r}"
        (home / "warehouse").mkdir(parents=True)
        props = {"type": "sql", "uri": f"sqlite:///{home}/catalog.db",
                 "warehouse": f"file://{home}/warehouse"}
        epochs = [f"2026-03-{i + 1:02d}" for i in range(RACERS)]
        env = {**os.environ, "PYTHONPATH": repo}
        procs = [subprocess.Popen([sys.executable, "-c", FIRST_RUN, json.dumps(props),
                                   str(home / "gate"), str(RACERS), e], cwd=repo, env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for e in epochs]
        results = []
        for p in procs:
            out, err = p.communicate(timeout=900)
            assert p.returncode == 0, err[-3000:]
            results.append(json.loads(out.strip().splitlines()[-1]))
        assert results == [{"outcome": "committed"}] * RACERS, results
        table = load_catalog("local", **props).load_table("analytics.events")
        got = sorted(table.scan().to_arrow()["epoch"].to_pylist())
        assert got == epochs


def test_only_creation_races_are_retried(tmp_path, caplog):
    """A catalog that cannot be opened (here: a SQLite file in a missing folder) fails at
    once with one clear error; nothing is retried that is not a lost creation race."""
    from airflow_tpc import StorageError
    from airflow_tpc.tables import open_sink
    from airflow_tpc.tables.catalogs import lost_creation_race

    assert lost_creation_race(Exception("(sqlite3.OperationalError) table iceberg_tables "
                                        "already exists"))
    assert lost_creation_race(Exception("(sqlite3.OperationalError) database is locked"))
    assert not lost_creation_race(Exception("unable to open database file"))
    props = {"type": "sql", "uri": f"sqlite:///{tmp_path}/missing/catalog.db",
             "warehouse": f"file://{tmp_path}/warehouse"}
    with caplog.at_level("INFO", logger="airflow_tpc"), \
            pytest.raises(StorageError, match="cannot open Iceberg catalog 'local'"):
        open_sink("iceberg://local/analytics.events", "events",
                  catalog_properties=props).begin("2026-03-01")
    assert "creation race" not in caplog.text
