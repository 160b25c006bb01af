"""Secrets stay off spark-submit's command line, out of the Spark conf, XCom and repr.

* Endpoint URLs with ``user:secret@`` or a query string are refused wherever a public
  option is accepted (operator/sensor arguments, the connection, the core, the payload)
  and stripped wherever one is shown.
* The connection's credentials reach the job without ever appearing in argv: the
  operator's real ``execute`` runs the real SparkSubmitHook against a recording
  ``spark-submit`` on PATH (for YARN, Kubernetes and standalone masters, client and
  cluster deploy modes), and a real ``spark-submit`` (local[2]) runs while every
  process's ``/proc/<pid>/cmdline`` is watched.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import time
from pathlib import Path

import pytest

from airflow_tpc import Sink, TxnState

from .helpers import day, states

pytestmark = pytest.mark.timeout(1800)

SECRET = "tpc-Sup3r-s3cret-for-argv-7731"
TOKEN = "tpc-session-t0ken-for-argv-5522"
KEY_ID = "AKIATPCSECRETTEST"
REPO = Path(__file__).resolve().parents[2]
JOB = str(REPO / "dags" / "jobs" / "aggregate_events.py")
BAD_ENDPOINTS = [f"http://{KEY_ID}:{SECRET}@127.0.0.1:9000",
                 f"http://127.0.0.1:9000/?X-Amz-Signature={SECRET}",
                 f"https://s3.example.com/#{SECRET}",
                 f"http://user:{SECRET[:6]}/{SECRET[6:]}@127.0.0.1:9000"]


def _conn(**extra):
    return json.dumps({"conn_type": "generic", "login": KEY_ID, "password": SECRET,
                       "extra": {"region_name": "us-east-1", "token": TOKEN, **extra}})


# -- endpoint URLs ------------------------------------------------------------------------

@pytest.mark.parametrize("endpoint", BAD_ENDPOINTS)
def test_endpoint_with_credentials_or_query_is_refused_everywhere(airflow_db, endpoint,
                                                                  monkeypatch):
    from airflow_tpc.airflow import PrecommitSensor, StagedSparkSubmitOperator
    from airflow_tpc.airflow.hooks.tpc import TpcHook
    from airflow_tpc.errors import TpcError
    from airflow_tpc.spark.context import JobTransaction

    refusals = []

    def refused(fn, exc=(ValueError, TpcError)):
        with pytest.raises(exc) as info:
            fn()
        message = str(info.value)
        assert SECRET not in message and SECRET[:6] not in message, message
        refusals.append(message)

    opts = {"endpoint_url": endpoint, "region_name": "us-east-1"}
    refused(lambda: StagedSparkSubmitOperator(task_id="s", application="job.py",
                                              target="s3://b/t", namespace="n",
                                              storage_options=opts))
    refused(lambda: PrecommitSensor(task_id="w", target="s3://b/t", namespace="n",
                                    submit_task_id="s", storage_options=opts))
    refused(lambda: TpcHook("s3://b/t", "n", storage_options=opts))
    # from the connection's extra: refused before it reaches the payload or a client
    monkeypatch.setenv("AIRFLOW_CONN_TPC_BAD_ENDPOINT", _conn(endpoint_url=endpoint))
    hook = TpcHook("s3://b/t", "n", storage_conn_id="tpc_bad_endpoint")
    refused(hook.storage_options)
    refused(hook.job_public_options)
    # the core (and so the CLI's --endpoint-url) and the job's payload
    refused(lambda: Sink("s3://b/t", "n", storage_options=opts))
    payload = json.dumps({"namespace": "n", "target": "s3://b/t", "epoch": "2026-01-01",
                          "attempt": 1, "staging_uri": "s3://b/t/_tpc/staging/epoch=2026-01-01/"
                          "attempt=000001", "started_at": 1.0, "timeout_s": 60.0,
                          "storage": opts})
    refused(lambda: JobTransaction.from_payload(payload), TpcError)
    assert len(refusals) == 7
    assert all("endpoint" in m for m in refusals)


def test_shown_endpoints_never_carry_user_info_or_query():
    from airflow_tpc.airflow.hooks.tpc import public_options
    from airflow_tpc.core.transaction import Transaction
    from airflow_tpc.spark.context import build_payload, public_storage_options
    from airflow_tpc.storage.s3 import S3Storage, redact_endpoint_url

    for endpoint in BAD_ENDPOINTS:
        shown = redact_endpoint_url(endpoint)
        assert SECRET not in shown and SECRET[:6] not in shown and "?" not in shown, shown
        for fn in (public_options, public_storage_options):
            out = json.dumps(fn({"endpoint_url": endpoint, "secret": SECRET}))
            assert SECRET not in out and SECRET[:6] not in out, out
    txn = Transaction(namespace="n", target="s3://b/t", epoch="2026-01-01", attempt=1,
                      staging_uri="s3://b/t/_tpc/staging/epoch=2026-01-01/attempt=000001",
                      started_at=1.0, timeout_s=60.0)
    payload = build_payload(txn, storage_options={"endpoint_url": BAD_ENDPOINTS[0],
                                                  "key": KEY_ID, "secret": SECRET})
    assert SECRET not in payload and KEY_ID not in payload
    assert json.loads(payload)["storage"]["endpoint_url"] == "http://127.0.0.1:9000"
    good = S3Storage({"endpoint_url": "http://127.0.0.1:9000", "key": KEY_ID, "secret": SECRET,
                      "token": TOKEN})
    assert SECRET not in repr(good) and TOKEN not in repr(good) and KEY_ID not in repr(good)
    assert good.public_options() == {"endpoint_url": "http://127.0.0.1:9000"}


# -- the spark-submit command line: every deploy mode, through the operator's execute -----

STUB = """#!{python}
import json, os, stat, sys
out = {{"argv": sys.argv, "env": {{k: v for k, v in os.environ.items() if k.startswith("AWS_")}},
        "files": {{}}}}
