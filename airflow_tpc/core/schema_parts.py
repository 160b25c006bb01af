"""The parts every generated JSON Schema of :mod:`airflow_tpc.core.schemas` is built from.

Field schemas read off a dataclass's type hints, the patterns the parsers apply, and
the shapes every document shares (its envelope, a transaction reference, a file entry,
a group member), apart from the documents themselves, which then read as what each
record holds.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any

from .group_records import MEMBER_RE
from .layout import EPOCH_RE
from .manifest import FileEntry
from .records import Totals
from .transaction import Transaction

DIALECT = "https://json-schema.org/draft/2020-12/schema"
ID_BASE = "https://airflow-tpc.invalid/schema/"  # a name, not a fetchable address
#: The project's repository (provider_info's ``external-doc-url``).
REPO_URL = "https://github.com/airflow-tpc/airflow-tpc"
#: Where docs/schema is served as raw JSON from the default branch: a stable, fetchable
#: address, for documents whose consumers fetch them (an OpenLineage facet's ``_schemaURL``).
PUBLISHED_SCHEMA_BASE = (REPO_URL.replace("https://github.com/",
                                          "https://raw.githubusercontent.com/")
                         + "/main/docs/schema/")

#: Patterns the parsers apply (JSON Schema regexes are ECMA-262; these are plain).
EPOCH_PATTERN = f"^{EPOCH_RE.pattern}$"
CHECKSUM_PATTERN = r"^(sha256|md5|etag):[0-9A-Za-z\-]{1,128}$"
DIGEST_PATTERN = r"^sha256:[0-9a-f]{64}$"
MEMBER_PATTERN = f"^{MEMBER_RE.pattern}$"
#: The version every group record is written with (group.py writes ``"version": 1``).
GROUP_VERSION = 1
#: Every ledger record's per-call writer id (optional: records written before it have none).
WRITER = {"type": "string", "pattern": "^[0-9a-f]{32}$",
          "description": "a fresh id per writing call: proves a record found after a lost "
                         "answer is the caller's own"}

_SCALARS: dict[Any, dict[str, Any]] = {
    str: {"type": "string"},
    int: {"type": "integer"},
    float: {"type": "number"},
    bool: {"type": "boolean"},
    type(None): {"type": "null"},
}


def _type_schema(hint: Any) -> dict[str, Any]:
    """The JSON Schema of one dataclass field's type hint."""
    if hint in _SCALARS:
        return dict(_SCALARS[hint])
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = [_type_schema(a) for a in typing.get_args(hint)]
        kinds = [o["type"] for o in options if set(o) == {"type"}]
        if len(kinds) == len(options):
            return {"type": kinds}
        return {"anyOf": options}
    if origin is dict or hint is dict:
        return {"type": "object"}
    if origin in (list, tuple):
        return {"type": "array"}
    raise TypeError(f"no JSON Schema for the type {hint!r}")  # a new type needs a rule


def record_properties(cls: type, *, only: tuple[str, ...] | None = None
                      ) -> tuple[dict[str, Any], list[str]]:
    """Properties and required names from a dataclass's or a named tuple's fields
    (required: no default)."""
    hints = typing.get_type_hints(cls)
    if dataclasses.is_dataclass(cls):
        fields = [(f.name, f.default is dataclasses.MISSING
                   and f.default_factory is dataclasses.MISSING)
                  for f in dataclasses.fields(cls)]
    else:  # a NamedTuple
        fields = [(name, name not in cls._field_defaults) for name in cls._fields]  # type: ignore[attr-defined]
    props: dict[str, Any] = {}
    required: list[str] = []
    for name, needed in fields:
        if only is not None and name not in only:
            continue
        props[name] = _type_schema(hints[name])
        if needed:
            required.append(name)
    return props, required


def _object(props: dict[str, Any], required: list[str], **extra: Any) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": required, **extra}


def _refine(props: dict[str, Any]) -> dict[str, Any]:
    """Tighten generated field schemas with the constraints the parsers apply."""
    rules: dict[str, dict[str, Any]] = {
        "epoch": {"pattern": EPOCH_PATTERN},
        "attempt": {"minimum": 1},
        "namespace": {"minLength": 1},
        "timeout_s": {"exclusiveMinimum": 0},
        "size": {"minimum": 0},
        "checksum": {"pattern": CHECKSUM_PATTERN},
    }
    return {name: {**schema, **rules.get(name, {})} for name, schema in props.items()}


def _txn_ref() -> dict[str, Any]:
    props, required = record_properties(Transaction,
                                        only=("namespace", "target", "epoch", "attempt"))
    return _object(_refine(props), required)


def _totals() -> dict[str, Any]:
    props, required = record_properties(Totals)
    return _object({k: {**v, "minimum": 0} if v.get("type") == "integer" else v
                    for k, v in props.items()}, required)


def _file_entry(path_key: str = "path") -> dict[str, Any]:
    props, required = record_properties(FileEntry)
    props = _refine(props)
    props["rows"] = {**props["rows"], "minimum": 0}
    props[path_key] = {"type": "string", "minLength": 1}
    return _object(props, required)


def _document(name: str, title: str, description: str, body: dict[str, Any]
              ) -> dict[str, Any]:
    return {"$schema": DIALECT, "$id": f"{ID_BASE}{name}.schema.json", "title": title,
            "description": description, **body}


def _const_format(fmt: str, version: int) -> dict[str, Any]:
    return {"format": {"const": fmt}, "version": {"const": version}}


def _group_member(nullable: bool = False) -> dict[str, Any]:
    """A member record's ``group``: ``{"uri": the group's folder, "member": its name}``."""
    return {"type": ["object", "null"] if nullable else "object", "required": ["uri", "member"],
            "properties": {"uri": {"type": "string", "minLength": 1},
                           "member": {"type": "string", "pattern": MEMBER_PATTERN}}}


def _by_member(schema: dict[str, Any]) -> dict[str, Any]:
    """An object from member name to ``schema`` (at least one member)."""
    return {"type": "object", "minProperties": 1,
            "propertyNames": {"pattern": MEMBER_PATTERN}, "additionalProperties": schema}
