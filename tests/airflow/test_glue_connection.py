"""An Iceberg table through the AWS Glue Data Catalog, reached the Airflow way: an
``iceberg_catalog`` connection of type glue (its login/password: Glue's access key, or
``tpc.aws-conn-id``: the keys, session and endpoints of an Amazon ``aws`` connection)
beside an ``aws`` connection for the table's S3 store, both on moto's server, given to
the real :class:`~airflow_tpc.airflow.hooks.tpc.TpcHook`.  The epoch is committed through
the hook's precommit check and commit pointer, as the operators do."""

from __future__ import annotations

import json
import logging

import pytest
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


# --- Glue's credentials from the aws connection the catalog connection names -------------
#: Not moto's defaults (which the suite also exports as AWS_* variables): a value seen
#: anywhere below came from the aws connection.
GLUE_KEY, GLUE_SECRET = "AKIAGLUEFROMCONN", "glue-conn-Secr3t-7f31c9"


def _aws(monkeypatch, conn_id: str, endpoint: str, **extra) -> None:
    """An ``aws`` connection as Airflow resolves it from the environment."""
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps({
        "conn_type": "aws", "login": GLUE_KEY, "password": GLUE_SECRET,
        "extra": {"region_name": "us-east-1", "endpoint_url": endpoint, **extra}}))


def _glue(warehouse: str, conn_id: str = "glue_via_aws", **fields) -> Connection:
    extra = {"type": "glue", "tpc.aws-conn-id": "glue_aws", **fields.pop("extra", {})}
    return Connection(conn_id=conn_id, conn_type="iceberg_catalog", schema=warehouse,
                      extra=json.dumps(extra), **fields)


def _everything(s3_options, bucket: str) -> dict[str, object]:
    """Every object of the bucket byte for byte, and every Glue table's parameters."""
    import boto3

    kw = {"endpoint_url": s3_options["endpoint_url"], "region_name": "us-east-1",
          "aws_access_key_id": GLUE_KEY, "aws_secret_access_key": GLUE_SECRET}
    s3, glue = boto3.client("s3", **kw), boto3.client("glue", **kw)
    out: dict[str, object] = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for obj in page.get("Contents", []):
            out[obj["Key"]] = s3.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read()
    for db in glue.get_databases()["DatabaseList"]:
        for table in glue.get_tables(DatabaseName=db["Name"])["TableList"]:
            out[f"glue:{db['Name']}.{table['Name']}"] = table.get("Parameters")
    return out


def test_glue_credentials_come_from_the_aws_connection_it_names(
        s3_options, s3_bucket, monkeypatch, caplog):
    """``tpc.aws-conn-id``: the catalog and its FileIO get the aws connection's keys,
    region and endpoints; the values are masked and reach no XCom document or log."""
    from airflow.sdk._shared.secrets_masker import redact

    caplog.set_level(logging.DEBUG)
    endpoint, warehouse = s3_options["endpoint_url"], f"s3://{s3_bucket}/warehouse"
    _aws(monkeypatch, "glue_aws", endpoint)
    glue = _glue(warehouse)
    try:
        props = IcebergCatalogHook(connection=glue).catalog_properties()
        assert props == {"type": "glue", "warehouse": warehouse,
                         "glue.access-key-id": GLUE_KEY, "s3.access-key-id": GLUE_KEY,
                         "glue.secret-access-key": GLUE_SECRET,
                         "s3.secret-access-key": GLUE_SECRET,
                         "glue.region": "us-east-1", "s3.region": "us-east-1",
                         "glue.endpoint": endpoint, "s3.endpoint": endpoint}
        assert redact(f"is {GLUE_SECRET}") != f"is {GLUE_SECRET}"  # masked
        hook = TpcHook("iceberg://glue/analytics.events", "events",
                       storage_conn_id="glue_aws", catalog_conn_id="glue_via_aws",
                       catalog_connection=glue)
        sink = hook.get_sink()
        txn = sink.begin("5")
        write_parquet(sink, txn, "a.parquet", rows("5", [1, 2]))
        sink.precommit(txn)
        check = hook.check_precommit(txn.to_dict())
        assert check.status == "ready", check.message
        pointer = hook.precommit_pointer(check)
        assert GLUE_SECRET not in json.dumps(pointer) + json.dumps(txn.to_dict())
        assert hook.commit_pointer(pointer).result.outcome == "committed"
        table = load_catalog("glue", **props).load_table("analytics.events")
        assert sorted(table.scan().to_arrow()["id"].to_pylist()) == [1, 2]
        assert GLUE_SECRET not in caplog.text
    finally:
        drop_glue_databases(s3_options)


