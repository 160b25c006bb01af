#!/usr/bin/env python
"""Run the example pipeline end to end on embedded defaults and show what is committed.

    .venv/bin/python scripts/demo.py            # 6 spark-submits, one of them failing

Everything is local and temporary: a fresh AIRFLOW_HOME with a SQLite metadata DB,
Spark in local[2] mode, the target table in a temp directory (or TPC_EXAMPLE_TARGET).
The DAG is dags/tpc_example.py, run with ``dag.test()`` (the real task runner,
without a scheduler):

  1. epoch 2026-11-01: a normal run
  2. epoch 2026-11-01 again, with changed input (seed 1, more rows): it replaces the
     epoch's output instead of adding to it

Then the second DAG, ``tpc_daily_events_group``: ONE Spark job writes a folder and an
Iceberg table as ONE group transaction (docs/groups.md), for epoch 2026-11-02: the job
dies on its first try after writing one member (both are aborted), Airflow retries it,
and the retry's attempt is published in both.  (Six spark-submits in all: the demo is
kept to what shows a normal run, a re-run, a failure and a retry; the tests run many
more scenarios.)

Every run also writes the same aggregates into an Iceberg table
(``iceberg://tpc_example/analytics.daily_event_counts``) on pyiceberg's embedded SQL
catalog (SQLite, local warehouse under the demo's data dir): the demo checks one
snapshot per epoch commit and reads the rows back through pyiceberg.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


TABLE = "iceberg://tpc_example/analytics.daily_event_counts"


def _catalog_properties(home: str) -> dict[str, str]:
    """The embedded catalog: one SQLite file and a warehouse folder, nothing to start."""
    os.makedirs(os.path.join(home, "iceberg", "warehouse"), exist_ok=True)
    return {"type": "sql", "uri": f"sqlite:///{home}/iceberg/catalog.db",
            "warehouse": f"file://{home}/iceberg/warehouse"}


def _setup_env() -> tuple[str, str]:
    home = tempfile.mkdtemp(prefix="tpc-demo-airflow-")
    target = os.environ.get("TPC_EXAMPLE_TARGET") or os.path.join(home, "daily_event_counts")
    props = _catalog_properties(home)
    os.environ.update({
        "TPC_EXAMPLE_TABLE": TABLE,
        "TPC_EXAMPLE_CATALOG_CONN": "tpc_example_catalog",
        "AIRFLOW_CONN_TPC_EXAMPLE_CATALOG": json.dumps({
            "conn_type": "iceberg_catalog", "host": props["uri"],
            "schema": props["warehouse"], "extra": {"type": "sql"}}),
    })
    os.environ.update({
        "AIRFLOW_HOME": home,
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING",
        "AIRFLOW_CONN_SPARK_LOCAL": json.dumps({"conn_type": "spark", "host": "local[2]"}),
        "TPC_EXAMPLE_TARGET": target,
        "SPARK_LOCAL_IP": os.environ.get("SPARK_LOCAL_IP", "127.0.0.1"),
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        # the sensors look every second (the example's default is 5 s): a demo run is
        # mostly spark-submit's JVM start, not waiting
        "TPC_EXAMPLE_POKE_INTERVAL": "1",
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    })
    return home, target


def _rows_per_epoch(target: str) -> dict[str, int]:
    """What a plain Parquet reader of the table sees (staging and ledger are hidden)."""
    import pyarrow.dataset as ds

    if not any(p.name.startswith("epoch=") for p in Path(target).glob("*")):
        return {}
    table = ds.dataset(target, format="parquet", partitioning="hive",
                       ignore_prefixes=["_", "."]).to_table(columns=["epoch", "events"])
    out: dict[str, int] = {}
    for ep, n in zip(table.column("epoch").to_pylist(), table.column("events").to_pylist(),
                     strict=True):
        out[str(ep)] = out.get(str(ep), 0) + int(n)
    return out


@contextlib.contextmanager
def _output_to(path: str) -> Iterator[None]:
    """Send this process's stdout/stderr (task logs, spark-submit output) to a file."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with open(path, "a") as fh:
        os.dup2(fh.fileno(), 1)
        os.dup2(fh.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])


