"""Each call airflow-tpc makes into pyiceberg's private API
(airflow_tpc/tables/pyiceberg_private.py), exercised for the behaviour we rely on, so a
pyiceberg upgrade that renames or changes one fails here, by name; and the public
replacement of the private schema conversions (airflow_tpc/tables/iceberg_schema.py)
gives what they gave.  Real parts: pyiceberg's SQL catalog on SQLite, SeaweedFS's REST
catalog (tests/seaweed.py)."""

from __future__ import annotations

import json
import uuid

import pyarrow as pa
import pytest
from pyiceberg.catalog import load_catalog
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.schema import Schema
from pyiceberg.table.update import AssertCurrentSchemaId
from pyiceberg.types import (
    IntegerType,
    ListType,
    LongType,
    NestedField,
    StringType,
    StructType,
    TimestamptzType,
)

from airflow_tpc.tables.iceberg_schema import iceberg_field_of, iceberg_schema_of
from airflow_tpc.tables.pyiceberg_private import (
    assert_unchanged,
    check_arrow_schema_compatible,
    rest_session,
)

TABLE_SCHEMA = Schema(NestedField(1, "id", LongType(), required=True),
                      NestedField(2, "epoch", StringType(), required=False))


def test_check_arrow_schema_compatible_takes_fitting_files_and_names_misfits():
    fits = pa.schema([pa.field("id", pa.int64(), nullable=False), ("epoch", pa.string())])
    check_arrow_schema_compatible(TABLE_SCHEMA, fits, 2)
    promoted = pa.schema([pa.field("id", pa.int32(), nullable=False),
                          ("epoch", pa.large_string())])  # int -> long: Iceberg promotes
    check_arrow_schema_compatible(TABLE_SCHEMA, promoted, 2)
    with pytest.raises(ValueError, match="id"):  # a string id: no promotion
        check_arrow_schema_compatible(
            TABLE_SCHEMA, pa.schema([pa.field("id", pa.string(), nullable=False),
                                     ("epoch", pa.string())]), 2)
    with pytest.raises(ValueError):  # a required column the file may hold nulls in
        check_arrow_schema_compatible(
            TABLE_SCHEMA, pa.schema([("id", pa.int64()), ("epoch", pa.string())]), 2)


def test_assert_unchanged_makes_a_commit_fail_after_a_concurrent_schema_change(tmp_path):
    (tmp_path / "wh").mkdir()
    catalog = load_catalog("t", type="sql", uri=f"sqlite:///{tmp_path}/c.db",
                           warehouse=f"file://{tmp_path}/wh")
    catalog.create_namespace("ns")
    table = catalog.create_table("ns.t", schema=TABLE_SCHEMA)
    # Unchanged: the requirement holds and the commit goes through.
    tx = table.transaction()
    assert_unchanged(tx, (AssertCurrentSchemaId(current_schema_id=0),))
    tx.set_properties(checked="1")
    tx.commit_transaction()
    assert catalog.load_table("ns.t").properties["checked"] == "1"
    # A schema change lands between the read and the commit: refused, nothing written.
    tx = catalog.load_table("ns.t").transaction()
    assert_unchanged(tx, (AssertCurrentSchemaId(current_schema_id=0),))
    tx.set_properties(checked="2")
    with catalog.load_table("ns.t").update_schema() as update:
        update.add_column("extra", StringType())
    with pytest.raises(CommitFailedException):
        tx.commit_transaction()
    assert catalog.load_table("ns.t").properties["checked"] == "1"


def test_rest_session_is_the_catalogs_authenticated_session(seaweed):
    catalog = load_catalog("rest", **seaweed.catalog_properties(seaweed.new_warehouse()))
    session = rest_session(catalog)
    import requests

    name = f"ns_{uuid.uuid4().hex[:8]}"
    url, body = catalog.url("namespaces", prefixed=True), json.dumps({"namespace": [name]})
    # Without the catalog's credentials the catalog refuses the request...
    stranger = requests.post(url, data=body, headers=dict(session.headers), timeout=30)
    assert stranger.status_code in (401, 403), stranger.text
    assert (name,) not in catalog.list_namespaces()
    # ...on its session (its OAuth2 token, as pyiceberg's auth manager sets it) it acts.
    response = session.post(url, data=body, headers=session.headers, timeout=30)
    assert response.status_code == 200, response.text
    assert (name,) in catalog.list_namespaces()


def test_the_public_schema_conversion_gives_a_new_tables_schema():
    """What the private ``Catalog._convert_schema_if_needed`` + ``assign_fresh_schema_ids``
    gave: every field (nested ones too) an id in creation order; an unsupported type
    refused with pyiceberg's error."""
    arrow = pa.schema([pa.field("id", pa.int64(), nullable=False),
                       ("tags", pa.list_(pa.string())),
                       ("at", pa.struct([("ts", pa.timestamp("us", "UTC")),
                                         ("n", pa.int32())])),
                       ("epoch", pa.large_string())])
    assert iceberg_schema_of(arrow) == Schema(
        NestedField(1, "id", LongType(), required=True),
        NestedField(2, "tags", ListType(5, StringType(), element_required=False),
                    required=False),
        NestedField(3, "at", StructType(NestedField(6, "ts", TimestamptzType(), required=False),
                                        NestedField(7, "n", IntegerType(), required=False)),
                    required=False),
        NestedField(4, "epoch", StringType(), required=False))
    assert iceberg_field_of(arrow, "at").field_type == StructType(
        NestedField(2, "ts", TimestamptzType(), required=False),
        NestedField(3, "n", IntegerType(), required=False))
    with pytest.raises(Exception, match="timestamp\\[ns\\]"):
        iceberg_schema_of(pa.schema([("t", pa.timestamp("ns"))]))
