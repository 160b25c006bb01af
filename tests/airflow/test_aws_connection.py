"""S3 credentials from the Amazon provider's ``aws`` connection, against moto's server with
IAM authentication *enforced* (its own process on 127.0.0.1: every request is signed and
checked, and assumed-role keys are accepted only with their session token).

The user behind the connection may only assume a role; only the role may touch S3.  So a
run that commits proves that the hook and the Spark job both used the role's temporary
credentials, session token included; and none of those values (nor the user's secret) may
appear in logs, XCom, rendered fields, trigger rows or any process's command line.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from airflow_tpc import Sink, TxnState

from .helpers import day, states

pytestmark = pytest.mark.timeout(1200)

BUCKET = "tpc-aws"  # tests/airflow/dags/tpc_it_aws.py's default target bucket
REGION = "us-east-1"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _policy(action: str) -> str:
    return json.dumps({"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Action": action, "Resource": "*"}]})


@pytest.fixture(scope="module")
def iam_s3(tmp_path_factory):
    """moto_server with IAM auth on: a user who may only assume a role, the role (S3 only),
    a user with S3 rights and static keys, and the bucket."""
    import boto3
    import requests

    port = _free_port()
    log = tmp_path_factory.mktemp("moto") / "moto.log"
    proc = subprocess.Popen([str(Path(sys.executable).parent / "moto_server"), "-H", "127.0.0.1",
                             "-p", str(port)], stdout=open(log, "w"),  # noqa: SIM115
                            stderr=subprocess.STDOUT)
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while True:
        try:
            requests.get(f"{endpoint}/moto-api/", timeout=5)
            break
        except requests.ConnectionError:
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError(
                    f"moto_server did not start: {log.read_text()[-2000:]}") from None
            time.sleep(0.2)
    setup = {"endpoint_url": endpoint, "region_name": REGION,
             "aws_access_key_id": "setup", "aws_secret_access_key": "setup"}
    iam = boto3.client("iam", **setup)
    iam.create_user(UserName="assumer")
    assumer = iam.create_access_key(UserName="assumer")["AccessKey"]
    iam.put_user_policy(UserName="assumer", PolicyName="assume",
                        PolicyDocument=_policy("sts:AssumeRole"))
    role = iam.create_role(RoleName="tpc-writer", AssumeRolePolicyDocument=json.dumps({
        "Version": "2012-10-17", "Statement": [{
            "Effect": "Allow", "Action": "sts:AssumeRole",
            "Principal": {"AWS": iam.get_user(UserName="assumer")["User"]["Arn"]}}]}))["Role"]
    iam.put_role_policy(RoleName="tpc-writer", PolicyName="s3", PolicyDocument=_policy("s3:*"))
    iam.create_user(UserName="writer")
    writer = iam.create_access_key(UserName="writer")["AccessKey"]
    iam.put_user_policy(UserName="writer", PolicyName="s3", PolicyDocument=_policy("s3:*"))
    boto3.client("s3", **setup).create_bucket(Bucket=BUCKET)
    # From here on every request must be signed by a known key (moto's IAM auth).
    assert requests.post(f"{endpoint}/moto-api/reset-auth", data=b"0", timeout=30).ok
    yield {"endpoint": endpoint, "role_arn": role["Arn"],
           "assumer": (assumer["AccessKeyId"], assumer["SecretAccessKey"]),
           "writer": (writer["AccessKeyId"], writer["SecretAccessKey"])}
    proc.terminate()
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()


def issued_credentials(endpoint: str) -> list[tuple[str, str, str]]:
    """(access key, secret, session token) of every role session moto's STS issued."""
    import requests

    data = requests.get(f"{endpoint}/moto-api/data.json", timeout=30).json()
    return [(r["access_key_id"], r["secret_access_key"], r["session_token"])
            for r in data["sts"]["AssumedRole"]]


def _aws_conn(monkeypatch, conn_id: str, key: tuple[str, str], **extra) -> None:
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps({
        "conn_type": "aws", "login": key[0], "password": key[1],
        "extra": {"region_name": REGION, **extra}}))


def _commit_through_hook(hook, epoch: str) -> None:
    sink = hook.get_sink()
    txn = sink.begin(epoch)
    sink.storage.put(f"{txn.staging_uri.removeprefix('s3://')}/part-0.parquet", b"x" * 10)
    sink.precommit(txn)
    check = hook.check_precommit(txn.to_dict())
    assert check.status == "ready", check.message
    assert hook.commit_pointer(hook.precommit_pointer(check)).result.outcome == "committed"


