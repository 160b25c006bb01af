"""Which rows of a table one epoch owns: the commit's *scope*.

An existing production table is partitioned its own way — ``days(event_ts)``,
``bucket(16, id)``, or not at all — and has no ``epoch`` column.  So an epoch is a
predicate over the table's rows, the way Delta's ``replaceWhere`` and Iceberg's
overwrite-by-filter say it:

``epoch`` (the default)
    The table is partitioned by ``identity(epoch)`` and every staged file carries a
    string ``epoch`` column holding the epoch's name; a commit replaces the partition.
``where`` (``replace_where="event_date = '2026-11-20'"``, or a mapping
``{"event_date": "2026-11-20"}``)
    A commit replaces exactly the rows the predicate selects (rows of a file that lie
    outside it are kept, the file rewritten: Iceberg's overwrite by filter, Delta's
    ``replaceWhere``, :mod:`.delta_rewrite`); every staged row must satisfy
    the predicate, proven from the staged files' footer statistics at pre-commit.
``append`` (``mode="append"``)
    A commit adds the staged files and removes nothing.  Idempotent by transaction:
    the table's history names each commit's manifest digest, so a roll-forward never
    adds the same files twice; a new attempt of an epoch appends again.

``add_columns=True`` (any scope) lets a commit add the staged files' columns the table
lacks (nullable, by name: Iceberg's ``union_by_name``) in the same catalog commit;
without it a column the table lacks is refused, naming it.

The scope a commit applies is the one its **decision record** names (rendered
once, by the committing process), so a roll-forward by ``recover`` in any later run
replaces exactly what was decided, whatever that run's own ``replace_where`` says.
Predicates are parsed by pyiceberg's expression parser: comparisons (``=``, ``!=``,
``<``, ``<=``, ``>``, ``>=``), ``IN``, ``BETWEEN``, ``IS [NOT] NULL``, ``AND``,
``OR``, ``NOT``; literals in SQL syntax (``'text'``, ``42``, ``'2026-11-20'`` for a
date column).
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import TpcError

#: A write mode as users name it (operators: ``write_mode``; core: ``mode``).
WRITE_MODES = ("replace", "append")
_COLUMN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


@dataclass(frozen=True)
class Scope:
    """What one epoch's commit replaces: ``kind`` ``epoch``, ``where`` or ``append``;
    ``where`` holds the predicate's text for kind ``where``; ``add_columns``: the commit
    may add the staged files' new columns to the table."""

    kind: str = "epoch"
    where: str = ""
    add_columns: bool = False

    @classmethod
    def of(cls, replace_where: str | Mapping[str, Any] | None = None,
           mode: str = "replace", add_columns: bool = False) -> Scope:
        """The scope a user declared (one clear error for anything else)."""
        if mode not in WRITE_MODES:
            raise TpcError(f"unknown write mode {mode!r}: use one of {', '.join(WRITE_MODES)}")
        if not isinstance(add_columns, bool):
            raise TpcError(f"add_columns must be True or False, not {add_columns!r}")
        if mode == "append":
            if replace_where is not None:
                raise TpcError("mode='append' never replaces rows: do not give replace_where")
            return cls("append", add_columns=add_columns)
        if replace_where is None:
            return cls(add_columns=add_columns)
        text = _mapping_predicate(replace_where) if isinstance(replace_where, Mapping) \
            else replace_where
        if not isinstance(text, str) or not text.strip():
            raise TpcError(f"replace_where must be a non-empty predicate or a column mapping, "
                           f"not {replace_where!r} (a template that rendered empty?)")
        scope = cls("where", text.strip(), add_columns)
        scope.expression()  # refused now, not at commit
        return scope

    @classmethod
    def from_doc(cls, doc: dict[str, Any] | None) -> Scope:
        """The scope a decision record names (None: the epoch layout)."""
        if doc is None:
            return cls()
        kind, add = doc.get("kind"), doc.get("add_columns", False) is True
        if kind == "epoch":
            return cls(add_columns=add)
        if kind == "append":
            return cls("append", add_columns=add)
        if kind == "where" and isinstance(doc.get("where"), str) and doc["where"].strip():
            return cls.of(doc["where"], add_columns=add)
        raise TpcError(f"a commit decision names an unknown scope {doc!r}; it was written by a "
                       "newer airflow-tpc, or edited by hand")

    def to_doc(self) -> dict[str, Any] | None:
        """For the decision record (None for the epoch layout: records stay as before)."""
        if self.kind == "epoch" and not self.add_columns:
            return None
        return {"kind": self.kind, **({"where": self.where} if self.kind == "where" else {}),
                **({"add_columns": True} if self.add_columns else {})}

    def expression(self) -> Any:
        """The predicate as a pyiceberg expression (unbound)."""
        from pyiceberg.expressions.parser import parse

        try:
            return parse(self.where)
        except Exception as exc:  # pyparsing's error: one line of ours instead
            raise TpcError(f"replace_where {self.where!r} is not a predicate airflow-tpc can "
                           f"read ({type(exc).__name__}: {exc}); write e.g. "
                           "\"event_date = '2026-11-20'\" or \"ts >= '2026-11-20T00:00:00' "
                           "AND ts < '2026-11-21T00:00:00'\"") from None


