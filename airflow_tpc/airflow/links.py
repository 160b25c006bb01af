"""Extra links: the manifest a commit published, and the transaction page of a run."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from airflow.sdk import BaseOperatorLink

from airflow_tpc.storage import storage_class

if TYPE_CHECKING:
    from airflow.models.taskinstancekey import TaskInstanceKey
    from airflow.sdk import BaseOperator, Context

#: URL prefix of the airflow-tpc UI plugin (see :mod:`airflow_tpc.airflow.plugin`).
PLUGIN_URL_PREFIX = "/airflow-tpc"


def manifest_url(uri: str) -> str:
    """What the *TPC manifest* link opens: the store's browser URL for ``uri`` when it has
    one (S3's https form), else the URI itself.  The store class decides, not a prefix
    test, so every spelling of a store (``s3a://``, upper-case schemes) links alike."""
    return storage_class(uri).browser_url(uri) or uri


class ManifestLink(BaseOperatorLink):
    """Link to the pre-commit manifest (file list + digest) the commit task published."""

    name = "TPC manifest"

    @classmethod
    def persist(cls, context: Context, manifest_uri: str | None) -> None:
        """Store the URL in XCom: the API server reads it from there (by ``xcom_key``)."""
        if manifest_uri:
            context["ti"].xcom_push(key=cls().xcom_key, value=manifest_url(str(manifest_uri)))

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
