"""Issue 32 §3: a surviving mutant of ``tables/iceberg_partitions.py``, killed.

A ``bucket`` spec's partition is computed from a staged file's values.  A file of one
row was never staged by the tests (each bucket's file held several), so
``partitions_from_data`` taking a **one**-row file for an empty one (``num_rows == 0``
→ ``== 1``, ``__mutmut_13``) survived: that file's row would be added without its
partition.  Real pyiceberg on its SQL catalog; the table read back by pyiceberg and by
DuckDB's own reader (``ids``).  (Outside mutmut's test selection: see
docs/mutation.md, "Run of the group modules".)
"""

from __future__ import annotations

import pytest
from pyiceberg.transforms import BucketTransform
from pyiceberg.types import LongType

from .conftest import commit_epoch as commit
from .test_iceberg_scope import day, events, foreign, ids, scoped  # noqa: F401 (fixtures)


@pytest.mark.parametrize("catalog_props", ["sql"], indirect=True)
def test_a_one_row_file_lands_in_its_bucket(catalog_props, foreign, scoped):  # noqa: F811
    foreign("bucket", events(19, [1, 2, 3]))
    commit(scoped(replace_where=day(20)), "2026-11-20", {"one.parquet": events(20, [10])})
    table = scoped().table_target.load_table()
    assert ids(table) == [1, 2, 3, 10]
    added = [row for row in table.inspect.files().to_pylist()
             if row["file_path"].endswith("one.parquet")]
    assert [row["partition"] for row in added] == [
        {"id_bucket": BucketTransform(4).transform(LongType())(10)}]


@pytest.mark.parametrize("catalog_props", ["sql"], indirect=True)
def test_a_file_spanning_buckets_is_refused_with_what_to_do(catalog_props, foreign,  # noqa: F811
                                                             scoped):  # noqa: F811
    from airflow_tpc.tables import TableSchemaError

    from ..core.helpers import full_tree
    from .conftest import write_parquet

    foreign("bucket", events(19, [1, 2, 3]))
    sink = scoped(replace_where=day(20))
    txn = sink.begin("2026-11-20")
    write_parquet(sink, txn, "mixed.parquet", events(20, list(range(40, 50))))
    before = full_tree(sink)
    with pytest.raises(TableSchemaError, match=r"mixed.parquet does not lie in one partition "
                                               r"of the table's spec: its rows fall into 4 "
                                               r"partitions of id_bucket \(bucket\[4\]\); "
                                               r"write one file per partition \(Spark: "
                                               r"repartition by the partition columns\)"):
        sink.precommit(txn)
    assert full_tree(sink) == before