args = sys.argv[1:]
for i, a in enumerate(args):
    if a == "--files":
        for path in args[i + 1].split(","):
            st = os.stat(path)
            out["files"][path] = {{
                "mode": stat.S_IMODE(st.st_mode),
                "dir_mode": stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode),
                "content": json.load(open(path))}}
with open(os.environ["TPC_STUB_OUT"], "w") as fh:
    json.dump(out, fh)
print("stub spark-submit: recorded")
"""


class _TI:
    """The little of a task instance the submit operator touches (XCom, identity)."""

    dag_id, run_id, task_id, try_number, map_index = "d", "r", "submit", 1, -1

    def __init__(self):
        self.xcoms = {}

    def xcom_push(self, key, value):
        self.xcoms[key] = value


@pytest.fixture()
def stub_submit(tmp_path, monkeypatch):
    """A recording ``spark-submit`` first on PATH: what it records is what ``ps`` shows."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    stub = bindir / "spark-submit"
    stub.write_text(STUB.format(python=sys.executable))
    stub.chmod(0o755)
    out = tmp_path / "recorded.json"
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("TPC_STUB_OUT", str(out))
    monkeypatch.setenv("AIRFLOW_CONN_TPC_SECRET_S3", _conn(endpoint_url="http://127.0.0.1:9"))
    # Kubernetes masters need the cncf provider's client only to *track* pods; the
    # command line is built without it.
    import airflow.providers.apache.spark.hooks.spark_submit as spark_submit_hook

    if getattr(spark_submit_hook, "kube_client", None) is None:
        monkeypatch.setattr(spark_submit_hook, "kube_client", object(), raising=False)
    return out


def _spark_conn(monkeypatch, master: str, deploy_mode: str | None) -> str:
    extra = {"deploy-mode": deploy_mode} if deploy_mode else {}
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_SECRETS_TEST",
                       json.dumps({"conn_type": "spark", "host": master, "extra": extra}))
    return "spark_secrets_test"


def _submit(tmp_path, conn_id, **kwargs):
    from airflow_tpc.airflow import StagedSparkSubmitOperator

    op = StagedSparkSubmitOperator(
        task_id="submit", application="/jobs/job.py", target=str(tmp_path / "target"),
        namespace="secrets", epoch="2026-06-01", conn_id=conn_id,
        storage_conn_id="tpc_secret_s3", ship_package=False,
        conf={"spark.ui.enabled": "false"}, application_args=["--rows", "10"], **kwargs)
    ti = _TI()
    return op, ti, (lambda: op.execute({"ti": ti}))


MODES = [  # master, deploy mode, how the credentials travel
    ("local[2]", None, "env"),
    ("spark://127.0.0.1:7077", "client", "file"),
    ("yarn", "client", "file"),
    ("yarn", "cluster", "file"),
    ("k8s://https://127.0.0.1:6443", "client", "file"),
]