def test_static_keys_of_an_aws_connection_reach_the_store(airflow_db, iam_s3, monkeypatch):
    from airflow_tpc.airflow.hooks.tpc import TpcHook
    from airflow_tpc.errors import StorageError

    endpoint = iam_s3["endpoint"]
    _aws_conn(monkeypatch, "tpc_aws_keys", iam_s3["writer"], endpoint_url=endpoint)
    hook = TpcHook(f"s3://{BUCKET}/keys", "aws_keys", storage_conn_id="tpc_aws_keys")
    assert hook.storage_options() == {
        "key": iam_s3["writer"][0], "secret": iam_s3["writer"][1], "region_name": REGION,
        "endpoint_url": endpoint}
    assert hook.job_public_options() == {"endpoint_url": endpoint, "region_name": REGION}
    _commit_through_hook(hook, "2026-09-01")
    [info] = hook.get_sink().describe("2026-09-01")
    assert info.state is TxnState.COMMITTED and info.published

    # control: the store really checks the keys (a wrong secret is refused, never shown)
    wrong = "tpc-not-the-secret-0000000000000000000"
    _aws_conn(monkeypatch, "tpc_aws_wrong", (iam_s3["writer"][0], wrong), endpoint_url=endpoint)
    bad = TpcHook(f"s3://{BUCKET}/keys", "aws_keys", storage_conn_id="tpc_aws_wrong")
    with pytest.raises(StorageError) as info:
        bad.get_sink().describe("2026-09-01")
    assert wrong not in str(info.value)


def test_a_role_that_cannot_be_assumed_is_one_clear_error(airflow_db, iam_s3, monkeypatch):
    from airflow_tpc.airflow.hooks.tpc import AwsConnectionError, TpcHook

    # "writer" may use S3 but not assume the role (nor is it trusted by the role)
    _aws_conn(monkeypatch, "tpc_aws_norole", iam_s3["writer"],
              endpoint_url=iam_s3["endpoint"], role_arn=iam_s3["role_arn"],
              service_config={"sts": {"endpoint_url": iam_s3["endpoint"]}})
    hook = TpcHook(f"s3://{BUCKET}/x", "n", storage_conn_id="tpc_aws_norole")
    with pytest.raises(AwsConnectionError, match="tpc_aws_norole.*could not get credentials") \
            as info:
        hook.get_sink()
    assert "AccessDenied" in str(info.value)
    assert iam_s3["writer"][1] not in str(info.value)
    assert "Traceback" not in str(info.value)


def test_without_the_amazon_provider_an_aws_connection_is_a_clear_error(
        airflow_db, iam_s3, monkeypatch):
    from airflow_tpc.airflow.hooks.tpc import AwsConnectionError, TpcHook

    _aws_conn(monkeypatch, "tpc_aws_noprov", iam_s3["writer"], endpoint_url=iam_s3["endpoint"])
    # the provider not installed: its module cannot be imported
    monkeypatch.setitem(sys.modules, "airflow.providers.amazon.aws.hooks.base_aws", None)
    hook = TpcHook(f"s3://{BUCKET}/x", "n", storage_conn_id="tpc_aws_noprov")
    with pytest.raises(AwsConnectionError, match=r"Amazon provider.*airflow-tpc\[amazon\]") \
            as info:
        hook.storage_options()
    assert iam_s3["writer"][1] not in str(info.value)
    with pytest.raises(AwsConnectionError):
        hook.job_env()
    # the generic connection needs no provider
    monkeypatch.setenv("AIRFLOW_CONN_TPC_GENERIC_NOPROV", json.dumps({
        "conn_type": "generic", "login": "k", "password": "s",
        "extra": {"endpoint_url": iam_s3["endpoint"]}}))
    generic = TpcHook(f"s3://{BUCKET}/x", "n", storage_conn_id="tpc_generic_noprov")
    assert generic.storage_options() == {"key": "k", "secret": "s",
                                         "endpoint_url": iam_s3["endpoint"]}


