"""The Airflow layer of airflow-tpc: thin operators over the core :class:`airflow_tpc.Sink`.

    from airflow_tpc.airflow import exactly_once_spark_group

    exactly_once_spark_group("daily_events", application="jobs/aggregate.py",
                             target="s3://lake/daily_events", namespace="daily_events",
                             conn_id="spark_local")

Imported lazily so that ``import airflow_tpc.airflow`` stays cheap for the
providers manager and the plugin loader.
"""

from __future__ import annotations

from typing import Any

_EXPORTS = {
    "StagedSparkSubmitOperator": "airflow_tpc.airflow.submit",
    "CommitOperator": "airflow_tpc.airflow.operators",
    "AbortOperator": "airflow_tpc.airflow.operators",
    "target_asset": "airflow_tpc.airflow.operators",
    "PrecommitSensor": "airflow_tpc.airflow.sensors",
    "PrecommitTrigger": "airflow_tpc.airflow.triggers",
    "TpcHook": "airflow_tpc.airflow.hooks",
    "SinkArgs": "airflow_tpc.airflow.hooks",
    "TpcBaseOperator": "airflow_tpc.airflow.base",
    "TpcBaseSensor": "airflow_tpc.airflow.base",
    "ManifestLink": "airflow_tpc.airflow.links",
    "TransactionLink": "airflow_tpc.airflow.links",
    "exactly_once_spark_group": "airflow_tpc.airflow.task_group",
    "exactly_once_group_tasks": "airflow_tpc.airflow.task_group",
    "GroupSparkSubmitOperator": "airflow_tpc.airflow.groups",
    "GroupCommitOperator": "airflow_tpc.airflow.groups",
    "GroupAbortOperator": "airflow_tpc.airflow.groups",
    "GroupPrecommitSensor": "airflow_tpc.airflow.group_sensor",
    "GroupPrecommitTrigger": "airflow_tpc.airflow.group_sensor",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(name)
