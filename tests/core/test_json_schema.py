"""The published JSON Schemas (docs/schema/) match the code and the documents it writes.

Three claims, each of which a change can break:
- the checked-in files are what :mod:`airflow_tpc.schemas` generates from the typed
  records (a record that grows a field must republish its schema);
- every document a real workload writes — on local disk and on S3 — validates
  against the schema of its kind, and every kind is exercised;
- the schemas are not vacuous: documents the parsers refuse for their shape are
  refused by the schemas too.
"""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator
from referencing import Registry, Resource

from airflow_tpc import Sink, SinkConfig
from airflow_tpc.faults import InjectedCrash, armed
from airflow_tpc.manifest import MANIFEST_NAME, Manifest
from airflow_tpc.schemas import all_schemas, render
from tests.core.helpers import stage

SCHEMA_DIR = Path(__file__).resolve().parents[2] / "docs" / "schema"
SCHEMAS = all_schemas()
REGISTRY = Registry().with_resources(
    (s["$id"], Resource.from_contents(s)) for s in SCHEMAS.values())


def validator(kind: str) -> Draft202012Validator:
    return Draft202012Validator(SCHEMAS[kind], registry=REGISTRY)


def kind_of(rel: str) -> str | None:
    """Which schema governs the document at this path (None: not an airflow-tpc JSON)."""
    name = rel.rsplit("/", 1)[-1]
    if "/ledger/" in rel or rel.startswith("ledger/"):
        return name.removesuffix(".json")
    return {MANIFEST_NAME: "manifest", "_tpc_published.json": "published-marker",
            "sink.json": "sink", "index.json": "pending-index",
            "_tpc_fingerprints.json": "fingerprints"}.get(name)


def test_checked_in_schemas_are_the_generated_ones():
    on_disk = {p.name.removesuffix(".schema.json"): p.read_text(encoding="utf-8")
               for p in SCHEMA_DIR.glob("*.schema.json")}
    assert set(on_disk) == set(SCHEMAS), \
        "docs/schema is stale: run `python -m airflow_tpc.schemas docs/schema`"
    for kind, schema in SCHEMAS.items():
        assert on_disk[kind] == render(schema), \
            f"docs/schema/{kind}.schema.json is stale: run `python -m airflow_tpc.schemas " \
            "docs/schema`"


def test_the_schemas_are_valid_json_schemas():
    for schema in SCHEMAS.values():
        Draft202012Validator.check_schema(schema)


def every_document(sink: Sink, *roots: str) -> dict[str, dict]:
    """Path -> parsed JSON of every airflow-tpc document under the given roots."""
    out = {}
    for root in roots:
        for info in sink.storage.list(root):
            if info.path.endswith(".json"):
                out[info.path] = json.loads(sink.storage.read_bytes(info.path))
    return out


def workload(sink: Sink) -> dict[str, dict]:
    """Write every kind of document: commits, a superseded and an abandoned attempt,
    an abort (decision + closed), an expiry, and a manifest left sealed in staging."""
    first, _ = stage(sink, "2026-11-20", {"part-0.parquet": b"a", "day=1/part-1.parquet": b"b"})
    sink.commit(first)
    second, _ = stage(sink, "2026-11-20", {"part-0.parquet": b"c"})
    sink.commit(second)  # supersedes the first
    aborted, _ = stage(sink, "2026-11-21", {"part-0.parquet": b"d"})
    sink.abort(aborted, reason="rejected at the gate")
    sealed, _ = stage(sink, "2026-11-22", {"part-0.parquet": b"e"})  # manifest stays staged
    sink.begin("2026-11-23")  # open, will expire
    sink.recover(now=time.time() + 10_000)
    # An abandoned commit: decided, its staged file lost, given up after its timeout.
    lost, _ = stage(sink, "2026-11-24", {"part-0.parquet": b"f"})
    with armed("commit.after_decision"), pytest.raises(InjectedCrash):
        sink.commit(lost)
    staging = sink.layout.staging("2026-11-24", lost.attempt)
    sink.storage.delete_files([sink.storage.join(staging, "part-0.parquet")])
    report = sink.recover(ignore_failures_after_timeout=True, now=time.time() + 10_000)
    assert [a[:2] for a in report.abandoned] == [("2026-11-24", lost.attempt)]
    assert sealed.attempt == 1
    return every_document(sink, sink.layout.root, sink.layout.staging_root)


