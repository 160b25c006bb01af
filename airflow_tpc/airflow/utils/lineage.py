"""OpenLineage of the protocol's tasks: what a commit wrote, named as the spec names it.

Airflow's OpenLineage listener asks each operator for its lineage when a try starts,
completes or fails (``get_openlineage_facets_on_start/complete/failure``).  It asks in a
process of its own (a fork of the task process), where native table libraries cannot
run (delta-rs's runtime panics in a fork) and an XCom pull does not return: so the
commit operator gathers what the facets need in ``execute`` (:func:`commit_facts`: the
schema, read once) and the fork only builds the event from what it inherited.

Naming (OpenLineage's dataset naming spec):

* a folder target, and a Delta table (its location is its identity): the store's
  namespace and path — ``file`` + ``/abs/path``, ``s3://bucket`` + ``key/prefix``;
* an Iceberg table: the catalog's warehouse as namespace (``s3://lake/warehouse``,
  ``file:///data/warehouse``; a REST catalog whose warehouse is a name: its URI and
  that name) and the table's identifier (``analytics.events``) as name; the table's
  physical location is a symlink of type ``LOCATION``.

Facets on completion: ``outputStatistics`` (rows, bytes, files of the commit),
``schema`` (the table's schema; a folder's first committed Parquet file's),
``version`` (the Iceberg snapshot id or Delta version the commit made; a folder's
manifest digest), and ``airflowTpc`` — epoch, attempt, transaction id, namespace,
manifest digest and outcome; an abort's lists every attempt it aborted
(``abortedAttempts``).  The facet's ``_schemaURL`` is its JSON Schema's published address
(docs/schema/openlineage-facet.schema.json on the repository's default branch).  Start
and failure events name the same output, without what only a commit knows.

Schema types are the table format's own: an Iceberg table's as Iceberg names them
(``long``, ``string``, ``timestamptz``, ``list<long>``), a Delta table's as Delta does,
structs as nested fields — never the Arrow types a reader maps them to (``large_string``).
A folder's are its Parquet footer's Arrow types.

Only imported when the OpenLineage provider is installed (the ``openlineage`` extra).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

import attr
from airflow.providers.common.compat.openlineage.facet import (
    DatasetFacet,
    Identifier,
    OutputDataset,
    OutputStatisticsOutputDatasetFacet,
    SchemaDatasetFacet,
    SchemaDatasetFacetFields,
    SymlinksDatasetFacet,
)
from airflow.providers.openlineage.extractors import OperatorLineage
from openlineage.client.facet_v2 import dataset_version_dataset

from airflow_tpc.core.schemas import PUBLISHED_SCHEMA_BASE
from airflow_tpc.storage import storage_class

if TYPE_CHECKING:  # pragma: no cover
    from airflow_tpc.airflow.hooks.tpc import TpcHook

log = logging.getLogger(__name__)

#: The custom facet's key in a dataset's facets.
FACET = "airflowTpc"
#: The facet's ``_schemaURL``: its JSON Schema as the repository publishes it (its $id).
FACET_SCHEMA_URL = f"{PUBLISHED_SCHEMA_BASE}openlineage-facet.schema.json"


@attr.define
class TpcTransactionDatasetFacet(DatasetFacet):
    """Which transaction of the exactly-once protocol wrote (or tried to write) this
    output: what joins a lineage event to the target's ledger."""

    epoch: str
    attempt: int
    txnId: str  # noqa: N815 - OpenLineage's camelCase
    namespace: str
    manifestDigest: str | None = None  # noqa: N815
    outcome: str | None = None
    abortedAttempts: list[dict[str, Any]] | None = None  # noqa: N815

    @staticmethod
    def _get_schema() -> str:
        return FACET_SCHEMA_URL


def identity(hook: TpcHook) -> tuple[str, str]:
    """``(namespace, name)`` of the hook's target, without reading it."""
    return _identity(str(hook.target), lambda: hook.catalog_properties() or {})


def sink_identity(sink: Any) -> tuple[str, str]:
    """``(namespace, name)`` of an open sink's target (the UI's aborts hold a sink, not
    a hook): named exactly as :func:`identity` names the hook that opened it."""
    table = getattr(sink, "table_target", None)
    if table is None:
        return _identity(str(sink.target), dict)
    return _identity(str(table.uri),
                     lambda: dict(getattr(table, "catalog_properties", None) or {}))


