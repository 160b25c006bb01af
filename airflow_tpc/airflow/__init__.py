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
    "StagedSparkSubmitOperator": "airflow_tpc.airflow.operators.submit",
    "CommitOperator": "airflow_tpc.airflow.operators.tpc",
    "AbortOperator": "airflow_tpc.airflow.operators.tpc",
    "target_asset": "airflow_tpc.airflow.operators.tpc",
    "PrecommitSensor": "airflow_tpc.airflow.sensors.tpc",
    "PrecommitTrigger": "airflow_tpc.airflow.triggers.tpc",
    "TpcHook": "airflow_tpc.airflow.hooks.tpc",
    "SinkArgs": "airflow_tpc.airflow.hooks.tpc",
    "TpcBaseOperator": "airflow_tpc.airflow.operators.base",
    "TpcBaseSensor": "airflow_tpc.airflow.operators.base",
    "ManifestLink": "airflow_tpc.airflow.links.tpc",
    "TransactionLink": "airflow_tpc.airflow.links.tpc",
    "exactly_once_spark_group": "airflow_tpc.airflow.utils.task_group",
    "exactly_once_group_tasks": "airflow_tpc.airflow.utils.task_group",
    "GroupSparkSubmitOperator": "airflow_tpc.airflow.operators.group",
    "GroupCommitOperator": "airflow_tpc.airflow.operators.group",
    "GroupAbortOperator": "airflow_tpc.airflow.operators.group",
    "GroupPrecommitSensor": "airflow_tpc.airflow.sensors.group",
    "GroupPrecommitTrigger": "airflow_tpc.airflow.triggers.group",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(name)
