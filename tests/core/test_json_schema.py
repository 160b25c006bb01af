"""The published JSON Schemas (docs/schema/) match the code and the documents it writes.

Three claims, each of which a change can break:
- the checked-in files are what :mod:`airflow_tpc.core.schemas` generates from the typed
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
from airflow_tpc.core.faults import InjectedCrash, armed
from airflow_tpc.core.group_records import parse_group_record
from airflow_tpc.core.manifest import MANIFEST_NAME, Manifest
from airflow_tpc.core.schemas import all_schemas, render
from airflow_tpc.errors import LedgerError
from airflow_tpc.group import Group
from tests.core.helpers import stage, write_staged

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
        "docs/schema is stale: run `python -m airflow_tpc.core.schemas docs/schema`"
    for kind, schema in SCHEMAS.items():
        assert on_disk[kind] == render(schema), \
            f"docs/schema/{kind}.schema.json is stale: run `python -m airflow_tpc.core.schemas " \
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
    expected = set(SCHEMAS) - {"openlineage-facet"} - GROUP_KINDS \
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


# ------------------------------------------------------------------ groups
#: The group's own records; its published.json and closed.json are the target facts.
GROUP_KINDS = {"group", "group-begin", "group-decision"}


def group_kind_of(rel: str) -> str | None:
    """Which schema governs a document in a group's folder."""
    name = rel.rsplit("/", 1)[-1]
    if "/ledger/" in rel:
        stem = name.removesuffix(".json")
        return {"begin": "group-begin", "decision": "group-decision"}.get(stem, stem)
    return {"group.json": "group", "index.json": "pending-index"}.get(name)


def group_workload(tmp_path) -> Group:
    """A real group: a commit, a re-run committed over it, an abort of a pre-committed
    attempt, an expiry (recover), and a commit crashed after its decision."""
    sinks = {n: Sink(str(tmp_path / n), "schemas", config=SinkConfig(timeout_s=600))
             for n in ("events", "daily")}
    group = Group(sinks, str(tmp_path / "groups" / "etl"))

    def staged(epoch: str, data: bytes):
        gtxn = group.begin(epoch)
        for name, sink in group.sinks.items():
            write_staged(sink, gtxn.member(name), {"part-0.parquet": data + name.encode()})
        group.precommit(gtxn)
        return gtxn

    group.commit(staged("2026-11-20", b"a"))
    group.commit(staged("2026-11-20", b"b"))  # a re-run: the higher attempt wins
    group.abort(staged("2026-11-21", b"c"), reason="rejected at the gate")
    group.begin("2026-11-22")  # open, will expire
    group.recover(now=time.time() + 10_000)
    with armed("group.after_decision"), pytest.raises(InjectedCrash):
        group.commit(staged("2026-11-23", b"d"))
    return group


def test_every_document_a_real_group_writes_validates(tmp_path):
    """The group's folder (claim, begin, commit and abort decisions, facts, pending
    index) against the group schemas; its members' own records, which name the group,
    against the target schemas."""
    group = group_workload(tmp_path)
    seen: dict[str, int] = {}
    documents = [(path, doc, group_kind_of(path)) for path, doc in
                 every_document(group, group.ledger.layout.root).items()]  # type: ignore[arg-type]
    for sink in group.sinks.values():
        documents += [(path, doc, kind_of(path)) for path, doc in
                      every_document(sink, sink.layout.root, sink.layout.staging_root).items()]
    members_named = 0
    for path, doc, kind in documents:
        assert kind in SCHEMAS, f"{path}: a document with no published schema"
        errors = [e.message for e in validator(kind).iter_errors(doc)]
        assert not errors, (path, errors)
        if kind == "group-decision":
            kind = f"group-decision:{doc['outcome']}"
        seen[kind] = seen.get(kind, 0) + 1
        if kind in ("begin", "decision") and isinstance(doc.get("group"), dict):
            members_named += 1
    assert {"group", "group-begin", "group-decision:commit", "group-decision:abort",
            "published", "closed", "pending-index"} <= set(seen), seen
    assert seen["group"] == 1 and seen["group-begin"] == 5, seen
    assert seen["group-decision:commit"] == 3 and seen["group-decision:abort"] == 2, seen
    assert members_named >= 2 * 5 + 2 * 2  # every member begin; the members' commits


def _group_mutations(decision: dict, begin: dict, claim: dict):
    """(kind, name, document, refused by the parser too) that the schemas refuse."""
    def changed(doc: dict, fn) -> dict:
        doc = copy.deepcopy(doc)
        fn(doc)
        return doc

    member = next(iter(decision["members"]))
    yield "group-decision", "a member without its digest", changed(
        decision, lambda d: d["members"][member].pop("manifest_digest")), True
    yield "group-decision", "no members", changed(
        decision, lambda d: d.update(members={})), True
    yield "group-decision", "unknown outcome", changed(
        decision, lambda d: d.update(outcome="maybe")), True
    yield "group-decision", "unknown version", changed(
        decision, lambda d: d.update(version=2)), True
    yield "group-decision", "a member decision without its group", changed(
        decision, lambda d: d["members"][member].pop("group")), False
    yield "group-decision", "a bad member name", changed(
        decision, lambda d: d["members"].update({"no name!": d["members"][member]})), False
    yield "group-begin", "no members", changed(begin, lambda d: d.pop("members")), True
    yield "group-begin", "a member without staging", changed(
        begin, lambda d: d["members"][member].pop("staging_uri")), True
    yield "group-begin", "no timeout", changed(begin, lambda d: d.pop("timeout_s")), True
    yield "group", "no members", changed(claim, lambda d: d.pop("members")), False
    yield "group", "a member without a target", changed(
        claim, lambda d: d["members"].update({member: ""})), False


def test_group_documents_the_parsers_refuse_are_refused_by_the_schemas(tmp_path):
    group = group_workload(tmp_path)
    layout, storage = group.ledger.layout, group.storage

    def read(path: str) -> dict:
        return json.loads(storage.read_bytes(path))

    decision = read(layout.record("2026-11-20", 1, "decision"))
    begin = read(layout.record("2026-11-20", 1, "begin"))
    claim = read(storage.join(layout.root, "_tpc", "group.json"))
    assert not list(validator("group-decision").iter_errors(decision))
    for kind, what, bad, parser_refuses in _group_mutations(decision, begin, claim):
        assert list(validator(kind).iter_errors(bad)), f"{kind}: {what} validated"
        if parser_refuses:
            with pytest.raises(LedgerError):
                parse_group_record(kind.removeprefix("group-"), bad, epoch="2026-11-20",
                                   attempt=1, group=group.uri, where="test")
