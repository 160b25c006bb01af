"""The lineage facets' names: column types as the table format names them, and the
``airflowTpc`` facet's ``_schemaURL`` a stable address of its JSON Schema in this
repository (the facet validates against it).  No Airflow run: the schemas are real
pyiceberg, delta-rs and pyarrow schemas."""

from __future__ import annotations

import json
from pathlib import Path

import airflow.providers.openlineage  # noqa: F401  (the dev extra: a missing one fails, never skips)
import jsonschema
import pyarrow as pa
from deltalake import Schema as DeltaSchema
from openlineage.client.serde import Serde
from pyiceberg.schema import Schema
from pyiceberg.types import (
    DecimalType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    NestedField,
    StringType,
    StructType,
    TimestamptzType,
)

from airflow_tpc.airflow.utils.lineage import (
    FACET_SCHEMA_URL,
    TpcTransactionDatasetFacet,
    schema_columns,
)
from airflow_tpc.provider_info import get_provider_info

REPO = Path(__file__).resolve().parents[2]


def test_iceberg_columns_are_named_with_iceberg_types_not_arrow_ones():
    schema = Schema(
        NestedField(1, "id", LongType()), NestedField(2, "name", StringType()),
        NestedField(3, "tags", ListType(4, StringType())),
        NestedField(5, "at", StructType(NestedField(6, "ts", TimestamptzType()),
                                        NestedField(7, "n", IntegerType()))),
        NestedField(8, "price", MapType(9, StringType(), 10, DecimalType(10, 2))))
    assert schema_columns(schema) == [
        {"name": "id", "type": "long"}, {"name": "name", "type": "string"},
        {"name": "tags", "type": "list<string>"},
        {"name": "at", "type": "struct", "fields": [{"name": "ts", "type": "timestamptz"},
                                                    {"name": "n", "type": "int"}]},
        {"name": "price", "type": "map<string, decimal(10, 2)>"}]
    # What the facet showed before: the Arrow types a reader maps the table to.
    assert "large_string" in str(schema.as_arrow())


def test_delta_columns_are_named_with_delta_types():
    schema = DeltaSchema.from_arrow(pa.schema([
        ("id", pa.int64()), ("name", pa.large_string()), ("tags", pa.list_(pa.string())),
        ("at", pa.struct([("ts", pa.timestamp("us", "UTC"))]))]))
    assert schema_columns(schema) == [
        {"name": "id", "type": "long"}, {"name": "name", "type": "string"},
        {"name": "tags", "type": "array<string>"},
        {"name": "at", "type": "struct", "fields": [{"name": "ts", "type": "timestamp"}]}]


def test_a_folders_columns_are_its_parquet_footers_arrow_types():
    assert schema_columns(pa.schema([("id", pa.int64()), ("epoch", pa.string())])) == [
        {"name": "id", "type": "int64"}, {"name": "epoch", "type": "string"}]


def test_the_facets_schema_url_is_its_json_schema_in_this_repository():
    """``_schemaURL``: the repository provider_info names, its default branch, and a path
    that exists here; the schema at that path says it lives there ($id), and a facet as
    the listener serialises it validates against it."""
    repo_url = get_provider_info()["integrations"][0]["external-doc-url"]
    owner_repo = repo_url.removeprefix("https://github.com/")
    prefix = f"https://raw.githubusercontent.com/{owner_repo}/main/"
    assert FACET_SCHEMA_URL.startswith(prefix), FACET_SCHEMA_URL
    path = REPO / FACET_SCHEMA_URL.removeprefix(prefix)
    assert path.is_file(), path
    schema = json.loads(path.read_text(encoding="utf-8"))
    assert schema["$id"] == FACET_SCHEMA_URL
    facet = json.loads(Serde.to_json(TpcTransactionDatasetFacet(
        epoch="2026-09-01", attempt=2, txnId="ns/2026-09-01/2", namespace="ns",
        outcome="aborted", abortedAttempts=[{"attempt": 1, "txnId": "ns/2026-09-01/1"},
                                            {"attempt": 2, "txnId": "ns/2026-09-01/2"}])))
    assert facet["_schemaURL"] == FACET_SCHEMA_URL
    jsonschema.Draft202012Validator(schema).validate(facet)
    bad = {**facet, "abortedAttempts": [{"attempt": 0, "txnId": "x"}]}
    assert not jsonschema.Draft202012Validator(schema).is_valid(bad)
