"""The ``iceberg_catalog`` connection type: how its fields become pyiceberg catalog
properties, and its one airflow-tpc field, ``tpc.ledger-root`` (extra).

Real Airflow ``Connection`` objects (the Task SDK's, as a task gets them); the hook is
given each one directly.  The whole path — a REST catalog, a table bucket, a DAG whose
ledger the connection places — runs in tests/airflow/test_rest_catalog.py.
"""

from __future__ import annotations

import json

import pytest
from airflow.sdk.definitions.connection import Connection

from airflow_tpc.airflow import TpcHook
from airflow_tpc.airflow.hooks.tpc import (
    LEDGER_ROOT_KEY,
    IcebergCatalogHook,
    catalog_properties_from_connection,
)


def _conn(**fields) -> Connection:
    extra = fields.pop("extra", None)
    return Connection(conn_id="cat", conn_type="iceberg_catalog",
                      extra=json.dumps(extra) if extra is not None else None, **fields)


def test_fields_map_to_pyiceberg_properties_and_the_ledger_root_is_not_one():
    conn = _conn(host="https://catalog.example.com", schema="s3://tables/", login="id",
                 password="pw", extra={"s3.endpoint": "https://s3.example.com",
                                       LEDGER_ROOT_KEY: "s3://lake/_tpc/"})
    assert catalog_properties_from_connection(conn) == {
        "uri": "https://catalog.example.com", "warehouse": "s3://tables/",
        "credential": "id:pw", "s3.endpoint": "https://s3.example.com"}
    assert IcebergCatalogHook(connection=conn).ledger_root() == "s3://lake/_tpc"


def test_an_operators_ledger_uri_wins_over_the_connections_root():
    conn = _conn(host="https://c", extra={LEDGER_ROOT_KEY: "s3://lake/ledgers"})
    hook = TpcHook("iceberg://prod/a.b.events", "ns", catalog_conn_id="cat",
                   catalog_connection=conn)
    assert hook.resolved_ledger_uri() == "s3://lake/ledgers/a.b.events"
    mine = TpcHook("iceberg://prod/a.b.events", "ns", catalog_conn_id="cat",
                   catalog_connection=conn, ledger_uri="s3://elsewhere/x")
    assert mine.resolved_ledger_uri() == "s3://elsewhere/x"
    without = TpcHook("iceberg://prod/a.events", "ns", catalog_conn_id="cat",
                      catalog_connection=_conn(host="https://c"))
    assert without.resolved_ledger_uri() is None


@pytest.mark.parametrize("root", ["lake/ledgers", 7, ["s3://a"]])
def test_a_ledger_root_that_is_no_folder_uri_is_one_clear_error(root):
    hook = TpcHook("iceberg://prod/a.events", "ns", catalog_conn_id="cat",
                   catalog_connection=_conn(host="https://c", extra={LEDGER_ROOT_KEY: root}))
    with pytest.raises(ValueError) as err:
        hook.resolved_ledger_uri()
    assert str(err.value) == (f"connection 'cat': {LEDGER_ROOT_KEY} must be a folder URI "
                              f"(scheme://bucket/prefix) or an absolute path, not {root!r}")


def test_a_login_without_password_or_for_a_catalog_without_one_is_refused():
    with pytest.raises(ValueError, match="a REST catalog's login needs a password"):
        catalog_properties_from_connection(_conn(host="https://c", login="id"))
    with pytest.raises(ValueError, match="login/password are used for REST"):
        catalog_properties_from_connection(_conn(host="sqlite:///c.db", login="u",
                                                 password="p", extra={"type": "sql"}))
    assert catalog_properties_from_connection(_conn(host="https://c", password="tok")) == {
        "uri": "https://c", "token": "tok"}
