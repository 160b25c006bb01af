"""The Microsoft Azure provider's ``wasb`` and ``adls`` connections as ``storage_conn_id``
of an Azure target (on Azurite): the options they give, the secret masked and kept out of
the public options (XCom, the Spark conf) and of the job's payload, and a commit through
the hook with them."""

from __future__ import annotations

import json

import pytest

from airflow_tpc import TxnState


def _conn(monkeypatch, conn_id: str, **fields) -> None:
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(fields))


def _commit_through_hook(hook, epoch: str) -> None:
    sink = hook.get_sink()
    txn = sink.begin(epoch)
    sink.storage.put(f"{txn.staging_uri.split('://', 1)[1]}/part-0.parquet", b"x" * 10)
    sink.precommit(txn)
    check = hook.check_precommit(txn.to_dict())
    assert check.status == "ready", check.message
    assert hook.commit_pointer(hook.precommit_pointer(check)).result.outcome == "committed"


@pytest.mark.parametrize("shape", ["wasb-key", "wasb-shared-key", "wasb-connection-string",
                                   "adls-connection-string"])
def test_azure_connections_reach_the_store_and_leak_nothing(azurite, monkeypatch, shape):
    from airflow.sdk._shared.secrets_masker import redact

    from airflow_tpc.airflow.hooks.tpc import TpcHook

    key = azurite.options()["account_key"]
    if shape == "wasb-key":
        _conn(monkeypatch, "lake_az", conn_type="wasb", host=azurite.endpoint,
              login="devstoreaccount1", password=key)
        secret = key
    elif shape == "wasb-shared-key":
        _conn(monkeypatch, "lake_az", conn_type="wasb", host=azurite.endpoint,
              login="devstoreaccount1", extra={"shared_access_key": key})
        secret = key
    else:
        secret = azurite.connection_string()
        _conn(monkeypatch, "lake_az", conn_type=shape.split("-")[0],
              extra={"connection_string": secret})
    target = f"{azurite.new_prefix()}/t"
    hook = TpcHook(target, "az_conn", storage_conn_id="lake_az")
    opts = hook.storage_options()
    assert secret in opts.values()
    public = hook.job_public_options()
    assert secret not in json.dumps(public) and key not in json.dumps(public)
    assert redact(f"the secret is {secret}") != f"the secret is {secret}"  # masked
    env = hook.job_env()
    assert secret in env.values() and set(env) <= {
        "AZURE_STORAGE_ACCOUNT_NAME", "AZURE_STORAGE_ACCOUNT_KEY",
        "AZURE_STORAGE_CONNECTION_STRING"}
    _commit_through_hook(hook, "2026-09-01")
    [info] = hook.get_sink().describe("2026-09-01")
    assert info.state is TxnState.COMMITTED and info.published
    assert key not in repr(hook.get_sink().storage)


def test_a_sas_url_in_a_wasb_connection_is_refused(monkeypatch, azurite):
    from airflow_tpc.airflow.hooks.tpc import TpcHook

    _conn(monkeypatch, "lake_sas", conn_type="wasb", login="devstoreaccount1",
          extra={"sas_token": "https://acct.blob.core.windows.net/?sv=1&sig=SECRETSIG"})
    hook = TpcHook(f"{azurite.new_prefix()}/t", "az_sas", storage_conn_id="lake_sas")
    with pytest.raises(ValueError, match="sas_token is a URL") as err:
        hook.get_sink()
    assert "SECRETSIG" not in str(err.value)


def test_operator_arguments_take_the_account_name_but_no_key():
    from airflow_tpc.airflow.hooks.credentials import check_public

    assert check_public({"account_name": "acct", "endpoint_url": "https://acct.blob.x"},
                        "op") == {"account_name": "acct", "endpoint_url": "https://acct.blob.x"}
    with pytest.raises(ValueError, match="look like credentials"):
        check_public({"account_key": "k"}, "op")


def test_an_azure_key_put_in_the_spark_conf_is_refused_and_the_attempt_aborted(
        airflow_db, azurite, tmp_path, monkeypatch):
    """The job's AZURE_STORAGE_* values count as secrets for the command-line check, as
    AWS_SECRET_ACCESS_KEY does: spark-submit never runs, the attempt is aborted."""
    from airflow_tpc import Sink
    from airflow_tpc.airflow import StagedSparkSubmitOperator
    from airflow_tpc.airflow.operators.tpc import SecretOnCommandLine

    from .test_secrets import _TI, _spark_conn

    key = azurite.options()["account_key"]
    _conn(monkeypatch, "lake_az", conn_type="wasb", host=azurite.endpoint,
          login="devstoreaccount1", password=key)
    target = f"{azurite.new_prefix()}/t"
    op = StagedSparkSubmitOperator(
        task_id="submit", application="/jobs/job.py", target=target, namespace="az_secret",
        epoch="2026-06-01", conn_id=_spark_conn(monkeypatch, "yarn", "client"),
        storage_conn_id="lake_az", ship_package=False,
        conf={"spark.hadoop.fs.azure.account.key.devstoreaccount1": key})
    with pytest.raises(SecretOnCommandLine) as info:
        op.execute({"ti": _TI()})
    assert key not in str(info.value)
    [txn] = Sink(target, "az_secret", storage_options=azurite.options()).describe("2026-06-01")
    assert txn.state is TxnState.ABORTED
