"""JSON Schemas of the documents airflow-tpc writes, generated from the typed records.

Other implementations (a Java committer, a Rust reader) validate against the
published files in ``docs/schema/`` instead of reverse-engineering Python.  The
schemas are *generated* here — field names and types from the dataclasses
(:class:`~airflow_tpc.core.transaction.Transaction`, :class:`~airflow_tpc.core.records.Begin`,
:class:`~airflow_tpc.core.records.Totals`, :class:`~airflow_tpc.core.manifest.FileEntry`, and a
group's :class:`~airflow_tpc.core.group_records.GroupTransaction`,
:class:`~airflow_tpc.core.group_records.GroupCommit`,
:class:`~airflow_tpc.core.group_records.GroupAbort`),
formats, versions, modes and patterns from the constants the parsers check — so a
record type that grows a field changes its schema, and ``tests/core/test_json_schema.py``
fails until ``python -m airflow_tpc.core.schemas docs/schema`` is run again.

What a schema can say is structural: types, required fields, enumerations,
patterns.  The rules that tie a record to *where it lies* (its epoch and attempt
folder, its target, its staging) and the manifest's digest are checked by the
parsers and stated in docs/PROTOCOL.md; a document that validates can still be
refused by a reader for lying about its place.  Readers ignore unknown fields
(forward compatibility), so every object schema allows additional properties.

Stdlib only: the core imports no schema library (the tests validate with
``jsonschema``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from .group_records import (
    GROUP_BEGIN_FORMAT,
    GROUP_DECISION_FORMAT,
    GROUP_FORMAT,
    GroupAbort,
    GroupCommit,
    GroupTransaction,
)
from .manifest import FORMAT as MANIFEST_FORMAT
from .manifest import VERSION as MANIFEST_VERSION
from .records import (
    DECISION_FORMAT,
    DECISION_VERSION,
    VALIDATED_FORMAT,
    VALIDATORS,
    Begin,
    Validated,
)
from .schema_parts import (
    DIALECT,
    DIGEST_PATTERN,
    EPOCH_PATTERN,
    GROUP_VERSION,
    ID_BASE,
    PUBLISHED_SCHEMA_BASE,
    WRITER,
    _by_member,
    _const_format,
    _document,
    _file_entry,
    _group_member,
    _object,
    _refine,
    _totals,
    _txn_ref,
    record_properties,
)
from .transaction import PROMOTION_MODES, VERIFY_MODES, Transaction

#: The parts the documents are built from moved to :mod:`airflow_tpc.core.schema_parts`;
#: ``ID_BASE`` and ``DIALECT`` are still importable from here.
__all__ = [
    "DIALECT", "ID_BASE", "all_schemas", "begin_schema", "decision_schema", "fact_schemas",
    "fingerprints_schema", "group_begin_schema", "group_claim_schema", "group_decision_schema",
    "main", "manifest_schema", "marker_schema", "openlineage_facet_schema",
    "pending_index_schema", "render", "sink_claim_schema", "validated_schema", "write",
]


def manifest_schema() -> dict[str, Any]:
    return _document(
        "manifest", "airflow-tpc manifest (_tpc_manifest.json)",
        "The sealed list of an attempt's staged files. `digest` is the sha256 of the "
        "canonical JSON of every other field (docs/PROTOCOL.md).",
        _object({**_const_format(MANIFEST_FORMAT, MANIFEST_VERSION),
                 "txn": _txn_ref(), "txn_id": {"type": "string", "minLength": 1},
                 "staging": {"type": "string", "minLength": 1},
                 "created_at": {"type": "number"},
                 "files": {"type": "array", "items": _file_entry()},
                 "totals": _totals(),
                 "fingerprints": {"type": "string", "pattern": r"^sha256:[0-9a-f]{64}$"},
                 "table_stats": {"type": "string", "pattern": r"^sha256:[0-9a-f]{64}$"},
                 "listing": {"type": "string", "pattern": r"^sha256:[0-9a-f]{64}$"},
                 "digest": {"type": "string", "pattern": DIGEST_PATTERN}},
                ["format", "version", "txn", "txn_id", "staging", "files", "totals",
                 "digest"]))


def begin_schema() -> dict[str, Any]:
    props, required = record_properties(Begin)
    props = _refine(props)
    props["group"] = _group_member(nullable=True)  # a group member's attempt (§14.2)
    return _document(
        "begin", "airflow-tpc ledger record begin.json",
        "An attempt as it began; its attempt number fences every lower one. A member "
        "of a group transaction names its group (`group`).",
        _object({**props, "writer": WRITER}, required))


def _commit_decision() -> dict[str, Any]:
    """A version-2 commit decision: a target's own, or each member's in its group's."""
    return _object({**_const_format(DECISION_FORMAT, DECISION_VERSION),
                    "outcome": {"const": "commit"}, "txn": _txn_ref(),
                    "txn_id": {"type": "string", "minLength": 1},
                    "staging": {"type": "string", "minLength": 1},
                    "decided_at": {"type": "number"},
                    "mode": {"enum": list(PROMOTION_MODES)},
                    "verify": {"enum": list(VERIFY_MODES)},
                    "forced": {"type": "boolean"},
                    "manifest_digest": {"type": "string", "pattern": DIGEST_PATTERN},
                    "totals": _totals(), "writer": WRITER,
                    "scope": {"type": "object", "required": ["kind"],
                              "properties": {"kind": {"enum": ["epoch", "where",
                                                                "append"]},
                                             "where": {"type": "string",
                                                       "minLength": 1},
                                             "add_columns": {"type": "boolean"}}},
                    "group": _group_member()},
                   ["format", "version", "outcome", "txn", "txn_id", "staging",
                    "decided_at", "mode", "verify", "forced", "manifest_digest", "totals"])


