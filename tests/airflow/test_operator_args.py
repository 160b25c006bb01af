"""Argument checks that need no DAG run: durability refused, secrets refused, the job zip."""

from __future__ import annotations

import zipfile

import pytest


def test_submit_refuses_durable_and_secrets(airflow_db):
    from airflow_tpc.airflow import PrecommitSensor, StagedSparkSubmitOperator

    with pytest.raises(ValueError, match="durable"):
        StagedSparkSubmitOperator(task_id="s", application="job.py", target="/tmp/t",
                                  namespace="n", durable=True)
    op = StagedSparkSubmitOperator(task_id="s2", application="job.py", target="/tmp/t",
                                   namespace="n")
    assert op.durable is False
    assert {"target", "namespace", "epoch"} <= set(op.template_fields)
    with pytest.raises(ValueError, match="credentials"):
        PrecommitSensor(task_id="w", target="s3://b/p", namespace="n", submit_task_id="s",
                        storage_options={"endpoint_url": "http://x", "secret": "nope"})


def test_job_zip_has_core_and_spark_but_not_airflow_layer(tmp_path):
    from airflow_tpc.airflow.operators.tpc import package_zip

    names = zipfile.ZipFile(package_zip(str(tmp_path))).namelist()
    assert "airflow_tpc/core/sink.py" in names and "airflow_tpc/spark/context.py" in names
    assert not [n for n in names if n.startswith("airflow_tpc/airflow/")]
