"""CommitOperator's OpenLineage with the real provider installed (the ``dev`` extra), on a
real commit: the try's own task instance asks for the lineage as the listener does."""

from __future__ import annotations

import airflow.providers.openlineage  # noqa: F401  (the dev extra: a missing one fails, never skips)
import pytest

from airflow_tpc import Sink

from .helpers import xcom_value

pytestmark = pytest.mark.timeout(900)


def test_commit_reports_the_target_as_an_output_dataset_with_statistics(dagbag):
    from airflow_tpc.storage import storage_class

    from .dags.tpc_it_lineage import NAMESPACE, TARGET

    dr = dagbag.get_dag("tpc_it_lineage").test(run_conf={"epoch": "2026-09-01"})
    assert str(getattr(dr.state, "value", dr.state)) == "success"
    lineage = xcom_value("tpc_it_lineage", dr.run_id, "commit", "lineage")
    assert lineage is not None, "the provider is installed: lineage must not be None"
    assert lineage["class"] == "OperatorLineage" and lineage["inputs"] == []
    [out] = lineage["outputs"]
    sink = Sink(TARGET, NAMESPACE)
    namespace, name = storage_class(sink.target).lineage_name(sink.target)
    assert (namespace, name) == ("file", TARGET)  # the naming spec: file + absolute path
    assert out["class"] == "OutputDataset"
    assert out["namespace"] == namespace and out["name"] == name
    stats = out["outputFacets"]["outputStatistics"]
    [info] = sink.describe("2026-09-01")  # what the ledger says was committed
    assert info.published
    assert (stats["rowCount"], stats["size"], stats["fileCount"]) == (
        info.rows, info.bytes, info.files) == (7, 100, 2)
    assert stats["_producer"] and stats["_schemaURL"].endswith("OutputStatisticsOutputDatasetFacet")