def decision_schema() -> dict[str, Any]:
    commit = _commit_decision()
    legacy_commit = _object({"outcome": {"const": "commit"}, "version": {"const": 1},
                             "manifest": {"$ref": "manifest.schema.json"}},
                            ["outcome", "manifest"],
                            description="Version 1 (airflow-tpc 0.1): read, never written.")
    abort = _object({"outcome": {"const": "abort"}, "reason": {"type": "string"},
                     "expired": {"type": "boolean"}, "decided_at": {"type": "number"},
                     "txn_id": {"type": "string", "minLength": 1}, "txn": _txn_ref(),
                     "writer": WRITER},
                    ["outcome", "reason", "expired", "decided_at", "txn_id", "txn"])
    return _document(
        "decision", "airflow-tpc ledger record decision.json",
        "THE commit point of an attempt, written once (put-if-absent): a commit "
        "naming the sealed manifest by digest, or an abort.",
        {"oneOf": [commit, legacy_commit, abort]})


def fact_schemas() -> dict[str, dict[str, Any]]:
    """published.json, superseded.json, abandoned.json, closed.json."""
    txn_id = {"type": "string", "minLength": 1}
    return {
        "published": _document(
            "published", "airflow-tpc ledger record published.json",
            "The attempt's promotion finished.",
            _object({"published_at": {"type": "number"}, "txn_id": txn_id,
                     "manifest_digest": {"type": "string", "pattern": DIGEST_PATTERN},
                     "writer": WRITER}, ["published_at"])),
        "superseded": _document(
            "superseded", "airflow-tpc ledger record superseded.json",
            "A higher committed attempt displaced this one and its staging is gone.",
            _object({"by": {"type": "integer", "minimum": 2}, "writer": WRITER}, ["by"])),
        "abandoned": _document(
            "abandoned", "airflow-tpc ledger record abandoned.json",
            "Roll-forward of this decided attempt was given up (gc --abandon).",
            _object({"at": {"type": "number"}, "error": {"type": "string"},
                     "writer": WRITER}, [])),
        "closed": _document(
            "closed", "airflow-tpc ledger record closed.json",
            "An abort was carried out: the attempt's staging is gone.",
            _object({"closed_at": {"type": "number"}, "writer": WRITER}, ["closed_at"])),
    }


def validated_schema() -> dict[str, Any]:
    """validated.json: the fields of :class:`~airflow_tpc.core.records.Validated`, plus the
    transaction and staging it names (checked against its folder, PROTOCOL §3.4.11)."""
    props, required = record_properties(Validated)
    props["manifest_digest"] = {**props["manifest_digest"], "pattern": DIGEST_PATTERN}
    props["by"] = {"enum": list(VALIDATORS)}
    return _document(
        "validated", "airflow-tpc ledger record validated.json",
        "A full validation (every file entry decoded and checked) accepted the attempt's "
        "manifest of digest `manifest_digest`; a commit holding exactly that digest may "
        "skip decoding the entries again. Written once, by the pre-commit or the sensor.",
        _object({**_const_format(VALIDATED_FORMAT, 1), "txn": _txn_ref(),
                 "txn_id": {"type": "string", "minLength": 1},
                 "staging": {"type": "string", "minLength": 1}, **props, "writer": WRITER},
                ["format", "version", "txn", "txn_id", "staging", *required]))


