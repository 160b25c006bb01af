"""Extra links: the manifest a commit published, and the transaction page of a run.

Both open pages of the airflow-tpc UI plugin (:mod:`airflow_tpc.airflow.ui.plugin`), served
over http by Airflow's own API server, for every store: the Airflow 3 UI does not show
``file://`` links, and a staging URL points at files deleted once the commit publishes.
The links are relative to the API server (no host), so they work behind any proxy name.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from airflow.sdk import BaseOperatorLink

from airflow_tpc.storage import storage_class

if TYPE_CHECKING:
    from airflow.models.taskinstancekey import TaskInstanceKey
    from airflow.sdk import BaseOperator, Context

#: URL prefix of the airflow-tpc UI plugin (see :mod:`airflow_tpc.airflow.ui.plugin`).
PLUGIN_URL_PREFIX = "/airflow-tpc"
#: The commit task's summary XCom (epoch, attempt, digest, totals); see operators/tpc.py.
_COMMIT_XCOM_KEY = "tpc_commit"


def manifest_url(uri: str) -> str:
    """The store's own browser URL for ``uri`` when it has one (S3's https form), else the
    URI.  The store class decides, not a prefix test.  The extra link does not use it any
    more (see :class:`ManifestLink`); kept for callers that want the store's address."""
    return storage_class(uri).browser_url(uri) or uri


def run_page_url(dag_id: str, run_id: str) -> str:
    """The plugin's page of a DAG run's transactions."""
    return f"{PLUGIN_URL_PREFIX}/run?{urlencode({'dag_id': dag_id, 'run_id': run_id})}"


def manifest_page_url(dag_id: str, run_id: str, epoch: str, attempt: int,
                      target: str | None = None, namespace: str | None = None) -> str:
    """The plugin's page of one attempt's manifest (files, sizes, checksums, rows), named
    by the transaction's full identity: a run holds the same epoch and attempt in every
    target it writes, so the target and namespace say which."""
    params: dict[str, Any] = {"dag_id": dag_id, "run_id": run_id, "epoch": epoch,
                              "attempt": int(attempt)}
    if target and namespace:
        params.update(target=target, namespace=namespace)
    return f"{PLUGIN_URL_PREFIX}/manifest?{urlencode(params)}"


class ManifestLink(BaseOperatorLink):
    """Link to the manifest page of the attempt the commit task committed: of its own
    target (the commit summary names target and namespace), never another group's."""

    name = "TPC manifest"

    @classmethod
    def persist(cls, context: Context, manifest_uri: str | None) -> None:
        """Kept for the commit operator's call; the link is derived from the commit summary
        XCom when the task finishes (:meth:`get_link`), so nothing is stored here."""

    def get_link(self, operator: BaseOperator, *, ti_key: TaskInstanceKey) -> str:
        """Run by the worker when the task ends (Airflow 3 stores the result as the link's
        XCom): the page of the committed attempt, or no link if nothing was committed."""
        from airflow.sdk.execution_time.xcom import XCom

        summary = XCom.get_value(ti_key=ti_key, key=_COMMIT_XCOM_KEY)
        if not isinstance(summary, dict) or "epoch" not in summary:
            return ""
        return manifest_page_url(ti_key.dag_id, ti_key.run_id, str(summary["epoch"]),
                                 int(summary["attempt"]), summary.get("target"),
                                 summary.get("namespace"))


class TransactionLink(BaseOperatorLink):
    """Link to the airflow-tpc page listing this run's transactions."""

    name = "TPC transactions"

    @classmethod
    def persist(cls, context: Context, txn: Any) -> None:
        """Stored as soon as the transaction begins, so the link works while the job runs."""
        ti = context["ti"]
        ti.xcom_push(key=cls().xcom_key, value=run_page_url(ti.dag_id, ti.run_id))

    def get_link(self, operator: BaseOperator, *, ti_key: TaskInstanceKey) -> str:
        return run_page_url(ti_key.dag_id, ti_key.run_id)