class CmdlineRecorder:
    """Every distinct command line of every process seen while inside (``/proc``)."""

    def __init__(self) -> None:
        self.cmdlines: set[bytes] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> CmdlineRecorder:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.is_set():
            for entry in os.scandir("/proc"):
                if entry.name.isdigit():
                    with contextlib.suppress(OSError):
                        self.cmdlines.add(Path(entry.path, "cmdline").read_bytes())
            time.sleep(0.05)


def test_role_assumption_commits_through_dag_test_and_leaks_nothing(
        dagbag, iam_s3, monkeypatch, capfd):
    from airflow_tpc.airflow.hooks.tpc import TpcHook

    endpoint = iam_s3["endpoint"]
    # endpoint_url for S3 in the extra; STS (role assumption) has its own endpoint
    _aws_conn(monkeypatch, "tpc_aws_role", iam_s3["assumer"], endpoint_url=endpoint,
              role_arn=iam_s3["role_arn"], service_config={"sts": {"endpoint_url": endpoint}})
    dag = dagbag.get_dag("tpc_it_aws_role")
    with CmdlineRecorder() as recorder:
        dr = dag.test(logical_date=day("2026-09-02"), run_conf={"rows": 100})
    assert dr.state == "success", states(dr)
    spark_submits = [c for c in recorder.cmdlines if b"org.apache.spark.deploy.SparkSubmit" in c]
    assert spark_submits, "the job ran through spark-submit"

    issued = issued_credentials(endpoint)
    assert issued, "the connection assumed the role through STS"
    # The hook's options are the role's temporary credentials, with their session token.
    opts = TpcHook(f"s3://{BUCKET}/tables/daily", "tpc_it_aws_role",
                   storage_conn_id="tpc_aws_role").storage_options()
    issued = issued_credentials(endpoint)
    assert (opts["key"], opts["secret"], opts["token"]) in issued
    assert opts["key"] != iam_s3["assumer"][0]

    sink = Sink(f"s3://{BUCKET}/tables/daily", "tpc_it_aws_role", storage_options=opts)
    [info] = sink.describe("2026-09-02")
    assert info.state is TxnState.COMMITTED and info.published
    import pyarrow.parquet as pq

    files = sink.committed_files()["2026-09-02"]
    fs = sink.storage.fs  # the role's credentials, session token included
    assert sum(sum(pq.read_table(f.removeprefix("s3://"), filesystem=fs).column("events")
                   .to_pylist()) for f in files) == 100

    secrets = [iam_s3["assumer"][1]] + [s for _, secret, token in issued
                                        for s in (secret, token)]
    out = capfd.readouterr()
    logs = "".join(p.read_text(errors="replace")
                   for p in Path(os.environ["AIRFLOW_HOME"]).rglob("*.log") if p.is_file())
    from airflow import settings
    from sqlalchemy import text

    with settings.Session() as session:
        tables = {t: str(session.execute(text(f"SELECT * FROM {t}")).fetchall())
                  for t in ("xcom", "trigger", "rendered_task_instance_fields",
                            "task_state_store")}
    for secret in secrets:
        assert secret not in out.out and secret not in out.err
        assert secret not in logs
        for table, dump in tables.items():
            assert secret not in dump, table
        for cmdline in recorder.cmdlines:
            assert secret.encode() not in cmdline, cmdline[:200]


def test_refreshed_role_credentials_rebuild_the_sink(airflow_db, iam_s3, monkeypatch):
    """Role sessions of 900 s are inside botocore's 15 min refresh window from the start, so
    each look at the kept session refreshes them: the hook follows with a new sink, and the
    new credentials work (what happens, hours later, to a poking sensor or the trigger)."""
    from airflow_tpc.airflow.hooks.tpc import TpcHook

    endpoint = iam_s3["endpoint"]
    _aws_conn(monkeypatch, "tpc_aws_short", iam_s3["assumer"], endpoint_url=endpoint,
              role_arn=iam_s3["role_arn"], assume_role_kwargs={"DurationSeconds": 900},
              service_config={"sts": {"endpoint_url": endpoint}})
    hook = TpcHook(f"s3://{BUCKET}/short", "aws_short", storage_conn_id="tpc_aws_short")
    first = hook.get_sink()
    first_key = hook.storage_options()["key"]
    second = hook.get_sink()
    assert second is not first and hook.storage_options()["key"] != first_key
    _commit_through_hook(hook, "2026-09-03")  # every step on freshly refreshed credentials
    assert len(issued_credentials(endpoint)) >= 4
