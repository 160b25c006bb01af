"""Every guarantee the SQL and REST catalog suites prove, through the AWS Glue Data
Catalog: pyiceberg's own GlueCatalog on moto's Glue, the warehouse and the ledger on
moto's S3 (one endpoint, the session's server).

The scenarios are the shared ones of ``test_iceberg`` and ``test_iceberg_scope``,
collected again here with the catalog fixture pointing at Glue: crash at each step,
re-runs and time travel, fencing, schema refusals, ``replace_where`` scopes, gc (the
scenarios of those suites that a catalog could change; the rest touch only the ledger).
Left out on purpose: the races against a foreign writer (concurrent appends and schema
changes, racing committers).  moto's ``UpdateTable`` accepts a stale ``VersionId``
(measured: the second update with version 1 wins) where real Glue refuses it, so moto
cannot prove them; they stay proven on the SQL and REST catalogs (docs/tables.md).
"""

from __future__ import annotations

import pytest

from . import test_iceberg
from .glue import glue_props  # noqa: F401 (fixture)
from .test_iceberg import (  # noqa: F401 (collected again with the Glue catalog)
    test_commit_is_one_snapshot_read_once_by_pyarrow_and_duckdb,
    test_gc_keeps_files_any_retained_snapshot_references,
    test_rerun_with_changed_input_replaces_the_epoch_in_one_snapshot,
    test_schema_mismatch_is_refused_at_precommit_naming_columns,
    test_zombie_attempt_is_fenced,
)
from .test_iceberg_scope import (  # noqa: F401 (replace_where scopes, through Glue)
    foreign,
    scoped,
    test_a_days_partitioned_table_replaces_exactly_the_epochs_rows,
    test_bad_scopes_get_one_clear_error_before_anything_is_written,
)

#: The crash points where the catalog's state differs (decided but Glue not yet updated,
#: Glue updated but not yet recorded, staging left behind): the rest of COMMIT_STEPS touch
#: the ledger only (``commit.after_decision`` leaves Glue as ``before_table_commit`` does),
#: proven on every store already (moto's S3 included); CI time is the limit.
GLUE_STEPS = ["iceberg.before_table_commit", "iceberg.after_table_commit",
              "tables.before_remove_staging"]


@pytest.mark.parametrize("step", GLUE_STEPS)
def test_crash_at_each_catalog_step_then_recover_gives_one_snapshot(make_sink, step):
    test_iceberg.test_crash_during_commit_then_recover_gives_one_snapshot(make_sink, step)


@pytest.fixture()
def catalog_props(glue_props):  # noqa: F811 (this module's catalog is Glue)
    return glue_props


@pytest.fixture()
def sink_options(s3_options) -> dict:
    """The ledger is in the table's location on moto's S3: the sink needs the store."""
    return {"storage_options": s3_options}