def main() -> int:
    home, target = _setup_env()
    print(f"AIRFLOW_HOME={home}\ntarget={target}")
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], check=True,
                   capture_output=True)
    print(f"metadata DB migrated in {time.monotonic() - t0:.0f} s")

    from airflow.dag_processing.dagbag import DagBag

    from airflow_tpc import Sink

    logging.getLogger("airflow").setLevel(logging.WARNING)
    bag = DagBag(dag_folder=str(REPO / "dags"))
    if bag.import_errors:
        print(bag.import_errors)
        return 1
    dag = bag.get_dag("tpc_daily_events")
    base = {"rows": 20_000, "seed": 0, "fail_on_try": 0}
    runs = [
        ("2026-11-01", {}, "normal run"),
        ("2026-11-01", {"rows": 30_000, "seed": 1}, "rerun with changed input: replaces"),
    ]
    log_path = os.path.join(home, "demo-task-logs.txt")
    print(f"task logs (Spark output included): {log_path}")
    ok = True
    for epoch, conf, what in runs:
        t = time.monotonic()
        _, state, tis = _run(dag, epoch, {**base, **conf}, log_path)
        ok &= state == "success"
        print(f"\n== epoch {epoch} ({what}): run {state} in "
              f"{time.monotonic() - t:.0f} s; submit tries: "
              f"folder {tis['daily_event_counts.submit'][1]}, "
              f"table {tis['daily_event_counts_table.submit'][1]}")
        for group in ("daily_event_counts", "daily_event_counts_table"):
            print(f"   {group}: " + ", ".join(
                f"{k.split('.')[-1]}={v[0]}" for k, v in sorted(tis.items())
                if k.startswith(group + ".")))

    sink = Sink(target, "tpc_daily_events")
    print("\n== ledger (every attempt of every epoch)")
    infos = sink.describe()
    readers_see = {i.epoch: i.attempt for i in infos
                   if str(i.state) == "COMMITTED" and i.published and not i.superseded}
    for info in infos:
        seen = readers_see.get(info.epoch)
        note = ("<- readers see this attempt" if seen == info.attempt
                else f"(replaced by attempt {seen})" if info.superseded and seen else "")
        print(f"  {info.txn_id:32} {str(info.state):10} files={info.files} bytes={info.bytes} "
              f"staging_files_left={info.staging_files}  {note}".rstrip())
    rows = _rows_per_epoch(target)
    print("\n== committed (what readers see)")
    for epoch, files in sink.committed_files().items():
        print(f"  epoch {epoch}: {len(files)} file(s), {rows.get(epoch, 0)} events aggregated")
    expected = {"2026-11-01": 30_000}
    ok &= rows == expected
    ok &= _show_table(home, runs, expected)
    ok &= _run_group(bag, home, target, base, log_path)
    props = _catalog_properties(home)
    print("\n== look at it yourself (the command line)")
    print(f"  .venv/bin/airflow-tpc list {target}")
    print(f"  .venv/bin/airflow-tpc status {TABLE} --catalog-property type=sql "
          f"--catalog-property uri={props['uri']} --catalog-property "
          f"warehouse={props['warehouse']}")
    group_home = os.path.join(os.path.dirname(target.rstrip("/")), "_tpc_groups",
                              "tpc_daily_events_group")
    print(f"  .venv/bin/airflow-tpc group status {group_home} --member "
          f"folder={target.rstrip('/')}_group --member table={TABLE}_group "
          f"--catalog-property type=sql --catalog-property uri={props['uri']} "
          f"--catalog-property warehouse={props['warehouse']}")
    print(f"\ndemo done in {time.monotonic() - t0:.0f} s")
    print(f"\n{'OK' if ok else 'UNEXPECTED'}: each epoch published exactly once, in the "
          f"folder and in the Iceberg table (expected events per epoch {expected}), and the "
          "group's folder and table moved together")
    return 0 if ok else 1


def _run(dag: Any, epoch: str, conf: dict[str, Any], log_path: str
         ) -> tuple[Any, str, dict[str, tuple[str, int]]]:
    """One run of ``dag`` for ``epoch`` (task logs to ``log_path``): the run, its state,
    and each task's state and try number."""
    with _output_to(log_path):
        dr = dag.test(logical_date=datetime.fromisoformat(epoch).replace(tzinfo=timezone.utc),
                      run_conf=conf)
    tis = {ti.task_id: (str(getattr(ti.state, "value", ti.state)), ti.try_number)
           for ti in dr.get_task_instances()}
    return dr, str(getattr(dr.state, "value", dr.state)), tis


