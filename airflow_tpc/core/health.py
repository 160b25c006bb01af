"""What an on-call alert watches on a target: how many attempts are open, sealed or
decided but unfinished, and how old the oldest undecided one is.

Derived from :meth:`Sink.describe` (the one state derivation), so it costs what
``describe`` costs: one listing of the ledger and a read of each attempt's records.
That is why the protocol's own calls never compute it; the Airflow tasks that touch a
ledger send it once their work is done, while metrics are on
(:func:`airflow_tpc.airflow.utils.metrics.health_at_end`), and the admin DAG's ``status``
(or any task calling :meth:`TpcHook.emit_health`) between runs.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from .transaction import TxnInfo, TxnState

_UNDECIDED = (TxnState.OPEN, TxnState.PRECOMMITTED)
_ABORTED = (TxnState.ABORTED, TxnState.EXPIRED)


@dataclass(frozen=True)
class TargetHealth:
    """Counts of a target's attempts by what they still need, and the oldest undecided
    attempt's age in seconds (0 when there is none)."""

    #: begun, not pre-committed: a job is writing (or died without an abort)
    open: int
    #: sealed, waiting for its commit (or an approval)
    precommitted: int
    #: decided, not finished: a commit not yet promoted, or an abort whose staging is
    #: still there (a task died between the decision and the end: recover finishes it)
    unfinished: int
    oldest_undecided_age_s: float

    @classmethod
    def of(cls, infos: Iterable[TxnInfo], now: float | None = None) -> TargetHealth:
        now = time.time() if now is None else now
        open_ = sealed = unfinished = 0
        oldest = 0.0
        for info in infos:
            if info.state in _UNDECIDED:
                open_ += info.state is TxnState.OPEN
                sealed += info.state is TxnState.PRECOMMITTED
                if info.started_at is not None:
                    oldest = max(oldest, now - info.started_at)
            elif info.state is TxnState.COMMITTED:
                unfinished += not info.published and not info.superseded
            elif info.state in _ABORTED:
                unfinished += info.staging_files > 0
        return cls(open_, sealed, unfinished, round(max(oldest, 0.0), 3))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
