"""Extra links: the manifest a commit published, and the transaction page of a run."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from airflow.sdk import BaseOperatorLink

if TYPE_CHECKING:
    from airflow.models.taskinstancekey import TaskInstanceKey
    from airflow.sdk import BaseOperator, Context

#: URL prefix of the airflow-tpc UI plugin (see :mod:`airflow_tpc.airflow.plugin`).
PLUGIN_URL_PREFIX = "/airflow-tpc"


class ManifestLink(BaseOperatorLink):
    """Link to the pre-commit manifest (file list + digest) the commit task published."""

    name = "TPC manifest"

    @classmethod
    def persist(cls, context: Context, manifest_uri: str | None) -> None:
        """Store the URL in XCom: the API server reads it from there (by ``xcom_key``)."""
        if manifest_uri:
            uri = str(manifest_uri)
            if uri.startswith("s3://"):
                bucket, _, key = uri[5:].partition("/")
                uri = f"https://{bucket}.s3.amazonaws.com/{key}"
            context["ti"].xcom_push(key=cls().xcom_key, value=uri)

    def get_link(self, operator: BaseOperator, *, ti_key: TaskInstanceKey) -> str:
        return _stored_link(ti_key, self.xcom_key)


class TransactionLink(BaseOperatorLink):
    """Link to the airflow-tpc plugin page listing this run's transactions."""

    name = "TPC transactions"

    @classmethod
    def persist(cls, context: Context, txn: Any) -> None:
        ti = context["ti"]
        query = urlencode({"dag_id": ti.dag_id, "run_id": ti.run_id})
        context["ti"].xcom_push(key=cls().xcom_key, value=f"{PLUGIN_URL_PREFIX}/?{query}")

    def get_link(self, operator: BaseOperator, *, ti_key: TaskInstanceKey) -> str:
        return _stored_link(ti_key, self.xcom_key)


def _stored_link(ti_key: TaskInstanceKey, xcom_key: str) -> str:
    from airflow.sdk.execution_time.xcom import XCom

    return str(XCom.get_value(ti_key=ti_key, key=xcom_key) or "")
