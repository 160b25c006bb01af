"""An Iceberg table through the AWS Glue Data Catalog, reached the Airflow way: an
``iceberg_catalog`` connection of type glue (its login/password: Glue's access key)
beside an Amazon ``aws`` connection for the table's S3 store, both on moto's server,
given to the real :class:`~airflow_tpc.airflow.hooks.tpc.TpcHook`.  The epoch is committed
through the hook's precommit check and commit pointer, as the operators do."""

from __future__ import annotations

import json

from airflow.sdk.definitions.connection import Connection
from pyiceberg.catalog import load_catalog

from airflow_tpc.airflow.hooks.tpc import IcebergCatalogHook, TpcHook

from ..tables.conftest import rows, write_parquet
from ..tables.glue import drop_glue_databases


def test_a_glue_catalog_connection_and_an_aws_connection_commit_an_epoch(
        s3_options, s3_bucket):
    endpoint, key, secret = s3_options["endpoint_url"], s3_options["key"], s3_options["secret"]
    glue = Connection(conn_id="glue_cat", conn_type="iceberg_catalog", login=key,
                      password=secret, schema=f"s3://{s3_bucket}/warehouse",
                      extra=json.dumps({"type": "glue", "glue.endpoint": endpoint,
                                        "glue.region": "us-east-1", "s3.endpoint": endpoint,
                                        "s3.access-key-id": key,
                                        "s3.secret-access-key": secret}))
    aws = Connection(conn_id="aws_moto", conn_type="aws", login=key, password=secret,
                     extra=json.dumps({"region_name": "us-east-1", "endpoint_url": endpoint}))
    try:
        props = IcebergCatalogHook(connection=glue).catalog_properties()
        assert props["glue.access-key-id"] == key and props["glue.secret-access-key"] == secret
        assert props["warehouse"] == f"s3://{s3_bucket}/warehouse"
        hook = TpcHook("iceberg://glue/analytics.events", "events", storage_conn_id="aws_moto",
                       catalog_conn_id="glue_cat", connection=aws, catalog_connection=glue)
        sink = hook.get_sink()
        txn = sink.begin("5")
        write_parquet(sink, txn, "a.parquet", rows("5", [1, 2]))
        sink.precommit(txn)
        check = hook.check_precommit(txn.to_dict())
        assert check.status == "ready", check.message
        pointer = hook.precommit_pointer(check)
        assert secret not in json.dumps(pointer) and secret not in json.dumps(txn.to_dict())
        assert hook.commit_pointer(pointer).result.outcome == "committed"
        table = load_catalog("glue", **props).load_table("analytics.events")
        assert sorted(table.scan().to_arrow()["id"].to_pylist()) == [1, 2]
        assert IcebergCatalogHook(connection=glue).test_connection() == (
            True, "catalog reachable: 1 top-level namespace(s)")
    finally:
        drop_glue_databases(s3_options)
