"""OpenLineage of an abort made outside a task: the UI plugin's run page and its API.

An abort task's events come from Airflow's listener (it asks the operator).  An abort
from the run page or ``POST /airflow-tpc/api/abort`` runs in the API server, where no
task and so no listener is involved: without an event of its own, lineage would show
the attempt as never ended.  :func:`emit_abort` sends one ``ABORT`` run event through
the OpenLineage provider's own client (its configured transport, redaction and
emission policy for the DAG), job ``<dag_id>.<task_id>`` of the task that began the
transaction, naming every target as an output with the ``airflowTpc`` facet of the
attempt aborted (outcome ``aborted``).

It never raises and never blocks the abort: the abort's decision is the ledger's; a
lineage backend that is down costs a warning.  Nothing happens when the OpenLineage
provider is not installed, is disabled, or its emission policy mutes the DAG.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

log = logging.getLogger(__name__)


def abort_summary(epoch: str, namespace: str, aborted: Sequence[str]
                  ) -> dict[str, Any] | None:
    """The lineage summary of aborts of an epoch (``aborted``: their txn ids): the
    highest attempt aborted, and all of them (a run's earlier tries too); None when
    nothing was aborted.  Pure: the abort tasks use it without the provider installed."""
    attempts = sorted((int(t.rsplit("/", 1)[1]), t) for t in aborted)
    if not attempts:
        return None
    attempt, txn_id = attempts[-1]
    return {"epoch": epoch, "attempt": attempt, "txn_id": txn_id, "namespace": namespace,
            "outcome": "aborted", "aborted_attempts": attempts}


def emit_abort(dag_id: str, task_id: str,
               aborted: Sequence[tuple[Any, dict[str, Any] | None]]) -> bool:
    """Emit the ABORT event of ``(sink, summary)`` pairs (summary: :func:`abort_summary`'s,
    None for a target named without a transaction facet).  True when it was sent."""
    try:
        from airflow.providers.openlineage import conf as ol_conf
        from airflow.providers.openlineage.plugins.listener import get_openlineage_listener
        from airflow.providers.openlineage.utils.emission_policy import (
            resolve_dag_emission_policy,
        )
        from airflow.providers.openlineage.utils.utils import _PRODUCER
        from openlineage.client.event_v2 import Job, Run, RunEvent, RunState
        from openlineage.client.uuid import generate_new_uuid

        from airflow_tpc.airflow.utils.lineage import output, sink_identity
        from airflow_tpc.tables.history import shown_target
    except ImportError:  # no OpenLineage provider: no lineage
        return False
    try:
        if ol_conf.is_disabled() or not resolve_dag_emission_policy(dag_id).emit:
            return False
        outputs = [output(*sink_identity(sink), shown_target(sink), summary)
                   for sink, summary in aborted]
        event = RunEvent(eventType=RunState.ABORT,
                         eventTime=datetime.now(timezone.utc).isoformat(),
                         run=Run(runId=str(generate_new_uuid())),
                         job=Job(namespace=ol_conf.namespace(), name=f"{dag_id}.{task_id}"),
                         producer=_PRODUCER, outputs=outputs)
        get_openlineage_listener().adapter.emit(event)  # logs its own failures
        return True
    except Exception as exc:  # lineage never fails an abort the ledger already decided
        log.warning("No OpenLineage event for the abort of %s.%s: %s", dag_id, task_id, exc)
        return False
