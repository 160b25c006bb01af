"""Spark's distributed ``read_committed`` of an Azure target (Azurite): the ``tpc`` data
source's reader on the executors gets the store's public options (endpoint, account
name) as reader options and never a secret.  (The end-to-end read of the rows is not
here yet: docs/storage.md says why.)

"""

from __future__ import annotations

import pytest

from airflow_tpc import TpcError
from airflow_tpc.spark import read_committed
from airflow_tpc.spark.datasource import TpcDataSource

from .conftest import EXECUTOR_AZURE_ENV


@pytest.fixture(params=["az", "abfss"])
def azure_target(request, azurite, monkeypatch):
    """(target, the driver's full options, the public ones), in both spellings of an Azure
    target; the driver's environment holds the key as the executors' does (a job's driver
    lists the markers with it)."""
    assert "AZURE_STORAGE_ACCOUNT_NAME" not in EXECUTOR_AZURE_ENV
    monkeypatch.delenv("AZURE_STORAGE_ACCOUNT_NAME", raising=False)
    monkeypatch.delenv("AZURE_STORAGE_CONNECTION_STRING", raising=False)
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_KEY", azurite.options()["account_key"])
    public = {"endpoint_url": azurite.endpoint, "account_name": "devstoreaccount1"}
    if request.param == "az":
        return f"{azurite.new_prefix()}/tables/events", azurite.options(), public
    target = (f"abfss://{azurite.new_container()}@devstoreaccount1.dfs.core.windows.net/"
              "tables/events")
    return target, azurite.options(), public


def test_secrets_are_refused_as_reader_options(spark, azure_target):
    target, options, public = azure_target
    key = options["account_key"]
    with pytest.raises(TpcError, match=r"\['account_key'\] cannot go to executors") as err:
        read_committed(spark, target, storage_options=options, distributed=True)
    assert key not in str(err.value) and "AZURE_STORAGE_ACCOUNT_KEY" in str(err.value)
    for secret in ("account_key", "sas_token", "connection_string", "client_secret",
                   "key", "secret"):
        with pytest.raises(TpcError, match="query plan") as err:
            TpcDataSource({"target": target, **public, secret: key}).schema()
        assert key not in str(err.value) and secret in str(err.value)


def test_an_azure_reader_takes_azures_public_options_not_s3s(spark, azure_target):
    """Which options may travel is the store's to say: ``region_name`` is S3's."""
    target, _, public = azure_target
    with pytest.raises(TpcError, match=r"\['region_name'\]"):
        TpcDataSource({"target": target, **public, "region_name": "us-east-1"}).schema()
    with pytest.raises(TpcError, match=r"\['account_name'\]"):
        TpcDataSource({"target": "s3://b/t", "account_name": "devstoreaccount1"}).schema()