def _mapping_predicate(mapping: Mapping[str, Any]) -> str:
    """``{"event_date": "2026-11-20", "region": "eu"}`` -> ``event_date = '2026-11-20'
    AND region = 'eu'`` (``None``: ``IS NULL``)."""
    if not mapping:
        raise TpcError("replace_where mapping is empty: name at least one column")
    parts = []
    for column, value in mapping.items():
        if not isinstance(column, str) or not _COLUMN.match(column):
            raise TpcError(f"replace_where column {column!r} is not a plain column name")
        parts.append(f"{column} IS NULL" if value is None else f"{column} = {_literal(value)}")
    return " AND ".join(parts)


def _literal(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (dt.date, dt.datetime)):
        value = value.isoformat()
    if isinstance(value, str):
        if "'" in value:
            raise TpcError(f"replace_where value {value!r} holds a quote; write the predicate "
                           "as a string instead of a mapping")
        return f"'{value}'"
    raise TpcError(f"replace_where value {value!r} is not a string, number, date or None")


def proves(expr: Any, stats: Mapping[str, Any]) -> bool:
    """Whether a file's statistics prove that *every* row satisfies the bound predicate
    ``expr``.  ``stats``: ``rows``, and per field id ``lower``/``upper`` (the format's
    internal values, e.g. days for a date), ``nulls`` and (optional) ``nans``.
    Conservative: False whenever the statistics cannot prove it (a missing bound, a
    truncated string bound, a float column whose NaN count is not known to be 0), so a
    staged file is refused rather than published partly outside its epoch, and a
    table's file is never taken as wholly inside a predicate some row of it fails."""
    from pyiceberg.expressions import (
        AlwaysTrue,
        And,
        BoundEqualTo,
        BoundGreaterThan,
        BoundGreaterThanOrEqual,
        BoundIn,
        BoundIsNull,
        BoundLessThan,
        BoundLessThanOrEqual,
        BoundNotEqualTo,
        BoundNotNull,
        Or,
    )
    from pyiceberg.types import DoubleType, FloatType

    if stats["rows"] == 0 or isinstance(expr, AlwaysTrue):
        return True
    if isinstance(expr, And):
        return proves(expr.left, stats) and proves(expr.right, stats)
    if isinstance(expr, Or):  # sufficient, not necessary: conservative
        return proves(expr.left, stats) or proves(expr.right, stats)
    term = getattr(expr, "term", None)
    if term is None:
        return False  # NOT and anything else: not provable from bounds
    fid = term.ref().field.field_id
    lo, hi = stats["lower"].get(fid), stats["upper"].get(fid)
    nulls = stats["nulls"].get(fid)
    if isinstance(expr, BoundIsNull):
        return nulls == stats["rows"]
    if nulls != 0 or lo is None or hi is None:
        return False
    if isinstance(expr, BoundNotNull):
        return True
    if isinstance(term.ref().field.field_type, (FloatType, DoubleType)) \
            and stats.get("nans", {}).get(fid) != 0:
        # Parquet's min/max skip NaN, and engines disagree on which comparisons select
        # a NaN row (IEEE: none; Spark: NaN is the largest value): bounds prove nothing
        # while one may hide behind them.  Only a NaN count of 0 (Iceberg's) settles it.
        return False
    if isinstance(expr, BoundIn):
        return lo == hi and lo in {lit.value for lit in expr.literals}
    value = expr.literal.value
    checks = {BoundEqualTo: lambda: lo == hi == value,
              BoundNotEqualTo: lambda: hi < value or lo > value,
              BoundLessThan: lambda: hi < value, BoundLessThanOrEqual: lambda: hi <= value,
              BoundGreaterThan: lambda: lo > value,
              BoundGreaterThanOrEqual: lambda: lo >= value}
    for kind, check in checks.items():
        if isinstance(expr, kind):
            return bool(check())
    return False


def nan_note(expr: Any) -> str:
    """For a refusal: the floating-point columns a bound predicate compares, whose
    footer bounds skip NaN (:func:`proves` never takes them as proof); "" if none."""
    from pyiceberg.types import DoubleType, FloatType

    names: set[str] = set()

    def walk(node: Any) -> None:
        for child in ("left", "right", "child"):
            if getattr(node, child, None) is not None:
                walk(getattr(node, child))
        term = getattr(node, "term", None)
        if term is not None and isinstance(term.ref().field.field_type,
                                           (FloatType, DoubleType)):
            names.add(term.ref().field.name)

    walk(expr)
    if not names:
        return ""
    return (f"; {', '.join(sorted(names))} is a floating-point column: Parquet's bounds "
            "skip NaN, so they never prove a comparison of it (compare a column of "
            "another type)")
