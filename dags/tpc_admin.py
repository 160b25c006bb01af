"""Admin DAG: look at and act on a target's transaction ledger from the Airflow UI.

Trigger it with the Params form: target, namespace, epoch, action
(status / abort / recover / expire).  Credentials for an S3 target come from the
connection named in ``storage_conn_id``; they are never a parameter.
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG, Param, task

with DAG(
    dag_id="tpc_admin",
    description="Status / abort / recover / expire transactions of an airflow-tpc target",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    tags=["airflow-tpc", "admin"],
    params={
        "target": Param("/tmp/airflow-tpc/daily_event_counts", type="string",
                        description="Target URI (/abs/path or s3://bucket/prefix)"),
        "namespace": Param("tpc_daily_events", type="string",
                           description="The pipeline's namespace (transactional id)"),
        "epoch": Param("", type="string", description="Epoch, e.g. 2026-11-20 (empty: all)"),
        "attempt": Param(0, type="integer", minimum=0,
                         description="Attempt to abort (0: every open attempt of the epoch)"),
        "action": Param("status", type="string", enum=["status", "abort", "recover", "expire"]),
        "abort_undecided": Param(False, type="boolean",
                                 description="recover: also abort every undecided attempt "
                                             "(only when no job of the target is running)"),
        "storage_conn_id": Param("", type="string",
                                 description="Connection with S3 credentials (optional)"),
        "reason": Param("aborted from the tpc_admin DAG", type="string"),
    },
) as dag:

    @task
    def act(params: dict | None = None) -> dict:
        """Run the chosen action; the result (ids, states, counts) is the task's XCom."""
        from airflow_tpc.airflow.hooks.tpc import TpcHook
        from airflow_tpc.airflow.utils.admin import run_action

        p = params or {}
        hook = TpcHook(p["target"], p["namespace"],
                       storage_conn_id=p.get("storage_conn_id") or None)
        result = run_action(hook.get_sink(), p["action"], epoch=p.get("epoch") or None,
                            attempt=p.get("attempt") or None, reason=p.get("reason") or "",
                            abort_undecided=bool(p.get("abort_undecided")))
        if p["action"] == "status" and not p.get("epoch"):
            # The health gauges an on-call alert watches (scheduled status runs).
            result["health"] = hook.emit_health()
        for line in result.get("transactions", []):
            print(f"{line['txn_id']:40} {line['state']:12} published={line['published']} "
                  f"files={line['files']} rows={line['rows']} staging_files="
                  f"{line['staging_files']}")
        return result

    act()
