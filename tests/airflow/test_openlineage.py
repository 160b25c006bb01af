"""OpenLineage of real commits, as Airflow's own OpenLineage listener emits it (the
provider's file transport; tests/airflow/conftest.py), for a folder, a Delta table and
an Iceberg table (tests/airflow/dags/tpc_it_lineage.py).

The START and COMPLETE events of the commit task both name the output, by the naming
spec; COMPLETE carries its statistics, schema, version (snapshot id, Delta version, or
a folder's manifest digest) and the transaction (``airflowTpc``), each checked against
what the target itself says.  A run whose job fails is aborted: the abort task's event
names the output with the aborted attempt and no statistics.
"""

from __future__ import annotations

import json
import os

import airflow.providers.openlineage  # noqa: F401  (the dev extra: a missing one fails, never skips)
import pytest

from airflow_tpc import TxnState
from airflow_tpc.airflow.utils.lineage import FACET_SCHEMA_URL
from airflow_tpc.tables import open_sink

from .conftest import OPENLINEAGE_EVENTS, REPO, ROOT
from .dags.tpc_it_lineage import NAMESPACE, TARGETS
from .helpers import states, xcom_value

pytestmark = pytest.mark.timeout(900)

CATALOG_DIR = os.path.join(ROOT, "lineage_iceberg")
os.makedirs(os.path.join(CATALOG_DIR, "warehouse"), exist_ok=True)
PROPS = {"type": "sql", "uri": f"sqlite:///{CATALOG_DIR}/catalog.db",
         "warehouse": f"file://{CATALOG_DIR}/warehouse"}
os.environ["AIRFLOW_CONN_TPC_IT_LINEAGE_CATALOG"] = json.dumps({
    "conn_type": "iceberg_catalog", "host": PROPS["uri"], "schema": PROPS["warehouse"],
    "extra": {"type": "sql"}})


def _events(dag_id: str, task_id: str) -> list[dict]:
    with open(OPENLINEAGE_EVENTS) as fh:
        found = [json.loads(line) for line in fh if line.strip()]
    return [e for e in found if e["job"]["name"] == f"{dag_id}.{task_id}"]


def _validate_facet(facet: dict) -> None:
    """The ``airflowTpc`` facet against its published schema (docs/schema)."""
    import jsonschema

    with open(os.path.join(REPO, "docs", "schema", "openlineage-facet.schema.json")) as fh:
        jsonschema.Draft202012Validator(json.load(fh)).validate(facet)


def _sink(kind: str):
    target, catalog = TARGETS[kind]
    return open_sink(target, NAMESPACE, catalog_properties=PROPS if catalog else None)


#: kind -> (namespace, name) the naming spec gives its output.
def _expected_identity(kind: str) -> tuple[str, str]:
    if kind == "iceberg":  # the catalog's warehouse, the table's identifier
        return PROPS["warehouse"], "ol.events"
    if kind == "delta":
        return "file", f"{ROOT}/lineage_delta"
    return "file", f"{ROOT}/lineage_target"


@pytest.mark.parametrize("kind", ["folder", "delta", "iceberg"])
def test_commit_lineage_names_the_output_with_schema_version_and_transaction(dagbag, kind):
    dag_id = f"tpc_it_lineage_{kind}"
    dr = dagbag.get_dag(dag_id).test(run_conf={"epoch": "2026-09-01"})
    assert states(dr)["commit"] == "success", states(dr)
    events = {e["eventType"]: e for e in _events(dag_id, "commit")}
    assert set(events) == {"START", "COMPLETE"}, list(events)
    identity = _expected_identity(kind)
    for event in events.values():
        assert [(o["namespace"], o["name"]) for o in event["outputs"]] == [identity]

    [out] = events["COMPLETE"]["outputs"]
    sink = _sink(kind)
    [info] = sink.describe("2026-09-01")
    assert info.published
    stats = out["outputFacets"]["outputStatistics"]
    assert (stats["rowCount"], stats["size"], stats["fileCount"]) == (7, info.bytes, 2)
    # Types as the format names them: a table's its own (never Arrow's large_string).
    types = {"folder": ("int64", "string")}.get(kind, ("long", "string"))
    assert [(f["name"], f.get("ordinal_position"), f["type"])
            for f in out["facets"]["schema"]["fields"]] \
        == [("id", 1, types[0]), ("epoch", 2, types[1])]
    tpc = out["facets"]["airflowTpc"]
    assert (tpc["epoch"], tpc["attempt"], tpc["txnId"], tpc["namespace"], tpc["outcome"]) \
        == ("2026-09-01", 1, info.txn_id, NAMESPACE, "committed")
    assert tpc["_schemaURL"] == FACET_SCHEMA_URL
    _validate_facet(tpc)
    version = out["facets"]["version"]["datasetVersion"]
    if kind == "iceberg":
        table = sink.table_target.load_table()
        assert version == str(table.current_snapshot().snapshot_id)
        location = table.location().removeprefix("file://")
        assert out["facets"]["symlinks"]["identifiers"] == [
            {"namespace": "file", "name": location, "type": "LOCATION"}]
    elif kind == "delta":
        assert version == str(sink.table_target.load_table().version())
    else:
        assert version == tpc["manifestDigest"]
    # The digest is the commit's (and a table holds a commit of exactly that manifest).
    assert tpc["manifestDigest"] == xcom_value(dag_id, dr.run_id, "commit",
                                               "tpc_commit")["digest"]
    if kind != "folder":
        assert sink.table_version("2026-09-01", tpc["manifestDigest"])
    # Nothing of a catalog's connection reaches an event.
    assert "s3.secret" not in json.dumps(events)


