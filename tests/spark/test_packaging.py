"""py_files_zip: the job-side code runs from a zip on a cluster without Airflow."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from airflow_tpc import Sink
from airflow_tpc.spark import CONF_KEY, build_payload, py_files_zip, read_committed

JOBS = Path(__file__).parent / "jobs"

PROBE = r"""
import sys
sys.path.insert(0, sys.argv[2])
import block_imports
block_imports.install()
sys.path.insert(0, sys.argv[1])
import airflow_tpc, airflow_tpc.spark, airflow_tpc.spark.datasource, airflow_tpc.spark.readers
import airflow_tpc.spark.committed
assert airflow_tpc.__file__.startswith(sys.argv[1]), airflow_tpc.__file__
from airflow_tpc import Sink
from airflow_tpc.spark import JobTransaction, build_payload
import tempfile, os
d = tempfile.mkdtemp()
sink = Sink(d + "/t", "ns")
txn = sink.begin("1")
job = JobTransaction.from_payload(build_payload(txn))
os.makedirs(job.output_uri[len("file://"):], exist_ok=True)
open(job.output_uri[len("file://"):] + "/a.parquet", "wb").write(b"x")
assert job.precommit().total_files == 1
bad = sorted(m for m in sys.modules if m.split(".")[0] in ("airflow", "boto3", "botocore"))
assert not bad, bad
print("OK", airflow_tpc.__file__)
"""


def test_zip_holds_the_package_without_the_airflow_subpackage(tmp_path):
    fake_airflow_pkg = Path(__file__).resolve().parents[2] / "airflow_tpc" / "airflow"
    path = py_files_zip(tmp_path / "deps.zip")
    names = zipfile.ZipFile(path).namelist()
    assert "airflow_tpc/__init__.py" in names and "airflow_tpc/spark/datasource.py" in names
    assert "airflow_tpc/storage/s3.py" in names
    assert not [n for n in names if n.startswith("airflow_tpc/airflow/")
                or "__pycache__" in n or n.endswith(".pyc")]
    if fake_airflow_pkg.exists():  # once the operators exist, prove they are left out
        assert any(fake_airflow_pkg.rglob("*.py"))
    assert Path(py_files_zip(tmp_path / "again.zip")).read_bytes() == Path(path).read_bytes()


def test_job_code_imports_from_the_zip_with_airflow_blocked(tmp_path):
    path = py_files_zip(tmp_path / "deps.zip")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([sys.executable, "-c", PROBE, path, str(JOBS)], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.startswith("OK") and path in out.stdout


def test_blocker_really_blocks_airflow(tmp_path):
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import block_imports; "
            "block_imports.install(); import airflow")
    out = subprocess.run([sys.executable, "-c", code, str(JOBS)], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode != 0 and "blocked by the test" in out.stderr


@pytest.mark.skipif(shutil.which("spark-submit", path=os.path.dirname(sys.executable)) is None,
                    reason="spark-submit not installed")
def test_spark_submit_with_conf_and_py_files(spark, tmp_path):
    """The whole hand-over: the payload in --conf, the code in --py-files, no Airflow."""
    sink = Sink(str(tmp_path / "t"), "ns")
    txn = sink.begin("2026-11-20")
    result = tmp_path / "result.json"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "AIRFLOW_TPC_TXN")}
    env.update(SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable,
               PYSPARK_DRIVER_PYTHON=sys.executable)
    cmd = [os.path.join(os.path.dirname(sys.executable), "spark-submit"),
           "--master", "local[2]", "--conf", "spark.ui.enabled=false",
           "--conf", f"{CONF_KEY}={build_payload(txn)}",
           "--py-files", py_files_zip(tmp_path / "deps.zip"),
           str(JOBS / "native_job.py"), str(result)]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-4000:]
    doc = json.loads(result.read_text())
    assert "deps.zip" in doc["airflow_tpc_file"] and doc["blocked_loaded"] == []
    manifest = sink.read_manifest(txn)
    assert manifest.digest == doc["digest"] and manifest.total_files >= 4
    sink.commit(txn, expected_digest=manifest.digest)
    df = read_committed(spark, sink.target)
    assert df.count() == 1000 and {r.bucket for r in df.select("bucket").collect()} == {0, 1, 2, 3}