def _identity(target: str, catalog_properties: Any) -> tuple[str, str]:
    if target.startswith("iceberg://"):
        from airflow_tpc.tables.iceberg import IcebergTarget

        parsed = IcebergTarget.parse(target)
        return _iceberg_namespace(catalog_properties(), parsed.catalog_name), \
            parsed.identifier
    if urlsplit(target).scheme.startswith("delta+"):  # delta+<store>://: the store's URI
        location = target.split("+", 1)[1]
        return storage_class(location).lineage_name(location)
    return storage_class(target).lineage_name(target)


def _iceberg_namespace(props: dict[str, str], catalog_name: str) -> str:
    """The catalog's warehouse: a location, or a REST catalog's URI plus a warehouse
    name; never credentials (user info and query are dropped)."""
    warehouse = (props.get("warehouse") or "").rstrip("/")
    if "://" in warehouse:
        return _clean(warehouse)
    uri = props.get("uri") or ""
    if "://" in uri:
        return _clean(uri).rstrip("/") + (f"/{warehouse}" if warehouse else "")
    return f"iceberg://{catalog_name}"


def _clean(uri: str) -> str:
    parts = urlsplit(uri)
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def commit_facts(hook: TpcHook, summary: dict[str, Any]) -> dict[str, Any]:
    """What the completion facets need that only I/O tells, gathered in the task process
    (never in the listener's fork): the output's schema.  Nothing when the OpenLineage
    listener is off (nothing to pay for)."""
    try:
        from airflow.providers.openlineage import conf as ol_conf

        if ol_conf.is_disabled():
            return {}
    except Exception:  # an older provider: assume it is on
        pass
    return {"schema": _schema(hook, summary)}


def lineage(hook: TpcHook, summary: dict[str, Any] | None = None,
            facts: dict[str, Any] | None = None) -> OperatorLineage:
    """The hook's target as the one output; with ``summary`` (what a commit or abort
    recorded) and ``facts`` (:func:`commit_facts`), the facets of what happened to it."""
    namespace, name = identity(hook)
    return OperatorLineage(outputs=[output(namespace, name, str(hook.target), summary,
                                           facts)])


def output(namespace: str, name: str, target: str, summary: dict[str, Any] | None = None,
           facts: dict[str, Any] | None = None) -> OutputDataset:
    """The output dataset ``(namespace, name)`` of ``target``, with the facets of what
    ``summary`` says happened to it (see :func:`lineage`)."""
    facets: dict[str, Any] = {}
    output_facets: dict[str, Any] = {}
    if summary:
        location = summary.get("location")
        if location and target.startswith("iceberg://"):
            loc_ns, loc_name = storage_class(location).lineage_name(location)
            facets["symlinks"] = SymlinksDatasetFacet(identifiers=[
                Identifier(namespace=loc_ns, name=loc_name, type="LOCATION")])
        aborted = summary.get("aborted_attempts")
        facets[FACET] = TpcTransactionDatasetFacet(
            epoch=str(summary["epoch"]), attempt=int(summary["attempt"]),
            txnId=str(summary["txn_id"]), namespace=str(summary["namespace"]),
            manifestDigest=summary.get("digest"), outcome=summary.get("outcome"),
            abortedAttempts=[{"attempt": int(a), "txnId": str(t)} for a, t in aborted]
            if aborted else None)
        if summary.get("outcome") in ("committed", "already_committed"):
            version = summary.get("snapshot_id") or summary.get("version") \
                or summary.get("digest")
            if version:
                facets["version"] = dataset_version_dataset.DatasetVersionDatasetFacet(
                    datasetVersion=str(version))
            schema = (facts or {}).get("schema")
            if schema:
                facets["schema"] = SchemaDatasetFacet(fields=_facet_fields(schema, True))
            output_facets["outputStatistics"] = OutputStatisticsOutputDatasetFacet(
                rowCount=summary.get("rows"), size=summary.get("bytes"),
                fileCount=summary.get("files"))
    return OutputDataset(namespace=namespace, name=name, facets=facets,
                         outputFacets=output_facets)