def test_an_aborted_run_names_the_output_and_the_aborted_attempt(dagbag):
    dag_id = "tpc_it_lineage_folder"
    dr = dagbag.get_dag(dag_id).test(run_conf={"epoch": "2026-09-02", "fail": True})
    assert states(dr)["abort"] == "success" and states(dr)["commit"] == "upstream_failed"
    [complete] = [e for e in _events(dag_id, "abort") if e["eventType"] == "COMPLETE"
                  and e["outputs"] and e["outputs"][0]["facets"]["airflowTpc"]["epoch"]
                  == "2026-09-02"]
    [out] = complete["outputs"]
    assert (out["namespace"], out["name"]) == _expected_identity("folder")
    assert out["facets"]["airflowTpc"]["outcome"] == "aborted"
    _validate_facet(out["facets"]["airflowTpc"])
    assert "outputStatistics" not in out.get("outputFacets", {})
    assert "version" not in out["facets"]
    [info] = _sink("folder").describe("2026-09-02")
    assert info.state is TxnState.ABORTED
    assert out["facets"]["airflowTpc"]["txnId"] == info.txn_id


def test_a_group_commit_names_every_member_as_an_output(dagbag):
    """One commit task, one output per member (each named as a single target's is),
    each COMPLETE output with its own statistics, version and transaction."""
    from .dags.tpc_it_lineage import GROUP_TARGETS

    dag_id = "tpc_it_lineage_group"
    dr = dagbag.get_dag(dag_id).test(run_conf={"epoch": "2026-09-03"})
    assert states(dr)["commit"] == "success", states(dr)
    events = {e["eventType"]: e for e in _events(dag_id, "commit")}
    assert set(events) == {"START", "COMPLETE"}, list(events)
    want = [("file", GROUP_TARGETS["folder"]), (PROPS["warehouse"], "ol.group_events")]
    for event in events.values():
        assert sorted((o["namespace"], o["name"]) for o in event["outputs"]) == sorted(want)
    outs = {o["name"]: o for o in events["COMPLETE"]["outputs"]}
    folder = open_sink(GROUP_TARGETS["folder"], NAMESPACE)
    table = open_sink(GROUP_TARGETS["table"], NAMESPACE, catalog_properties=PROPS)
    for name, sink in ((GROUP_TARGETS["folder"], folder), ("ol.group_events", table)):
        [info] = sink.describe("2026-09-03")
        out = outs[name]
        stats = out["outputFacets"]["outputStatistics"]
        assert (stats["rowCount"], stats["size"], stats["fileCount"]) == (7, info.bytes, 2)
        tpc = out["facets"]["airflowTpc"]
        assert (tpc["epoch"], tpc["attempt"], tpc["txnId"], tpc["outcome"]) == \
            ("2026-09-03", 1, info.txn_id, "committed")
        _validate_facet(tpc)
    snapshot = table.table_target.load_table().current_snapshot().snapshot_id
    assert outs["ol.group_events"]["facets"]["version"]["datasetVersion"] == str(snapshot)
