"""A Spark job writing an Azure target through the ``tpc`` data source (adlfs on the
executors), its credentials handed over the way the submit operator does it for a
``wasb`` connection: a private file shipped to the job (``job_credentials="file"``),
never the Spark conf; then the commit, and pyarrow reading what it published."""

from __future__ import annotations

import json

from airflow_tpc import Sink
from airflow_tpc.airflow.hooks.azure_credentials import azure_job_env, azure_options_from_connection
from airflow_tpc.airflow.hooks.job_credentials import write_credentials_file
from airflow_tpc.spark import current_transaction, write_tpc
from airflow_tpc.spark.context import CONF_KEY
from airflow_tpc.spark.payload import build_payload

from ..conftest import make_store


def _wasb_connection(azurite):
    from airflow.sdk.definitions.connection import Connection

    return Connection(conn_id="lake_azure", conn_type="wasb", host=azurite.endpoint,
                      login="devstoreaccount1", password=azurite.options()["account_key"])


def test_spark_job_writes_an_azure_target_through_the_tpc_source(spark, azurite, request,
                                                                 tmp_path):
    target, _ = make_store("azure", request, tmp_path)
    options = azure_options_from_connection(_wasb_connection(azurite))
    key = azurite.options()["account_key"]
    assert options == {"endpoint_url": azurite.endpoint, "account_name": "devstoreaccount1",
                       "account_key": key}
    sink = Sink(target, "events", storage_options=options)
    txn = sink.begin("2026-11-20")

    # What StagedSparkSubmitOperator does in "file" mode: the secret in a 0600 file
    # shipped with the job, only its *name* (and the public options) in the Spark conf.
    path = write_credentials_file(azure_job_env(options))
    spark.sparkContext.addFile(path)
    name = path.rsplit("/", 1)[-1]
    public = {"endpoint_url": options["endpoint_url"], "account_name": "devstoreaccount1"}
    payload = build_payload(txn, storage_options=options, credentials_file=name)
    assert key not in payload and json.loads(payload)["storage"] == public
    spark.conf.set(CONF_KEY, payload)
    try:
        job = current_transaction(spark)
    finally:
        spark.conf.unset(CONF_KEY)
    assert job.output_uri == sink.storage.uri(sink.layout.staging("2026-11-20", txn.attempt))
    df = spark.range(0, 300, numPartitions=3).selectExpr(
        "id", "cast(id % 2 as string) as side")
    write_tpc(df, job, partition_by=["side"])
    assert all(key not in v for _, v in spark.sparkContext.getConf().getAll())

    manifest = sink.read_manifest(txn)
    assert manifest is not None and manifest.total_rows == 300
    assert all(f.checksum.startswith("etag:") for f in manifest.files)  # Azure's ETags
    assert sink.commit(txn, expected_digest=manifest.digest).outcome == "committed"

    import adlfs
    import pyarrow.parquet as pq

    fs = adlfs.AzureBlobFileSystem(connection_string=azurite.connection_string())
    files = sink.committed_files()["2026-11-20"]
    assert len(files) == manifest.total_files and all(f.startswith("az://") for f in files)
    table = pq.read_table([f.split("://", 1)[1] for f in files], filesystem=fs)
    assert sorted(table.column("id").to_pylist()) == list(range(300))
    assert {f.split("/side=", 1)[1][0] for f in files} == {"0", "1"}  # partition folders