def _facet_fields(columns: list[dict[str, Any]], top: bool = False
                  ) -> list[SchemaDatasetFacetFields]:
    """OpenLineage's schema fields of :func:`schema_columns`' columns (a struct's own
    columns as nested ``fields``; ordinal positions at the top level)."""
    return [SchemaDatasetFacetFields(
        name=c["name"], type=c["type"], ordinal_position=i + 1 if top else None,
        fields=_facet_fields(c["fields"]) if c.get("fields") else [])
        for i, c in enumerate(columns)]


def _schema(hook: TpcHook, summary: dict[str, Any]) -> list[dict[str, Any]]:
    """The output's columns: the table's schema, or a folder's first committed Parquet
    file's footer.  Lineage must never fail a task: an error gives no schema facet."""
    try:
        sink = hook.get_sink()
        table = getattr(sink, "table_target", None)
        if table is not None:
            loaded = table.load_table()
            if loaded is None:
                return []
            return schema_columns(loaded.schema())  # pyiceberg's Schema, or delta-rs's
        files = sink.committed_files([summary["epoch"]]).get(summary["epoch"]) or []
        first = next((f for f in files if f.endswith(".parquet")), None)
        if first is None:
            return []
        import pyarrow.parquet as pq

        from airflow_tpc.storage import open_storage

        storage, path = open_storage(first, hook.storage_options())
        with storage.open_input(path) as fh:
            return schema_columns(pq.read_schema(fh))
    except Exception as exc:  # a lineage facet is never worth a failed task
        log.warning("No schema facet for %s: %s", hook.target, exc)
        return []


def schema_columns(schema: Any) -> list[dict[str, Any]]:
    """``[{"name", "type", "fields"?}]`` of a pyiceberg, delta-rs or pyarrow schema, each
    type named as that format names it; a struct's columns nested under ``fields``."""
    if hasattr(schema, "highest_field_id"):  # pyiceberg.schema.Schema
        return [_iceberg_column(f.name, f.field_type) for f in schema.fields]
    if hasattr(schema, "to_json"):  # deltalake.Schema: Delta's own JSON names its types
        import json

        return [_delta_column(f["name"], f["type"])
                for f in json.loads(schema.to_json())["fields"]]
    return [{"name": f.name, "type": str(f.type)} for f in schema if f.name]


def _iceberg_column(name: str, typ: Any) -> dict[str, Any]:
    if typ.is_struct:
        return {"name": name, "type": "struct",
                "fields": [_iceberg_column(f.name, f.field_type) for f in typ.fields]}
    return {"name": name, "type": _iceberg_type(typ)}


def _iceberg_type(typ: Any) -> str:
    """An Iceberg type's name without field ids (pyiceberg's ``str`` of a struct, list or
    map carries them: ``struct<5: x: optional long>``)."""
    from pyiceberg.types import ListType, MapType

    if typ.is_struct:
        return "struct<" + ", ".join(f"{f.name}: {_iceberg_type(f.field_type)}"
                                     for f in typ.fields) + ">"
    if isinstance(typ, ListType):
        return f"list<{_iceberg_type(typ.element_type)}>"
    if isinstance(typ, MapType):
        return f"map<{_iceberg_type(typ.key_type)}, {_iceberg_type(typ.value_type)}>"
    return str(typ)


def _delta_column(name: str, typ: Any) -> dict[str, Any]:
    if isinstance(typ, dict) and typ.get("type") == "struct":
        return {"name": name, "type": "struct",
                "fields": [_delta_column(f["name"], f["type"]) for f in typ["fields"]]}
    return {"name": name, "type": _delta_type(typ)}


def _delta_type(typ: Any) -> str:
    """A Delta type's name from the table's schema JSON (the protocol's spelling)."""
    if isinstance(typ, str):
        return typ
    kind = typ["type"]
    if kind == "array":
        return f"array<{_delta_type(typ['elementType'])}>"
    if kind == "map":
        return f"map<{_delta_type(typ['keyType'])}, {_delta_type(typ['valueType'])}>"
    return "struct<" + ", ".join(f"{f['name']}: {_delta_type(f['type'])}"
                                 for f in typ["fields"]) + ">"