def test_an_assumed_role_of_the_aws_connection_reaches_glue(s3_options, s3_bucket,
                                                             monkeypatch):
    """Role assumption (the provider's, through moto's STS): Glue gets the session."""
    import boto3

    endpoint = s3_options["endpoint_url"]
    _aws(monkeypatch, "glue_aws", endpoint,
         role_arn="arn:aws:iam::123456789012:role/glue-writer",
         service_config={"sts": {"endpoint_url": endpoint}})
    hook = IcebergCatalogHook(connection=_glue(f"s3://{s3_bucket}/warehouse"))
    try:
        props = hook.catalog_properties()
        session = (props["glue.access-key-id"], props["glue.secret-access-key"],
                   props["glue.session-token"])
        assert GLUE_SECRET not in session and session[0] != GLUE_KEY
        sts = boto3.client("sts", endpoint_url=endpoint, region_name="us-east-1",
                           aws_access_key_id=session[0], aws_secret_access_key=session[1],
                           aws_session_token=session[2])
        assert ":assumed-role/glue-writer/" in sts.get_caller_identity()["Arn"]
        assert props["s3.session-token"] == session[2]
        assert hook.test_connection() == (True, "catalog reachable: 0 top-level namespace(s)")
    finally:
        drop_glue_databases(s3_options)


def test_a_bad_aws_connection_for_glue_is_one_clear_error_and_changes_nothing(
        s3_options, s3_bucket, monkeypatch):
    endpoint, warehouse = s3_options["endpoint_url"], f"s3://{s3_bucket}/warehouse"
    _aws(monkeypatch, "glue_aws", endpoint)
    monkeypatch.setenv("AIRFLOW_CONN_GLUE_GENERIC", json.dumps({
        "conn_type": "generic", "login": GLUE_KEY, "password": GLUE_SECRET}))
    target = "iceberg://glue/analytics.events"
    try:
        hook = TpcHook(target, "events", storage_conn_id="glue_aws",
                       catalog_connection=_glue(warehouse))
        sink = hook.get_sink()
        txn = sink.begin("5")
        write_parquet(sink, txn, "a.parquet", rows("5", [1]))
        sink.precommit(txn)
        before = _everything(s3_options, s3_bucket)
        bad = [
            (_glue(warehouse, extra={"tpc.aws-conn-id": "glue_aws_missing"}),
             "connection 'glue_via_aws': its tpc.aws-conn-id 'glue_aws_missing' is not a "
             "defined connection"),
            (_glue(warehouse, extra={"tpc.aws-conn-id": "glue_generic"}),
             "connection 'glue_via_aws': its tpc.aws-conn-id 'glue_generic' is a 'generic' "
             "connection, not an Amazon Web Services ('aws') one"),
            (_glue(warehouse, login=GLUE_KEY, password=GLUE_SECRET),
             "connection 'glue_via_aws': credentials come from the aws connection 'glue_aws' "
             "(tpc.aws-conn-id) and also from ['login/password']: keep one"),
            (_glue(warehouse, extra={"s3.secret-access-key": GLUE_SECRET}),
             "connection 'glue_via_aws': credentials come from the aws connection 'glue_aws' "
             "(tpc.aws-conn-id) and also from ['s3.secret-access-key']: keep one"),
            (_glue(warehouse, extra={"type": "rest", "uri": "http://127.0.0.1:9"}),
             "connection 'glue_via_aws': tpc.aws-conn-id gives a Glue catalog its AWS "
             "credentials; this catalog's type is 'rest', not 'glue'"),
        ]
        for conn, says in bad:
            with pytest.raises(ValueError) as err:
                TpcHook(target, "events", storage_conn_id="glue_aws",
                        catalog_connection=conn).commit_pointer(
                            hook.precommit_pointer(hook.check_precommit(txn.to_dict())))
            assert str(err.value) == says and GLUE_SECRET not in str(err.value)
        assert _everything(s3_options, s3_bucket) == before
    finally:
        drop_glue_databases(s3_options)


def test_the_catalog_connection_form_names_the_aws_connection_key():
    """The connection form Airflow's UI draws for ``iceberg_catalog`` (from the provider
    info, through Airflow's real providers manager) tells an operator filling it in for
    Glue that ``tpc.aws-conn-id`` in extra borrows an ``aws`` connection."""
    from airflow.providers_manager import ProvidersManager

    from airflow_tpc.airflow.hooks.glue_credentials import AWS_CONN_KEY

    form = ProvidersManager().field_behaviours["iceberg_catalog"]
    assert f'"{AWS_CONN_KEY}" names an aws connection' in form["relabeling"]["extra"]
