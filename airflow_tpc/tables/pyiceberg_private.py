"""Every call airflow-tpc makes into pyiceberg's private API, in one place.

pyiceberg (0.12) has no public API for these three things; each wrapper says why and
what it relies on, and ``tests/tables/test_pyiceberg_private.py`` exercises each one's
real behaviour, so a pyiceberg upgrade that renames or changes one fails there, by name,
rather than somewhere in a commit.  Everything else goes through public API
(:mod:`airflow_tpc.tables.iceberg_schema` replaced the schema conversions that were
private); Delta depends on nothing here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa


def check_arrow_schema_compatible(table_schema: Any, file_schema: pa.Schema,
                                  format_version: int) -> None:
    """Raise ``ValueError`` (pyiceberg's message: a table of the mismatches) unless a
    staged file's Arrow schema can be added to a table of ``table_schema`` as it is —
    equal Iceberg types, or ones Iceberg promotes (``int`` → ``long``), nullability fitting.

    Private (``pyiceberg.io.pyarrow._check_pyarrow_schema_compatible``): it is the very
    check ``Transaction.add_files`` and ``append`` run, and the only public way to run it
    is to attempt that write.  We must run it before the commit decision, on footers
    alone, so a file the table would refuse is refused before anything is decided."""
    from pyiceberg.io.pyarrow import _check_pyarrow_schema_compatible

    _check_pyarrow_schema_compatible(table_schema, file_schema,
                                     format_version=format_version)


def assert_unchanged(tx: Any, requirements: Sequence[Any]) -> None:
    """Add table requirements (``AssertCurrentSchemaId``, ``AssertDefaultSpecId``...) to a
    pyiceberg ``Transaction``: the catalog then refuses its commit if the table changed
    in those respects since the transaction read it.

    Private (``Transaction._apply(updates, requirements)``): pyiceberg's public updates
    each add only their own requirements, and an append asserts no schema or spec; a
    commit checked against a schema must fail if a concurrent one changed it."""
    tx._apply((), tuple(requirements))


def rest_session(catalog: Any) -> Any:
    """The authenticated HTTP session (``requests.Session``, its auth headers and TLS
    set) of a pyiceberg ``RestCatalog``.

    Private (``RestCatalog._session``): the REST spec's multi-table commit
    (``POST /v1/{prefix}/transactions/commit``) has no client call in pyiceberg, and it
    must be sent with the catalog's own credentials (OAuth token refresh, SigV4,
    headers) rather than a second, hand-built session."""
    return catalog._session
