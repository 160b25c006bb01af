"""No orphaned Spark application of a GROUP attempt (issue 33 §2): real Airflow, real Spark.

``tpc_it_orphan_group``'s submit task (``GroupSparkSubmitOperator``, in a child process's
``dag.test``) runs tests/spark/jobs/block_app.py as a group attempt over two folders; the
job never ends by itself.  The group's abort task (``GroupAbortOperator`` of the same DAG)
aborts the attempt from this process: within 30 s no process of the application may be
alive — found by the job's ``--flag`` path on their command lines and the pids the job
published (:class:`tests.airflow.test_orphan_app._Run`), not by the code's marker.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from airflow_tpc import Sink, TxnState

from .test_orphan_app import _assert_gone, _Run

pytestmark = pytest.mark.timeout(600)

DAG_ID = "tpc_it_orphan_group"
EPOCH = "2026-06-11"


class _AbortTI:
    """What the abort task reads of its task instance: the submit's XCom (only the epoch
    and attempt: the operator re-reads the transaction from the group's ledger) and its
    identity (the reason is given, so no task state is read)."""

    dag_id, run_id, task_id = DAG_ID, "manual", "abort"

    def __init__(self, epoch: str, attempt: int) -> None:
        self.doc = {"epoch": epoch, "attempt": attempt}

    def xcom_pull(self, task_ids: str, key: str) -> dict[str, Any]:
        assert (task_ids, key) == ("submit", "tpc_group_txn")
        return self.doc


@pytest.fixture
def group_run(tmp_path, dagbag):
    r = _Run(tmp_path, DAG_ID, EPOCH)
    yield r
    r.stop()


def test_group_abort_task_stops_the_group_application(group_run, dagbag, data_root):
    """The group's abort task stops the group attempt's application after its decision,
    and every member's attempt is aborted with the abort's reason."""
    procs = group_run.wait_running()
    members = {n: Sink(os.path.join(data_root, f"{DAG_ID}_{n}"), DAG_ID) for n in "ab"}
    attempt = members["a"].describe(EPOCH)[-1].attempt
    # the runtime record, once per member: one marker (one application), the group named
    records = {n: json.loads(Path(s.layout.root, "_tpc", "runtime", f"epoch={EPOCH}",
                                  f"attempt={attempt:06d}.json").read_text())
               for n, s in members.items()}
    assert len({r["marker"] for r in records.values()}) == 1
    assert {r["group"] for r in records.values()} == {f"{DAG_ID}/{EPOCH}/{attempt}"}
    assert all(r["pid"] in {p.pid for p in procs} for r in records.values())

    abort = dagbag.get_dag(DAG_ID).get_task("abort")
    t0 = time.monotonic()
    result = abort.execute({"ti": _AbortTI(EPOCH, attempt)})
    assert result == {"aborted": [f"{DAG_ID}/{EPOCH}/{attempt}"], "committed": []}
    took = _assert_gone(procs, t0, "group attempt aborted by its abort task")
    print(f"[group application gone {took:.1f} s after the abort task began]")
    assert group_run.proc.wait(120) == 0  # dag.test ends (submit failed, abort ran)
    for sink in members.values():
        info = [i for i in sink.describe(EPOCH) if i.attempt == attempt][0]
        assert info.state is TxnState.ABORTED and info.reason == "group: rejected by the test"
        assert not info.staging_files
