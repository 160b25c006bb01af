"""An Iceberg table (pyiceberg's SQL catalog) and a Delta table (delta-rs) written by
the previous release (v0.1.0, its own code): a published epoch, one decided and
crashed right after its decision, one pre-committed and undecided.  This build
recovers, commits and reads them; each epoch is in the table exactly once, at the
attempt that won, as the table's own readers (pyiceberg's scan, delta-rs) see it.
"""

from __future__ import annotations

from collections import Counter

import pyarrow as pa
from deltalake import DeltaTable
from pyiceberg.catalog import load_catalog

from airflow_tpc.tables import open_sink

from .helpers import cli_json, states

NS = "upg-tables"
TABLE = "analytics.events"


def _table_rows(kind: str, tmp_path, props: dict[str, str]) -> Counter:
    """(epoch, tag) -> how many rows the table's own reader returns."""
    if kind == "iceberg":
        data: pa.Table = load_catalog("local", **props).load_table(TABLE).scan().to_arrow()
    else:
        data = DeltaTable(str(tmp_path / "delta")).to_pyarrow_table()
    return Counter(zip(data["epoch"].to_pylist(), data["tag"].to_pylist(), strict=True))


def test_tables_of_the_previous_release_recover_commit_and_read(run_old, tmp_path, capsys):
    (tmp_path / "warehouse").mkdir()
    props = {"type": "sql", "uri": f"sqlite:///{tmp_path}/catalog.db",
             "warehouse": f"file://{tmp_path}/warehouse"}
    load_catalog("local", **props).create_namespace("analytics")
    targets = {"iceberg": f"iceberg://local/{TABLE}", "delta": f"delta+file://{tmp_path}/delta"}
    old = run_old("tables", {"targets": targets, "namespace": NS, "catalog_properties": props})

    for kind, target in targets.items():
        def sink(target: str = target):  # a fresh process of this build each time
            return open_sink(target, NS, catalog_properties=props)

        # Only the published epoch is in the table; t2 is decided, t3 undecided.
        assert _table_rows(kind, tmp_path, props) == {("t1", "t1@1"): 2}, kind
        assert {k: v for k, v in states(sink()).items()} == {
            "t1/1": "COMMITTED", "t2/1": "COMMITTED", "t3/1": "PRECOMMITTED"}, kind
        report = sink().recover()
        assert ("t2", 1) in report.rolled_forward, kind
        s = sink()
        result = s.commit(s.transaction("t3", 1), expected_digest=old["digests"][kind])
        assert result.outcome == "committed", kind
        want = {(e, f"{e}@1"): 2 for e in ("t1", "t2", "t3")}
        assert _table_rows(kind, tmp_path, props) == want, kind
        assert sorted(sink().committed_files()) == ["t1", "t2", "t3"], kind

        cli = [f"--catalog-property={k}={v}" for k, v in props.items()] \
            if kind == "iceberg" else []
        status = cli_json(capsys, "status", target, *cli)
        assert sorted(status["committed_epochs"]) == ["t1", "t2", "t3"], kind
        assert all(e["published_attempt"] == 1 for e in status["epochs"]), kind