def group_claim_schema() -> dict[str, Any]:
    return _document(
        "group", "airflow-tpc group claim (G/_tpc/group.json)",
        "A group's namespace and members (name -> target URI), written once and never "
        "changed: a new set of targets is a new group (docs/PROTOCOL.md §14.2).",
        _object({**_const_format(GROUP_FORMAT, GROUP_VERSION),
                 "namespace": {"type": "string", "minLength": 1},
                 "members": _by_member({"type": "string", "minLength": 1})},
                ["format", "version", "namespace", "members"]))


def group_begin_schema() -> dict[str, Any]:
    props, required = record_properties(GroupTransaction)
    member_props, member_required = record_properties(Transaction)
    props = _refine(props)
    props["group"] = {**props["group"], "minLength": 1}
    props["members"] = _by_member(_object(_refine(member_props), member_required))
    return _document(
        "group-begin", "airflow-tpc group ledger record begin.json (G/_tpc/ledger/...)",
        "A group attempt as it began: each member's transaction as planned, all with the "
        "group's attempt number (docs/PROTOCOL.md §14.2).",
        _object({**_const_format(GROUP_BEGIN_FORMAT, GROUP_VERSION), **props,
                 "owner": {"type": "object"}, "nonce": {"type": "string"},
                 "writer": WRITER},
                ["format", "version", *required]))


def group_decision_schema() -> dict[str, Any]:
    """The group's decision.json: a commit (each member's own decision record) or an
    abort, with the group attempt's identity."""
    ident, ident_required = record_properties(GroupTransaction,
                                              only=("namespace", "group", "epoch", "attempt"))
    ident = {**_const_format(GROUP_DECISION_FORMAT, GROUP_VERSION), **_refine(ident),
             "group": {"type": "string", "minLength": 1},
             "txn_id": {"type": "string", "minLength": 1}, "writer": WRITER}
    head = ["format", "version", "outcome", *ident_required, "txn_id"]
    props, required = record_properties(GroupCommit)
    props["members"] = _by_member({"allOf": [_commit_decision(), {"required": ["group"]}]})
    commit = _object({**ident, "outcome": {"const": GroupCommit.outcome}, **props,
                      "forced": {"type": "boolean"}}, [*head, *required, "forced"])
    props, required = record_properties(GroupAbort)
    abort = _object({**ident, "outcome": {"const": GroupAbort.outcome}, **props},
                    [*head, *required])
    return _document(
        "group-decision", "airflow-tpc group ledger record decision.json (G/_tpc/ledger/...)",
        "THE commit point of every member of a group attempt, written once "
        "(put-if-absent): a commit carrying each member's own decision record as it is to "
        "be written in that member's ledger, or an abort (docs/PROTOCOL.md §14.2). The "
        "group's published.json and closed.json are the facts of the same names.",
        {"oneOf": [commit, abort]})


def marker_schema() -> dict[str, Any]:
    head = {"epoch": {"type": "string", "pattern": EPOCH_PATTERN},
            "attempt": {"type": "integer", "minimum": 1},
            "txn_id": {"type": "string", "minLength": 1},
            "manifest_digest": {"type": "string", "pattern": DIGEST_PATTERN},
            "mode": {"enum": list(PROMOTION_MODES)},
            "totals": _totals()}
    required = ["format", "version", "epoch", "attempt", "txn_id", "manifest_digest", "mode"]
    listing = _object({**_const_format("airflow-tpc-published", 1), **head,
                       "files": {"type": "array", "items": _file_entry()}},
                      [*required, "files"])
    named = _object({**_const_format("airflow-tpc-published", 2), **head,
                     "manifest": {"type": "string", "minLength": 1}},
                    [*required, "manifest"])
    return _document(
        "published-marker", "airflow-tpc published marker (epoch=E/_tpc_published.json)",
        "What readers read: the epoch's published attempt. Version 2 names its manifest "
        "(`manifest`, relative to the target root: in the epoch's folder or in the "
        "attempt's staging), whose files readers read; version 1 lists the files "
        "(`files`, relative to the target root).",
        {"oneOf": [named, listing]})


