"""A lost commit try costs a retry, not the epoch (issue 33 §1): the commit tasks retry by
default, every task of the task group takes its own Airflow arguments, and the abort task
runs only once the commit failed for good, naming why.

Real parts: the migrated Airflow DB and ``dag.test()`` runs of the public wiring
(``exactly_once_tasks`` / ``exactly_once_group_tasks``, tests/airflow/dags/
tpc_it_commit_retry.py) on local folders.  A commit try "lost" before its decision is a
try that fails at the protocol's ``commit.before_decision`` step (a crash point armed in
this process, where dag.test runs the task): to Airflow it is a failed try, as a killed
worker's task is once its heartbeat times out (tests/airflow/test_production_airflow.py
kills a real Celery worker).
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from airflow_tpc import Sink, TxnState
from airflow_tpc.core.faults import armed

from .helpers import day, published, states, tries

pytestmark = pytest.mark.timeout(900)

SINGLE, GROUP = "tpc_it_commit_retry", "tpc_it_group_commit_retry"


class _Lost:
    """A crash-point action that fails the first ``n`` passes (then lets them through)."""

    def __init__(self, n: int) -> None:
        self.left = n

    def __call__(self, name: str) -> None:
        if self.left > 0:
            self.left -= 1
            raise RuntimeError(f"the commit's try was lost at {name}")


def _build(**kwargs):
    from airflow.sdk import DAG

    from airflow_tpc.airflow import exactly_once_spark_group

    default_args = kwargs.pop("default_args", None)
    with DAG(f"retry_args_{id(kwargs)}", schedule=None, start_date=datetime(2026, 1, 1),
             default_args=default_args or {}) as dag:
        exactly_once_spark_group("g", application="job.py", namespace="n", **kwargs)
    return {t.task_id.split(".", 1)[1]: t for t in dag.tasks}


@pytest.mark.parametrize("where", [{"target": "/data/t"},
                                   {"targets": {"a": "/data/a", "b": "/data/b"}}],
                         ids=["single", "group"])
def test_commit_retries_by_default_and_every_task_takes_its_own_arguments(airflow_db, where):
    tasks = _build(**where)
    commit = tasks["commit"]
    assert (commit.retries, commit.retry_delay, commit.retry_exponential_backoff,
            commit.max_retry_delay) == (3, timedelta(seconds=15), 2.0, timedelta(minutes=5))
    # the DAG's default_args win over the commit's default, as for any operator argument
    assert _build(default_args={"retries": 0}, **where)["commit"].retries == 0
    tasks = _build(commit_kwargs={"retries": 7, "queue": "commits"},
                   task_kwargs={"wait_precommit": {"pool": "sensors", "retries": 2},
                                "abort": {"retries": 4}, "commit": {"retries": 1}},
                   sensor_kwargs={"retries": 5}, **where)
    assert (tasks["commit"].retries, tasks["commit"].queue) == (7, "commits")
    assert (tasks["wait_precommit"].pool, tasks["wait_precommit"].retries) == ("sensors", 5)
    assert tasks["abort"].retries == 4
    tasks = _build(task_kwargs={"submit": {"retries": 2}}, **where)
    assert tasks["submit"].retries == 2
    with pytest.raises(ValueError, match="task_kwargs names no task 'comit'.*submit, "
                                         "wait_precommit, commit, abort"):
        _build(task_kwargs={"comit": {"retries": 1}}, **where)


def test_the_wiring_after_a_submit_of_ones_own_refuses_arguments_for_that_submit(airflow_db):
    from airflow.providers.standard.operators.empty import EmptyOperator
    from airflow.sdk import DAG

    from airflow_tpc.airflow.utils.task_group import exactly_once_tasks

    with DAG("retry_args_own_submit", schedule=None, start_date=datetime(2026, 1, 1)):
        submit = EmptyOperator(task_id="submit")
        with pytest.raises(ValueError, match="task_kwargs names no task after submit: submit"):
            exactly_once_tasks(submit, target="/data/t", namespace="n",
                               task_kwargs={"submit": {"retries": 1}})
        tasks = exactly_once_tasks(submit, target="/data/t", namespace="n",
                                   task_kwargs={"commit": {"retries": 0}})
    assert tasks["commit"].retries == 0


def test_a_commit_try_lost_before_its_decision_is_retried_and_publishes_once(dagbag,
                                                                             data_root):
    from .dags.tpc_it_commit_retry import NAMESPACE, TARGET

    lost = _Lost(2)
    with armed("commit.before_decision", lost):
        dr = dagbag.get_dag(SINGLE).test(logical_date=day("2026-08-01"),
                                         run_conf={"epoch": "2026-08-01"})
    assert lost.left == 0
    st = states(dr)
    assert dr.state == "success", st
    assert (st["commit"], tries(dr, "commit"), st["abort"]) == ("success", 3, "skipped"), st
    infos = Sink(TARGET, NAMESPACE).describe("2026-08-01")
    assert [(i.attempt, i.state, i.published) for i in infos] == [
        (1, TxnState.COMMITTED, True)]
    assert published(TARGET)["2026-08-01"] == ["part-0.parquet"]


def test_a_group_commit_try_lost_before_its_decision_is_retried(dagbag, data_root):
    from .dags.tpc_it_commit_retry import open_group

    lost = _Lost(1)
    with armed("group.before_decision", lost):
        dr = dagbag.get_dag(GROUP).test(logical_date=day("2026-08-02"),
                                        run_conf={"epoch": "2026-08-02"})
    assert lost.left == 0
    st = states(dr)
    assert dr.state == "success", st
    assert (st["commit"], tries(dr, "commit"), st["abort"]) == ("success", 2, "skipped"), st
    group = open_group()
    assert group.stable_epochs()["2026-08-02"] == 1
    for sink in group.sinks.values():
        assert [(i.attempt, i.state, i.published) for i in sink.describe("2026-08-02")] == [
            (1, TxnState.COMMITTED, True)]


def test_the_abort_runs_once_the_commit_failed_for_good_and_says_so(dagbag, data_root):
    from .dags.tpc_it_commit_retry import NAMESPACE, TARGET

    lost = _Lost(100)
    with armed("commit.before_decision", lost):
        dr = dagbag.get_dag(SINGLE).test(logical_date=day("2026-08-03"),
                                         run_conf={"epoch": "2026-08-03"})
    assert 100 - lost.left == 4  # the first try and its 3 default retries
    st = states(dr)
    assert dr.state == "failed" and (st["commit"], st["abort"]) == ("failed", "success"), st
    [info] = Sink(TARGET, NAMESPACE).describe("2026-08-03")
    assert info.state is TxnState.ABORTED
    assert info.reason == ("aborted by the DAG run (abort): commit failed (retries used up, "
                           "or marked failed)"), info.reason
    assert "2026-08-03" not in published(TARGET)


def test_a_refused_commit_fails_at_once_without_retries(dagbag, data_root):
    """A user aborts the attempt (as the run page does) while the commit checks staging:
    the commit's decision finds the abort, the refusal fails the task for good (one try,
    not four), and the abort task runs at once."""
    from .dags.tpc_it_commit_retry import NAMESPACE, TARGET

    sink = Sink(TARGET, NAMESPACE)

    def abort_meanwhile(name: str) -> None:
        sink.abort(sink.transaction("2026-08-04", 1), "aborted from the run page")

    with armed("commit.before_decision", abort_meanwhile):
        dr = dagbag.get_dag(SINGLE).test(logical_date=day("2026-08-04"),
                                         run_conf={"epoch": "2026-08-04"})
    st = states(dr)
    assert (st["commit"], tries(dr, "commit"), st["abort"]) == ("failed", 1, "success"), st
    [info] = sink.describe("2026-08-04")
    assert (info.state, info.reason) == (TxnState.ABORTED, "aborted from the run page")
    assert "2026-08-04" not in published(TARGET)