def test_every_document_a_real_workload_writes_validates(store):
    target, options = store
    sink = Sink(target, "schemas", storage_options=options, config=SinkConfig(timeout_s=600))
    docs = workload(sink)
    seen: dict[str, int] = {}
    for path, doc in docs.items():
        kind = kind_of(path)
        assert kind in SCHEMAS, f"{path}: a document with no published schema"
        errors = [e.message for e in validator(kind).iter_errors(doc)]
        assert not errors, (path, errors)
        seen[kind] = seen.get(kind, 0) + 1
        if kind == "decision":
            seen[f"decision:{doc['outcome']}"] = seen.get(f"decision:{doc['outcome']}", 0) + 1
    # Every schema was exercised by a real document (an expiry is an abort decision);
    # only local stores seal fingerprints (S3 lists ETags instead).
    # (the OpenLineage facet is no ledger document: tests/airflow/test_openlineage.py
    # validates the facets the real listener emits)
    expected = set(SCHEMAS) - {"openlineage-facet"} \
        - (set() if options is None else {"fingerprints"})
    assert expected <= set(seen), expected - set(seen)
    assert seen["decision:commit"] >= 3 and seen["decision:abort"] >= 2, seen


def test_a_version_1_decision_with_its_embedded_manifest_validates(tmp_path):
    sink = Sink(str(tmp_path / "t"), "schemas")
    txn, manifest = stage(sink, "1", {"part-0.parquet": b"a"})
    legacy = {"outcome": "commit", "decided_at": 1.0, "manifest": manifest.to_dict()}
    assert not list(validator("decision").iter_errors(legacy))
    legacy["manifest"]["files"][0]["size"] = -1
    assert list(validator("decision").iter_errors(legacy))


def _mutations(decision: dict, manifest: dict, begin: dict):
    """(kind, name, document) that the parsers refuse for their shape."""
    def changed(doc: dict, fn) -> dict:
        doc = copy.deepcopy(doc)
        fn(doc)
        return doc

    yield "decision", "no digest", changed(decision, lambda d: d.pop("manifest_digest"))
    yield "decision", "unknown mode", changed(decision, lambda d: d.update(mode="teleport"))
    yield "decision", "bad totals", changed(decision, lambda d: d["totals"].update(files="3"))
    yield "decision", "attempt 0", changed(decision, lambda d: d["txn"].update(attempt=0))
    yield "decision", "unknown outcome", changed(decision, lambda d: d.update(outcome="maybe"))
    yield "manifest", "unknown version", changed(manifest, lambda d: d.update(version=9))
    yield "manifest", "bad checksum", changed(
        manifest, lambda d: d["files"][0].update(checksum="crc:1"))
    yield "manifest", "negative size", changed(manifest, lambda d: d["files"][0].update(size=-1))
    yield "begin", "no timeout", changed(begin, lambda d: d.pop("timeout_s"))
    yield "begin", "bad epoch", changed(begin, lambda d: d.update(epoch="../x"))


def test_documents_the_parsers_refuse_are_refused_by_the_schemas(tmp_path):
    sink = Sink(str(tmp_path / "t"), "schemas")
    txn, manifest = stage(sink, "1", {"part-0.parquet": b"a"})
    sink.commit(txn)
    decision = json.loads(sink.storage.read_bytes(sink.layout.record("1", 1, "decision")))
    begin = json.loads(sink.storage.read_bytes(sink.layout.record("1", 1, "begin")))
    doc = manifest.to_dict()
    for kind, what, bad in _mutations(decision, doc, begin):
        assert list(validator(kind).iter_errors(bad)), f"{kind}: {what} validated"
        if kind == "manifest":
            with pytest.raises(Exception):  # noqa: B017 - any refusal; the parser's own test names it
                Manifest.parse(bad)
