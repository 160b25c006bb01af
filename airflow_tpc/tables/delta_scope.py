"""An epoch of an existing Delta table partitioned its own way (``replace_where``, or
an append): which files a commit removes or rewrites, and the partition each staged
file is added to.

Delta names a data file's partition in the log (``partitionValues``), one value per
partition column, so a predicate over partition columns selects whole files exactly.
A predicate over data columns (``ts >= '…' AND ts < '…'``) is Delta's ``replaceWhere``
on data columns: each file of the table is classified by what is known of it —
its partition values and the log's statistics, then (if those cannot tell) its own
Parquet footer, then its rows — as wholly inside the predicate (removed), wholly
outside (kept) or mixed (rewritten without the predicate's rows:
:mod:`.delta_rewrite`).  Every staged row must lie inside the predicate, proven from
the staged file's footer statistics.  All of it is one Delta commit.

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

from .scope import Scope, nan_note, proves
from .staged import column_statistics

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
        from .iceberg_schema import iceberg_schema_of

        # Fresh field ids (public pyiceberg API only): binding the predicate resolves
        # each column to its own field.
        self._ice = iceberg_schema_of(self.schema)
        self._bound = None
        self._outside = None
        self._equal: dict[str, Any] = {}
        #: The predicate's columns that are not partition columns (read from files).
        self.data_columns: list[str] = []
        for name in self.partition_columns:
            typ = str(self.schema.field(name).type)
            if typ not in _TEXT_TYPES:
                self.problems.append(f"partition column {name!r} is {typ}: airflow-tpc adds "
                                     "files to Delta partitions of strings, integers, booleans "
                                     "and dates only")
        if self.scope.kind != "where":
            return
        from pyiceberg.expressions import Not
        from pyiceberg.expressions.visitors import bind, rewrite_not

        expr = self.scope.expression()
        self.data_columns = sorted(_columns(expr) - set(self.partition_columns))
        try:
            self._bound = bind(self._ice, expr, case_sensitive=True)
            self._outside = bind(self._ice, rewrite_not(Not(expr)), case_sensitive=True)
        except Exception as exc:  # a column the table lacks, a literal of another type
            self._bound = None
            self.problems.append(f"replace_where {self.scope.where!r} does not fit the "
                                 f"table's schema: {exc}")
            return
        self._equal = _equalities(expr)

    # -- what is known of a file: its partition values and column bounds -----------
    def evidence(self, rows: int, values: dict[str, Any],
                 bounds: dict[str, tuple[Any, Any, int | None]] | None = None
                 ) -> dict[str, Any]:
        """Statistics :func:`proves` reads: each partition column's one value, and each
        data column's ``(lower, upper, nulls)`` (None where unknown), as the predicate's
        internal values (a value that will not convert counts as unknown)."""
        stats: dict[str, Any] = {"rows": rows, "lower": {}, "upper": {}, "nulls": {}}
        for name in self.partition_columns:
            fid = self._ice.find_field(name).field_id
            internal = self._internal(name, values.get(name))
            stats["lower"][fid] = stats["upper"][fid] = internal
            stats["nulls"][fid] = rows if internal is None else 0
        for name, (lo, hi, nulls) in (bounds or {}).items():
            fid = self._ice.find_field(name).field_id
            stats["lower"][fid] = self._internal(name, lo)
            stats["upper"][fid] = self._internal(name, hi)
            stats["nulls"][fid] = nulls
        return stats

    def classify(self, rows: int, values: dict[str, Any],
                 bounds: dict[str, tuple[Any, Any, int | None]] | None = None) -> str:
        """``"inside"`` (every row satisfies the predicate: remove the file),
        ``"outside"`` (no row does: keep it) or ``"unknown"`` (what is known cannot tell)."""
        if self._bound is None or self._outside is None:
            return "outside"
        stats = self.evidence(rows, values, bounds)
        if proves(self._bound, stats):
            return "inside"
        if proves(self._outside, stats):
            return "outside"
        return "unknown"

    def footer_bounds(self, md: Any) -> dict[str, tuple[Any, Any, int | None]]:
        """The data columns' bounds over a Parquet footer's row groups (unknown where a
        row group keeps no statistics)."""
        out: dict[str, tuple[Any, Any, int | None]] = {}
        names = md.schema.to_arrow_schema().names
        for name in self.data_columns:
            if name not in names:
                out[name] = (None, None, md.num_rows)  # a column the file lacks: all null
                continue
            lo = hi = None
            nulls: int | None = 0
            for rows, stats in column_statistics(md, name):
                if stats is None or nulls is None:
                    lo = hi = nulls = None
                    break
                nulls += stats.null_count
                if stats.null_count == rows:
                    continue
                if not stats.has_min_max:
                    lo = hi = nulls = None
                    break
                lo = stats.min if lo is None else min(lo, stats.min)
                hi = stats.max if hi is None else max(hi, stats.max)
            out[name] = (lo, hi, nulls)
        return out

    def keep_filter(self) -> Any:
        """The rows a rewrite keeps, as a pyarrow expression: those for which the
        predicate is not true (false or null — SQL's ``DELETE WHERE`` keeps a row whose
        predicate is null)."""
        from pyiceberg.io.pyarrow import expression_to_pyarrow

        assert self._bound is not None
        selected = expression_to_pyarrow(self._bound)
        return ~selected | selected.is_null()

    def partition_type(self, name: str) -> Any:
        return self.schema.field(name).type

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
        if self.scope.kind == "where" and self._bound is not None and not proves(
                self._bound, self.evidence(md.num_rows, values, self.footer_bounds(md))):
            where = f"partition {values}" if not self.data_columns else \
                f"partition {values}, or its statistics of {', '.join(self.data_columns)},"
            return None, (f"{uri} lies in {where} outside replace_where "
                          f"{self.scope.where!r} (it holds rows of another epoch, or "
                          f"keeps no bounds to prove otherwise{nan_note(self._bound)})")
        return values, None

    def _internal(self, name: str, value: Any) -> Any:
        """A value as the predicate compares it (None: null or not convertible)."""
        from pyiceberg.expressions.literals import literal

        if value is None:
            return None
        field_type = self._ice.find_field(name).field_type
        try:
            return literal(partition_text(value)).to(field_type).value
        except Exception:  # a type the predicate's literals do not convert to: unknown
            return None


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