def sink_claim_schema() -> dict[str, Any]:
    return _document(
        "sink", "airflow-tpc namespace claim (_tpc/sink.json)",
        "The namespace that owns the target, and (version 2) where its staging lies; "
        "written once. A claim without `staging_root` stages in `<target>/_tpc/staging`. "
        "A table's ledger kept apart from the table (`ledger_uri`) names the table "
        "(`table`, its URI) and its location (`table_location`).",
        _object({"format": {"const": "airflow-tpc-sink"}, "version": {"enum": [1, 2]},
                 "namespace": {"type": "string", "minLength": 1},
                 "staging_root": {"type": "string", "minLength": 1},
                 "table": {"type": "string", "minLength": 1},
                 "table_location": {"type": "string", "minLength": 1}},
                ["format", "namespace"]))


def pending_index_schema() -> dict[str, Any]:
    return _document(
        "pending-index", "airflow-tpc pending index marker (_tpc/pending/index.json)",
        "Present once the pending index is complete (docs/PROTOCOL.md §5.8).",
        _object(_const_format("airflow-tpc-pending-index", 1), ["format", "version"]))


def fingerprints_schema() -> dict[str, Any]:
    return _document(
        "fingerprints", "airflow-tpc fingerprints (_tpc_fingerprints.json, local stores)",
        "Each staged file's status at pre-commit (device, inode, size, mtime...), sealed "
        "beside the manifest, which names this document's sha256 in `fingerprints`.",
        _object({**_const_format("airflow-tpc-fingerprints", 1),
                 "files": {"type": "object",
                           "additionalProperties": {"type": "string", "minLength": 1}}},
                ["format", "version", "files"]))


def openlineage_facet_schema() -> dict[str, Any]:
    """The ``airflowTpc`` OpenLineage dataset facet (airflow_tpc/airflow/utils/lineage.py).  Its
    ``$id`` is the facet's ``_schemaURL``: a lineage consumer fetches it from there."""
    attempt = {"type": "integer", "minimum": 1}
    txn_id = {"type": "string", "minLength": 1}
    schema = _document(
        "openlineage-facet", "airflow-tpc OpenLineage dataset facet (airflowTpc)",
        "Which transaction of the exactly-once protocol wrote (or aborted) this output; "
        "beside OpenLineage's own _producer and _schemaURL.  An abort names every attempt "
        "it aborted in abortedAttempts (attempt and txnId: the highest of them).",
        _object({"epoch": {"type": "string", "minLength": 1},
                 "attempt": attempt, "txnId": txn_id,
                 "namespace": {"type": "string", "minLength": 1},
                 "manifestDigest": {"type": ["string", "null"]},
                 "outcome": {"enum": ["committed", "already_committed", "superseded",
                                      "aborted", None]},
                 "abortedAttempts": {"type": ["array", "null"], "items": _object(
                     {"attempt": attempt, "txnId": txn_id}, ["attempt", "txnId"])}},
                ["epoch", "attempt", "txnId", "namespace"]))
    return {**schema, "$id": f"{PUBLISHED_SCHEMA_BASE}openlineage-facet.schema.json"}


def all_schemas() -> dict[str, dict[str, Any]]:
    """File stem -> schema, for every document airflow-tpc writes."""
    return {"manifest": manifest_schema(), "begin": begin_schema(),
            "decision": decision_schema(), **fact_schemas(), "validated": validated_schema(),
            "fingerprints": fingerprints_schema(),
            "published-marker": marker_schema(), "sink": sink_claim_schema(),
            "pending-index": pending_index_schema(),
            "openlineage-facet": openlineage_facet_schema(),
            "group": group_claim_schema(), "group-begin": group_begin_schema(),
            "group-decision": group_decision_schema()}


def render(schema: dict[str, Any]) -> str:
    """The bytes written to docs/schema: stable, reviewable JSON."""
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"


def write(directory: str | Path) -> list[Path]:
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for stem, schema in all_schemas().items():
        path = out / f"{stem}.schema.json"
        path.write_text(render(schema), encoding="utf-8")
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m airflow_tpc.core.schemas <directory>   (writes *.schema.json)",
              file=sys.stderr)
        return 2
    for path in write(args[0]):
        print(path)
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