@pytest.mark.parametrize(("master", "deploy_mode", "how"), MODES)
def test_argv_holds_no_secret_in_any_deploy_mode(airflow_db, tmp_path, stub_submit, monkeypatch,
                                                 master, deploy_mode, how):
    op, ti, execute = _submit(tmp_path, _spark_conn(monkeypatch, master, deploy_mode))
    execute()
    rec = json.loads(stub_submit.read_text())
    argv = "\0".join(rec["argv"])
    assert rec["argv"][-3:] == ["/jobs/job.py", "--rows", "10"]
    assert f"--master\0{master}" in argv
    for secret in (SECRET, TOKEN):
        assert secret not in argv
    # nor in the Spark conf (also shown in the Spark UI), nor in XCom
    payload = op.conf["spark.airflow_tpc.txn"]
    assert SECRET not in payload and TOKEN not in payload and KEY_ID not in payload
    assert SECRET not in json.dumps(ti.xcoms) and SECRET not in repr(op.env_vars)
    if how == "env":
        # spark-submit's process environment (readable only by its user, like a 0600 file)
        assert rec["env"]["AWS_SECRET_ACCESS_KEY"] == SECRET
        assert rec["env"]["AWS_SESSION_TOKEN"] == TOKEN
        assert rec["env"]["AWS_ACCESS_KEY_ID"] == KEY_ID
        assert "--files" not in rec["argv"] and "credentials_file" not in payload
    else:
        [(path, info)] = rec["files"].items()
        assert info["mode"] == 0o600 and info["dir_mode"] == 0o700
        assert info["content"] == {"AWS_ACCESS_KEY_ID": KEY_ID, "AWS_SECRET_ACCESS_KEY": SECRET,
                                   "AWS_SESSION_TOKEN": TOKEN}
        assert json.loads(payload)["credentials_file"] == os.path.basename(path)
        assert not os.path.exists(path) and not os.path.exists(os.path.dirname(path))
        assert op.files is None  # restored for the next try
        # not via the environment either: remote drivers/executors would never see it
        assert rec["env"].get("AWS_SECRET_ACCESS_KEY") != SECRET


def test_the_check_can_fail_env_vars_on_yarn_put_the_secret_on_argv(airflow_db, monkeypatch,
                                                                      stub_submit):
    """Control: what the operator did before (env_vars) really shows up in argv on YARN."""
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    for master in ("yarn", "k8s://https://127.0.0.1:6443"):
        hook = SparkSubmitHook(conn_id=_spark_conn(monkeypatch, master, "cluster"),
                               env_vars={"AWS_SECRET_ACCESS_KEY": SECRET})
        assert any(SECRET in a for a in hook._build_spark_submit_command("/jobs/job.py"))


@pytest.mark.parametrize(("master", "deploy_mode", "kwargs", "match"), [
    ("k8s://https://127.0.0.1:6443", "cluster", {}, "Kubernetes secret"),
    ("spark://127.0.0.1:7077", "cluster", {}, "standalone cluster"),
    ("yarn", "cluster", {"job_credentials": "env"}, "cluster deploy mode"),
    ("yarn", "client", {"env_vars": {"AWS_SECRET_ACCESS_KEY": SECRET}}, "env_vars"),
    ("k8s://https://127.0.0.1:6443", "client", {"env_vars": {"DB_PASSWORD": SECRET}},
     "env_vars"),
])
def test_setups_that_would_leak_or_not_deliver_fail_before_begin(
        airflow_db, tmp_path, stub_submit, monkeypatch, master, deploy_mode, kwargs, match):
    from airflow_tpc.airflow.operators.tpc import SecretOnCommandLine

    _, _, execute = _submit(tmp_path, _spark_conn(monkeypatch, master, deploy_mode), **kwargs)
    with pytest.raises(SecretOnCommandLine, match=match) as info:
        execute()
    assert SECRET not in str(info.value)
    assert not stub_submit.exists()  # spark-submit never ran
    assert Sink(str(tmp_path / "target"), "secrets").describe("2026-06-01") == []


@pytest.mark.parametrize("where", ["conf", "application_args"])
def test_a_secret_put_in_conf_or_args_by_hand_is_refused_and_the_attempt_aborted(
        airflow_db, tmp_path, stub_submit, monkeypatch, where):
    from airflow_tpc.airflow.operators.tpc import SecretOnCommandLine

    extra = ({"conf": {"spark.hadoop.fs.s3a.secret.key": SECRET}} if where == "conf"
             else {"application_args": ["--secret", SECRET]})
    from airflow_tpc.airflow import StagedSparkSubmitOperator

    op = StagedSparkSubmitOperator(
        task_id="submit", application="/jobs/job.py", target=str(tmp_path / "target"),
        namespace="secrets", epoch="2026-06-01",
        conn_id=_spark_conn(monkeypatch, "yarn", "client"), storage_conn_id="tpc_secret_s3",
        ship_package=False, **extra)
    with pytest.raises(SecretOnCommandLine) as info:
        op.execute({"ti": _TI()})
    assert SECRET not in str(info.value)
    assert not stub_submit.exists()
    [txn] = Sink(str(tmp_path / "target"), "secrets").describe("2026-06-01")
    assert txn.state is TxnState.ABORTED


def test_unknown_job_credentials_mode_is_refused(airflow_db):
    from airflow_tpc.airflow import StagedSparkSubmitOperator

    with pytest.raises(ValueError, match="job_credentials"):
        StagedSparkSubmitOperator(task_id="s", application="j.py", target="/tmp/t",
                                  namespace="n", job_credentials="conf")


