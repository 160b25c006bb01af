"""How the protocol's tasks behave when Airflow loses a try: the commit retries by default,
and an abort says which task's failure made it run.

A commit is idempotent: a retry of an undecided commit re-checks staging and decides, a
retry after the decision rolls it forward, and a retry after a finished commit changes
nothing.  So a worker lost in the middle of a commit (SIGKILL, OOM, a node gone: Airflow
fails the task after its heartbeat timeout) must cost a retry, not the epoch.  Without
retries the ``abort`` task (trigger rule ``one_failed``) would run next and throw the
good pre-committed attempt away, and the epoch would need its Spark job again.  With
them, ``abort`` runs only once the commit has failed for good (a task ``up_for_retry`` is
not *failed*), and its reason names that failure.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

log = logging.getLogger(__name__)

#: A commit task's retries unless the DAG says otherwise (its own argument, or the DAG's or
#: task group's ``default_args``): 3 retries after 15 s, 30 s, 60 s (exponential backoff,
#: at most 5 min apart) — long enough for a lost worker's task to be failed and retried
#: elsewhere, short enough that a run does not wait long on a transient error.
COMMIT_RETRIES = 3
COMMIT_RETRY_DELAY = timedelta(seconds=15)
COMMIT_RETRY_BACKOFF = 2.0
COMMIT_MAX_RETRY_DELAY = timedelta(minutes=5)

#: The default reason of the abort tasks; replaced, when it runs, by one that names the
#: failed upstream tasks (:func:`abort_reason`).
DEFAULT_ABORT_REASON = "aborted by the DAG run ({{ ti.task_id }})"


def commit_retry_args(retries: int | None, retry_delay: Any,
                      retry_exponential_backoff: float | None,
                      max_retry_delay: Any) -> dict[str, Any]:
    """The retry arguments of a commit task: each one given (by the caller or by
    ``default_args``, which Airflow fills in before ``__init__``) is kept, each one left
    ``None`` takes the commit's default above."""
    return {
        "retries": COMMIT_RETRIES if retries is None else retries,
        "retry_delay": COMMIT_RETRY_DELAY if retry_delay is None else retry_delay,
        "retry_exponential_backoff": (COMMIT_RETRY_BACKOFF if retry_exponential_backoff is None
                                      else retry_exponential_backoff),
        "max_retry_delay": COMMIT_MAX_RETRY_DELAY if max_retry_delay is None
        else max_retry_delay,
    }


def abort_reason(task: Any, context: Any, reason: str) -> str:
    """The reason an abort task records: ``reason`` as given, or, for the default one, the
    upstream protocol tasks that failed (``aborted by the DAG run (counts.abort):
    counts.commit failed ...``), read from Airflow's task states of this run.
    When the states cannot be read the default text is kept: the abort never fails on
    its reason."""
    ti = context["ti"]
    default = DEFAULT_ABORT_REASON.replace("{{ ti.task_id }}", ti.task_id)
    if reason != default:
        return reason
    upstream = sorted(getattr(task, "upstream_task_ids", ()) or ())
    try:
        states = ti.get_task_states(dag_id=ti.dag_id, task_ids=upstream,
                                    run_ids=[ti.run_id]).get(ti.run_id, {})
    except Exception as exc:  # noqa: BLE001 - the reason is a courtesy, the abort is not
        log.info("could not read the upstream task states for the abort's reason: %s", exc)
        return reason
    failed = [t for t in upstream if str(states.get(t)).lower().endswith("failed")
              and "upstream" not in str(states.get(t)).lower()]
    if not failed:
        return reason
    return f"{default}: {' and '.join(failed)} failed (retries used up, or marked failed)"


class AbortTask:
    """What the single-target and the group abort operators share: the task whose
    transaction they abort, the reason (:func:`abort_reason`), and ``fail_run`` — an
    abort that is the run's *outcome* (a rejection at the approval gate) fails the task
    after aborting, with no retry, so the run is not taken as committed.  Both declare
    these arguments with the same defaults, and neither can forget the XCom push before
    the failure (the result must stay visible on a failed task)."""

    submit_task_id: str
    reason: str
    fail_run: bool

    def _init_abort(self, submit_task_id: str, reason: str, fail_run: bool) -> None:
        self.submit_task_id = submit_task_id
        self.reason = reason
        self.fail_run = fail_run

    def _abort_result(self, context: Any, result: dict[str, Any], what: str
                      ) -> dict[str, Any]:
        """``result``, or, with ``fail_run``, the task failed (``what``: the aborted
        "transaction" or "group transaction") once the result is pushed."""
        if not self.fail_run:
            return result
        from airflow.sdk.exceptions import AirflowFailException

        context["ti"].xcom_push(key="return_value", value=result)
        raise AirflowFailException(
            f"{self.reason}: the run's {what} was aborted "
            f"({', '.join(result['aborted']) or 'nothing left to abort'}); "
            "failing the run so the epoch is not taken as committed")

    def get_openlineage_facets_on_failure(self, task_instance: Any) -> Any:
        """A failed abort names its outputs as a finished one does; a rejection
        (``fail_run``) fails after aborting, so its FAIL event names what it aborted."""
        return self.get_openlineage_facets_on_complete(task_instance)  # type: ignore[attr-defined]


@contextmanager
def refusals_fail_at_once() -> Iterator[None]:
    """Run a commit so that a *refusal* fails the task for good, with no retry: the
    attempt was aborted or fenced, another commit decided it otherwise, staging does not
    match what was validated, it expired, or the ledger is damaged — no retry can change
    that, and retrying would only hold the ``abort`` task back.  Anything else (a store
    that failed after its own retries, a lost connection, a crash) is raised as it is, so
    Airflow retries the idempotent commit."""
    from airflow.sdk.exceptions import AirflowFailException

    from airflow_tpc.errors import (
        CommitConflict,
        FencedError,
        InvalidState,
        LedgerError,
        ManifestError,
        NamespaceConflict,
        PlacementError,
        TransactionExpired,
    )

    try:
        yield
    except (InvalidState, FencedError, CommitConflict, ManifestError, TransactionExpired,
            LedgerError, NamespaceConflict, PlacementError) as exc:
        raise AirflowFailException(f"commit refused ({type(exc).__name__}, not retried): "
                                   f"{exc}") from exc
