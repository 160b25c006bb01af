"""Operators of the two-phase commit: commit and abort (begin+submit is re-exported).

They are thin: every protocol decision (fencing, validation, the atomic commit
point, roll-forward) is made by the core :class:`airflow_tpc.Sink`; the operators
only carry the transaction between tasks (XCom), map outcomes onto task states and
Asset events, and keep secrets out of logs, XComs and the Spark conf.

The submit operator lives in :mod:`airflow_tpc.airflow.operators.submit` and how it hands
credentials to spark-submit in :mod:`airflow_tpc.airflow.hooks.job_credentials`; both are
re-exported here, so ``from airflow_tpc.airflow.operators.tpc import ...`` names every
operator of a single target.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import Asset

from airflow_tpc import InvalidState, Transaction
from airflow_tpc.airflow.hooks.job_credentials import (
    CREDENTIALS_FILE_PREFIX,
    JOB_CREDENTIALS,
    SecretOnCommandLine,
    SecretSafeSparkSubmitHook,
    refuse_secret_env_vars,
    refuse_secrets_in_argv,
    remove_credentials_file,
    resolve_job_credentials,
    write_credentials_file,
)
from airflow_tpc.airflow.hooks.tpc import TXN_XCOM_KEY
from airflow_tpc.airflow.links.tpc import ManifestLink
from airflow_tpc.airflow.operators.base import TpcBaseOperator, tpc_template_fields
from airflow_tpc.airflow.operators.submit import (
    DEFAULT_EPOCH,
    SPARK_CONF_KEY,
    StagedSparkSubmitOperator,
    job_payload,
    package_zip,
)
from airflow_tpc.airflow.utils.lineage_abort import abort_summary
from airflow_tpc.airflow.utils.metrics import health_at_end
from airflow_tpc.airflow.utils.task_policy import (
    DEFAULT_ABORT_REASON,
    AbortTask,
    abort_reason,
    commit_retry_args,
    refusals_fail_at_once,
)
from airflow_tpc.core.faults import crashpoint
from airflow_tpc.tables.history import table_uri

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_tpc.airflow.hooks.tpc import TpcHook

__all__ = [
    "COMMIT_XCOM_KEY", "CREDENTIALS_FILE_PREFIX", "DEFAULT_EPOCH", "EVENT_STATE_KEY",
    "JOB_CREDENTIALS", "SPARK_CONF_KEY", "AbortOperator", "CommitOperator",
    "SecretOnCommandLine", "SecretSafeSparkSubmitHook", "StagedSparkSubmitOperator",
    "job_payload", "package_zip", "pull_txn", "refuse_secret_env_vars",
    "refuse_secrets_in_argv", "remove_credentials_file", "resolve_job_credentials",
    "target_asset", "write_credentials_file",
]

#: XCom key of the commit operator's summary.
COMMIT_XCOM_KEY = "tpc_commit"
#: Task state store key: the commit (txn id + digest) whose Asset event a try of this
#: task instance already handed to Airflow (see CommitOperator._should_emit).
EVENT_STATE_KEY = "airflow_tpc.asset_event"


def pull_txn(context: Context, submit_task_id: str) -> dict[str, Any] | None:
    """The transaction the submit task of this run began (latest try)."""
    return context["ti"].xcom_pull(task_ids=submit_task_id, key=TXN_XCOM_KEY)


class CommitOperator(TpcBaseOperator):
    """Commit the run's pre-committed transaction, then emit the target's Asset event.

    The sensor's XCom pointer names the manifest digest that was validated; the core
    re-checks storage against it before writing the one atomic decision record, so
    files changed after validation are never published.  Re-running is safe: after a
    finished commit it is a no-op (and emits no second Asset event); after a crash
    between the decision and the end of promotion it rolls the promotion forward.

    :param sensor_task_id: the :class:`PrecommitSensor` whose pointer is committed.
    :param outlets: Assets updated on commit (default: one Asset for the target URI).
    :param force: commit even past the transaction timeout (logged loudly).
    :param retries: default 3 (``retry_delay`` 15 s, doubling, at most 5 min): a commit is
        idempotent, so a worker lost mid-commit costs a retry, not the epoch; the abort
        task runs only once the commit failed for good (airflow_tpc/airflow/utils/task_policy.py).
        A value given here or in ``default_args`` wins.
    """

    template_fields: Sequence[str] = tpc_template_fields("sensor_task_id")
    operator_extra_links = (ManifestLink(),)
    ui_color = "#b7e4c7"

    def __init__(self, *, sensor_task_id: str, force: bool = False,
                 retries: int | None = None, retry_delay: Any = None,
                 retry_exponential_backoff: float | None = None, max_retry_delay: Any = None,
                 **kwargs: Any) -> None:
        default_outlets = "outlets" not in kwargs
        super().__init__(**commit_retry_args(retries, retry_delay, retry_exponential_backoff,
                                             max_retry_delay), **kwargs)
        if default_outlets:  # the target may have come from default_args: read it here
            self.outlets = [target_asset(self.target)]
        self.sensor_task_id = sensor_task_id
        self.force = force

    def execute(self, context: Context) -> dict[str, Any]:
        pointer = context["ti"].xcom_pull(task_ids=self.sensor_task_id)
        if not pointer or "digest" not in pointer:
            raise InvalidState(f"no pre-commit pointer from task {self.sensor_task_id!r}: "
                               "nothing validated to commit")
        # a refusal is final; anything else is retried.  The target's health gauges go
        # out however the commit ended (metrics.health_at_end).
        with refusals_fail_at_once(), health_at_end(self.tpc_hook):
            outcome = self.tpc_hook.commit_pointer(pointer, force=self.force)
        txn, result, was_published = outcome.txn, outcome.result, outcome.was_published
        crashpoint("commit_task.after_commit")
        manifest = result.manifest
        summary = {"outcome": result.outcome, "txn_id": txn.txn_id, "target": txn.target,
                   "namespace": txn.namespace, "epoch": txn.epoch,
                   "attempt": txn.attempt, "digest": manifest.digest,
                   "files": manifest.total_files, "bytes": manifest.total_bytes,
                   "rows": manifest.total_rows, "manifest_uri": pointer.get("manifest_uri"),
                   "rolled_forward": [list(x) for x in result.rolled_forward]}
        # A table target: named by its own URI (the transaction's target is the
        # location its sink is rooted at, kept as "location": lineage names it), and the
        # snapshot (Iceberg) or version (Delta) the epoch's commit became, asked of the
        # sink (None for folders, or a superseded attempt the table never took).
        version = None
        if self.tpc_hook.is_table:
            summary.update(target=table_uri(self.tpc_hook.get_sink()), location=txn.target)
        if self.tpc_hook.is_table and result.outcome != "superseded":
            version = self.tpc_hook.get_sink().table_version(txn.epoch, manifest.digest)
        if version:
            summary.update(version)
        context["ti"].xcom_push(key=COMMIT_XCOM_KEY, value=summary)
        self._tpc_summary = summary  # for the OpenLineage listener (it asks from a fork)
        self._tpc_facts = _lineage_facts(self.tpc_hook, summary)
        ManifestLink.persist(context, pointer.get("manifest_uri"))
        event_id = f"{txn.txn_id}@{manifest.digest}"
        if not self._should_emit(context, result.outcome, was_published, event_id):
            # Nothing new became visible: a later attempt owns the epoch, or a successful
            # try of this task already announced this commit. No second Asset event.
            self.log.info("%s: %s; no Asset event", txn.txn_id,
                          "superseded by a later attempt" if result.outcome == "superseded"
                          else "already committed, published and announced (no-op)")
            self.outlets = []
            return summary
        self.log.info("%s %s: %d files, %d bytes, %s rows%s", txn.txn_id, result.outcome,
                      manifest.total_files, manifest.total_bytes, manifest.total_rows,
                      " (rolled forward)" if result.outcome == "already_committed" else "")
        extra = {"epoch": txn.epoch, "txn_id": txn.txn_id, "attempt": txn.attempt,
                 "files": manifest.total_files, "rows": manifest.total_rows,
                 "bytes": manifest.total_bytes, "digest": manifest.digest}
        if version:  # {"table", "format", "snapshot_id" | "version"}
            extra.update(version)
        for outlet in self.outlets:
            if isinstance(outlet, Asset):
                context["outlet_events"][outlet].extra = dict(extra)
        self._remember_event(context, event_id)
        return summary

    def _should_emit(self, context: Context, outcome: str, was_published: bool,
                     event_id: str) -> bool:
        """Whether this try announces the commit with an Asset event.

        Airflow records outlet events only when the try *succeeds*.  So a try that
        published the epoch and then failed (killed, lost its API server) announced
        nothing, and the next try must — although for the ledger the commit is
        already done.  The task state store (it survives retries and clears) holds
        the commit a try last announced: a rerun after a success finds it and stays
        quiet; a rerun after a failed try does not, and emits.  Without a state store
        (Airflow < 3.3) "published before this try" stands in for "announced".
        """
        if outcome == "superseded":
            return False
        if not was_published:
            return True  # this try made the data visible (or rolled it forward)
        store = context.get("task_state_store")
        if store is None:
            return False
        try:
            return store.get(EVENT_STATE_KEY) != event_id
        except Exception as exc:  # an unreachable store: prefer a duplicate to a lost event
            self.log.warning("Could not read the task state store (%s): emitting the Asset "
                             "event again; downstream may run twice on the same data", exc)
            return True

    def _remember_event(self, context: Context, event_id: str) -> None:
        store = context.get("task_state_store")
        if store is None:
            return
        try:
            store.set(EVENT_STATE_KEY, event_id)
        except Exception as exc:  # a rerun would then announce once more: harmless
            self.log.warning("Could not record the Asset event in the task state store: %s",
                             exc)

    # -- OpenLineage (airflow_tpc.airflow.utils.lineage; only with that provider) -----------
    def get_openlineage_facets_on_start(self) -> Any:
        """The target as the output, named before anything is committed."""
        return _lineage(self.tpc_hook, None)

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """The target with what this try's commit made: statistics, schema, version and
        the transaction (kept by ``execute``; the listener asks from a fork, which must
        not pull XComs)."""
        return _lineage(self.tpc_hook, getattr(self, "_tpc_summary", None),
                        getattr(self, "_tpc_facts", None))

    def get_openlineage_facets_on_failure(self, task_instance: Any) -> Any:
        """A failed commit names the output it did not finish writing."""
        return _lineage(self.tpc_hook, None)


def _lineage_facts(hook: TpcHook, summary: dict[str, Any]) -> dict[str, Any] | None:
    """What the lineage facets need read in this process (None: no OpenLineage)."""
    try:
        from airflow_tpc.airflow.utils.lineage import commit_facts
    except ImportError:
        return None
    return commit_facts(hook, summary)


def _lineage(hook: TpcHook, summary: dict[str, Any] | None,
             facts: dict[str, Any] | None = None) -> Any:
    try:
        from airflow_tpc.airflow.utils.lineage import lineage
    except ImportError:  # no OpenLineage provider: no lineage
        return None
    return lineage(hook, summary, facts)


def target_asset(target: str) -> Asset:
    """The Asset standing for a target's committed data (one URI per target)."""
    uri = target if "://" in target else f"file://{os.path.abspath(target)}"
    return Asset(uri=uri.rstrip("/"))