# -- real spark-submit runs, watched through /proc ----------------------------------------

class ProcWatch:
    """Reads every process's cmdline (and its spark-submit JVM's environ) while it runs."""

    def __init__(self, *secrets: str):
        self.secrets = [s.encode() for s in secrets]
        # (the secret alone may be in every child's environment: the test defines its
        # connection in an AIRFLOW_CONN_* variable)
        self.env_markers = [b"AWS_SECRET_ACCESS_KEY=" + s for s in self.secrets]
        self.leaks: list[tuple[int, str]] = []
        self.spark_submits: set[int] = set()
        self.env_carriers: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(10)

    def _run(self):
        while not self._stop.is_set():
            for entry in os.scandir("/proc"):
                if not entry.name.isdigit():
                    continue
                try:
                    cmdline = Path(entry.path, "cmdline").read_bytes()
                except OSError:
                    continue
                if any(s in cmdline for s in self.secrets):
                    self.leaks.append((int(entry.name), "cmdline"))
                if b"org.apache.spark.deploy.SparkSubmit" in cmdline:
                    self.spark_submits.add(int(entry.name))
                    try:
                        environ = Path(entry.path, "environ").read_bytes()
                    except OSError:
                        continue
                    if any(m in environ for m in self.env_markers):
                        self.env_carriers.add(int(entry.name))
            time.sleep(0.05)


def _bucket(endpoint: str, name: str) -> None:
    import boto3

    client = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=KEY_ID,
                          aws_secret_access_key=SECRET, region_name="us-east-1")
    with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou):
        client.create_bucket(Bucket=name)


def test_real_local_run_env_mode_secret_never_on_any_command_line(dagbag, moto_endpoint,
                                                                  monkeypatch, capfd):
    """The example pipeline on S3 (auto = env for local[2]): watched from the outside."""
    _bucket(moto_endpoint, "tpc-it")
    monkeypatch.setenv("AIRFLOW_CONN_TPC_S3", json.dumps({
        "conn_type": "generic", "login": KEY_ID, "password": SECRET,
        "extra": {"endpoint_url": moto_endpoint, "region_name": "us-east-1"}}))
    dag = dagbag.get_dag("tpc_it_s3")
    with ProcWatch(SECRET) as watch:
        dr = dag.test(logical_date=day("2026-04-09"), run_conf={"rows": 300})
    assert dr.state == "success", states(dr)
    assert watch.spark_submits, "never saw the spark-submit JVM: the watch proved nothing"
    assert watch.env_carriers, "the JVM's environment never held the connection's secret"
    assert watch.leaks == []
    out = capfd.readouterr()
    assert SECRET not in out.out and SECRET not in out.err


def test_real_local_run_file_mode_delivers_credentials_off_argv_and_env(
        airflow_db, moto_endpoint, tmp_path, monkeypatch, capfd):
    """job_credentials="file" with a real spark-submit: with no AWS_* anywhere in the
    environment, the job can only reach S3 through the shipped 0600 file."""
    from airflow_tpc.airflow import StagedSparkSubmitOperator

    bucket = "tpc-secrets-file"
    _bucket(moto_endpoint, bucket)
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AIRFLOW_CONN_TPC_FILE_S3", json.dumps({
        "conn_type": "generic", "login": KEY_ID, "password": SECRET,
        "extra": {"endpoint_url": moto_endpoint, "region_name": "us-east-1"}}))
    target = f"s3://{bucket}/daily"
    op = StagedSparkSubmitOperator(
        task_id="submit", application=JOB, target=target, namespace="secrets_file",
        epoch="2026-04-10", conn_id="spark_local", storage_conn_id="tpc_file_s3",
        job_credentials="file", application_args=["--rows", "200"],
        conf={"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2"})
    with ProcWatch(SECRET) as watch:
        op.execute({"ti": _TI()})
    assert watch.spark_submits and watch.leaks == []
    assert not watch.env_carriers  # file mode: not in the JVM's environment either
    sink = Sink(target, "secrets_file", storage_options={
        "endpoint_url": moto_endpoint, "key": KEY_ID, "secret": SECRET,
        "region_name": "us-east-1"})
    [info] = sink.describe("2026-04-10")
    assert info.state is TxnState.PRECOMMITTED and info.staging_files > 0
    out = capfd.readouterr()
    assert SECRET not in out.out and SECRET not in out.err
    # the file was shipped by name and removed once spark-submit returned
    name = json.loads(op.conf["spark.airflow_tpc.txn"])["credentials_file"]
    assert name.startswith("tpc-credentials-")
    import tempfile

    assert list(Path(tempfile.gettempdir()).glob(f"airflow_tpc-cred-*/{name}")) == []