def _run_group(bag: Any, home: str, target: str, base: dict[str, int], log_path: str) -> bool:
    """The second DAG: the same job writes a folder and an Iceberg table as ONE group
    transaction.  A failed first try is aborted on both, a rerun replaces both; the
    group's cut shows each epoch in both outputs at the same attempt."""
    from pyiceberg.catalog import load_catalog

    from airflow_tpc import Group, Sink
    from airflow_tpc.tables import open_sink

    dag = bag.get_dag("tpc_daily_events_group")
    runs = [("2026-11-02", {"fail_on_try": 1},
             "the job dies on try 1 after writing one member; Airflow retries it")]
    print("\n== group DAG tpc_daily_events_group: one job, a folder + an Iceberg table, "
          "one transaction")
    ok = True
    for epoch, conf, what in runs:
        t = time.monotonic()
        _, state, tis = _run(dag, epoch, {**base, **conf}, log_path)
        ok &= state == "success"
        print(f"   epoch {epoch} ({what}): run {state} in {time.monotonic() - t:.0f} s; "
              + ", ".join(f"{k.split('.')[-1]}={v[0]}" for k, v in sorted(tis.items())))
    props = _catalog_properties(home)
    folder, table_uri = target.rstrip("/") + "_group", TABLE + "_group"
    ns = "tpc_daily_events_group"
    group = Group({"folder": Sink(folder, ns),
                   "table": open_sink(table_uri, ns, catalog_properties=props)},
                  os.path.join(os.path.dirname(folder), "_tpc_groups", ns))
    stable = group.stable_epochs()
    for name, sink in group.sinks.items():
        states = ", ".join(f"{i.epoch}/{i.attempt} {i.state}" for i in sink.describe())
        print(f"   member {name} ({table_uri if name == 'table' else folder}): {states}")
    data = load_catalog("tpc_example", **props).load_table(
        "analytics.daily_event_counts_group").scan().to_arrow()
    in_table: dict[str, int] = {}
    for ep, n in zip(data["epoch"].to_pylist(), data["events"].to_pylist(), strict=True):
        in_table[ep] = in_table.get(ep, 0) + int(n)
    in_folder = _rows_per_epoch(folder)
    expected = {"2026-11-02": 20_000}
    print(f"   the group's cut (stable epochs -> attempt): {stable}")
    print(f"   events per epoch: folder {in_folder}, table {in_table}")
    good = ok and stable == {"2026-11-02": 2} \
        and in_folder == in_table == expected
    print("   " + ("both outputs hold every epoch once, at the same attempt" if good
                   else "UNEXPECTED"))
    return good


def _show_table(home: str, runs: list, expected: dict[str, int]) -> bool:
    """The Iceberg table as its own readers see it (pyiceberg): one snapshot per epoch
    commit, the current snapshot's rows per epoch equal to the folder's."""
    from pyiceberg.catalog import load_catalog

    table = load_catalog("tpc_example", **_catalog_properties(home)).load_table(
        "analytics.daily_event_counts")
    print(f"\n== Iceberg table {TABLE} (pyiceberg, SQL catalog on SQLite)")
    snaps = table.snapshots()
    for snap in snaps:
        summary = snap.summary or {}
        print(f"  snapshot {snap.snapshot_id}: {summary.operation.value if summary else '?':9}"
              f" epoch {summary.get('airflow-tpc.epoch')} attempt "
              f"{summary.get('airflow-tpc.attempt')} (+{summary.get('added-data-files') or 0} "
              f"/-{summary.get('deleted-data-files') or 0} files)")
    commits: dict[str, int] = {}
    for epoch, _, _ in runs:
        commits[epoch] = commits.get(epoch, 0) + 1
    per_epoch: dict[str, int] = {}
    for snap in snaps:
        epoch = (snap.summary or {}).get("airflow-tpc.epoch")
        per_epoch[epoch] = per_epoch.get(epoch, 0) + 1
    data = table.scan().to_arrow()
    rows: dict[str, int] = {}
    for ep, n in zip(data["epoch"].to_pylist(), data["events"].to_pylist(), strict=True):
        rows[ep] = rows.get(ep, 0) + int(n)
    for epoch in sorted(rows):
        print(f"  epoch {epoch}: {rows[epoch]} events aggregated (read back through pyiceberg), "
              f"{per_epoch.get(epoch, 0)} snapshot(s) for {commits.get(epoch, 0)} commit(s)")
    good = per_epoch == commits and rows == expected
    print(f"  {'one snapshot per epoch commit' if good else 'UNEXPECTED'}")
    return good


if __name__ == "__main__":
    sys.exit(main())