class AbortOperator(AbortTask, TpcBaseOperator):
    """Abort the run's transaction(s): by default when submit, sensor or commit failed.

    ``trigger_rule="one_failed"`` makes it run when any upstream protocol task fails
    *or is marked failed in the UI* (which runs no callbacks, but trigger rules still
    fire).  Aborting a committed transaction is refused by the core; that case is
    logged, not raised, because a commit that failed after its decision must be rolled
    forward by re-running the commit task, not thrown away.

    Besides the latest attempt named in XCom, every undecided attempt of the epoch
    begun by *this* DAG run is aborted (earlier tries whose XCom is gone).

    :param fail_run: for an abort that is the run's *outcome* rather than its cleanup (a
        rejection at the approval gate): after aborting, the task fails with
        ``AirflowFailException`` (no retry), so the DAG run ends failed and the rejection
        is not mistaken for success.  An error of the abort itself is raised as it is (and
        retried as the task's ``retries`` say); rerunning the task aborts nothing twice.
    """

    template_fields: Sequence[str] = tpc_template_fields("submit_task_id", "reason")
    ui_color = "#f4a6a6"

    def __init__(self, *, submit_task_id: str,
                 reason: str = DEFAULT_ABORT_REASON,
                 trigger_rule: str = "one_failed", fail_run: bool = False,
                 **kwargs: Any) -> None:
        super().__init__(trigger_rule=trigger_rule, **kwargs)
        self._init_abort(submit_task_id, reason, fail_run)

    def execute(self, context: Context) -> dict[str, Any]:
        doc = pull_txn(context, self.submit_task_id)
        if not doc:
            self.log.info("No transaction was begun by %s in this run: nothing to abort",
                          self.submit_task_id)
            result: dict[str, Any] = {"aborted": [], "committed": []}
        else:
            ti = context["ti"]
            self.reason = abort_reason(self, context, str(self.reason))
            with health_at_end(self.tpc_hook):
                result = self.tpc_hook.abort_run(doc, ti.dag_id, ti.run_id, self.reason)
            if result["committed"]:
                self.log.warning("Not aborted (already COMMITTED): %s. If a commit task failed "
                                 "after its decision, re-run it to finish the promotion.",
                                 result["committed"])
            self.log.info("Aborted %s", result["aborted"] or "nothing (already decided)")
            # For the OpenLineage listener (it asks from a fork): every attempt thrown away.
            txn = Transaction.from_dict(doc)
            self._tpc_summary = abort_summary(txn.epoch, txn.namespace,
                                              result["aborted"])
        return self._abort_result(context, result, "transaction")

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """The target, always (an abort concerns it even when an earlier abort, the submit
        task's own, left nothing to do); with every attempt this try aborted (outcome
        ``aborted``, ``abortedAttempts``) when it aborted any.  Nothing was written."""
        return _lineage(self.tpc_hook, getattr(self, "_tpc_summary", None))

