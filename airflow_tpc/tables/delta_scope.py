"""An epoch of an existing Delta table partitioned its own way (``replace_where`` over
its partition columns, or an append): which files a commit removes, and the partition
each staged file is added to.

Delta names a data file's partition in the log (``partitionValues``), one value per
partition column, so a predicate over partition columns selects whole files exactly:
a commit removes the files whose partition satisfies it and adds the staged files,
each of whose partition must satisfy it — Delta's ``replaceWhere`` on partition
columns, in one Delta commit.  A predicate over other columns would need files
rewritten (a file can hold rows inside and outside it): refused, with that reason.

A staged file's partition values come from its own column (every row the same value,
from the footer's statistics) or, for a column the file does not hold (Spark's
``partitionBy`` leaves it out), from an equality of the predicate (``day =
'2026-11-20'``).  Values are compared as Iceberg's expression library does (the
predicate is parsed and bound by pyiceberg, the partition strings converted to the
column's type), so ``'2026-11-20'`` means the same date on both sides.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .base import column_statistics
from .scope import Scope, proves

#: Partition column types whose Delta string form is the value's ISO/decimal text.
_TEXT_TYPES = ("string", "large_string", "int8", "int16", "int32", "int64", "date32[day]",
               "bool")


@dataclass
class DeltaScope:
    """A scope (:class:`Scope`) bound to a Delta table's schema and partition columns."""

    scope: Scope
    schema: Any  # the table's pyarrow schema
    partition_columns: list[str]
    problems: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        from pyiceberg.catalog import Catalog

        self._ice = Catalog._convert_schema_if_needed(self.schema)
        self._bound = None
        self._equal: dict[str, Any] = {}
        for name in self.partition_columns:
            typ = str(self.schema.field(name).type)
            if typ not in _TEXT_TYPES:
                self.problems.append(f"partition column {name!r} is {typ}: airflow-tpc adds "
                                     "files to Delta partitions of strings, integers, booleans "
                                     "and dates only")
        if self.scope.kind != "where":
            return
        from pyiceberg.expressions.visitors import bind

        expr = self.scope.expression()
        named = _columns(expr)
        others = sorted(named - set(self.partition_columns))
        if others:
            self.problems.append(
                f"replace_where {self.scope.where!r} names {', '.join(others)}, which "
                f"{'is' if len(others) == 1 else 'are'} not partition columns of the table "
                f"(partitioned by {self.partition_columns or 'nothing'}): in a Delta table "
                "airflow-tpc replaces whole files, which only a predicate over partition "
                "columns selects exactly")
            return
        try:
            self._bound = bind(self._ice, expr, case_sensitive=True)
        except Exception as exc:  # a column of another type than the literal
            self.problems.append(f"replace_where {self.scope.where!r} does not fit the "
                                 f"table's schema: {exc}")
            return
        self._equal = _equalities(expr)

    def selects(self, values: dict[str, Any]) -> bool:
        """Whether a file of this partition (``{column: value}``, typed or strings) lies
        inside the predicate (always False for an append)."""
        if self._bound is None:
            return False
        stats: dict[str, Any] = {"rows": 1, "lower": {}, "upper": {}, "nulls": {}}
        for name in self.partition_columns:
            fid = self._ice.find_field(name).field_id
            internal = self._internal(name, values.get(name))
            stats["lower"][fid] = stats["upper"][fid] = internal
            stats["nulls"][fid] = 1 if internal is None else 0
        return proves(self._bound, stats)

    def partition_of(self, uri: str, md: Any, file_schema: Any
                     ) -> tuple[dict[str, str | None] | None, str | None]:
        """The Delta ``partitionValues`` of a staged file, or the problem that it has none
        (its column holds more than one value, or it has no column and no equality of
        the predicate fixes it, or it lies outside the predicate)."""
        values: dict[str, str | None] = {}
        for name in self.partition_columns:
            if name in file_schema.names:
                value, problem = _single_value(uri, md, name)
                if problem:
                    return None, problem
                values[name] = None if value is None else partition_text(value)
            elif name in self._equal:
                values[name] = partition_text(self._equal[name])
            else:
                return None, (f"{uri} has no column {name!r} (a partition column of the "
                              "table) and replace_where does not fix it with an equality: "
                              "write the column, or name its value in replace_where")
        if self.scope.kind == "where" and not self.selects(values):
            return None, (f"{uri} lies in partition {values}, outside replace_where "
                          f"{self.scope.where!r}")
        return values, None

    def _internal(self, name: str, value: Any) -> Any:
        from pyiceberg.expressions.literals import literal

        if value is None:
            return None
        field_type = self._ice.find_field(name).field_type
        return literal(partition_text(value)).to(field_type).value


def partition_text(value: Any) -> str:
    """A partition value as Delta writes it in ``partitionValues``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    iso = getattr(value, "isoformat", None)
    return iso() if iso is not None else str(value)


def _columns(expr: Any) -> set[str]:
    """The column names an unbound pyiceberg expression refers to."""
    out: set[str] = set()
    for child in ("left", "right", "child"):
        sub = getattr(expr, child, None)
        if sub is not None:
            out |= _columns(sub)
    term = getattr(expr, "term", None)
    if term is not None:
        out.add(term.name)
    return out


def _equalities(expr: Any) -> dict[str, Any]:
    """``column -> value`` for the equalities a conjunction pins (``a = 1 AND b = 'x'``)."""
    from pyiceberg.expressions import And, EqualTo

    if isinstance(expr, And):
        return {**_equalities(expr.left), **_equalities(expr.right)}
    if isinstance(expr, EqualTo):
        return {expr.term.name: expr.literal.value}
    return {}


def _single_value(uri: str, md: Any, name: str) -> tuple[Any, str | None]:
    """The one value column ``name`` holds in every row (footer statistics), else why not."""
    seen: set[Any] = set()
    for rows, stats in column_statistics(md, name):
        if stats is None or (not stats.has_min_max and stats.null_count != rows):
            return None, f"{uri}: column {name!r} has no statistics to take its partition from"
        if stats.null_count == rows:
            seen.add(None)
        elif stats.null_count or stats.min != stats.max:
            return None, (f"{uri} holds several values of partition column {name!r}: write "
                          "one file per partition (Spark: partitionBy or repartition)")
        else:
            seen.add(stats.min)
    if len(seen) > 1:
        return None, (f"{uri} holds several values of partition column {name!r}: write one "
                      "file per partition")
    return next(iter(seen), None), None
