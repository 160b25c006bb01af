"""Commit / abort / recover through a proxy that fails 10% of S3 requests.

Each run is a seeded sequence of epochs (see :mod:`.workload`); the fault kinds
are spread evenly over 500 InternalError, 503 SlowDown, a dropped connection
before the request reaches the store, one after it took effect, a 500 after it
took effect, and a response cut mid-body, on every S3 operation; 5% of requests
also get 5-30 ms of extra latency.  What must hold at the end:

- exactly-once: each epoch's read-committed content is its last committed
  attempt's, and a plain listing of the target shows the same files;
- nothing staged by a finished transaction is left, no attempt is left open;
- retries stay bounded: no SDK call made more than ``max_attempts + 1``
  attempts (botocore's ``max_attempts`` counts retries), every call declared
  that budget, and total retry traffic stays near what the fault rate implies;
- a second restore through the faulty store finds nothing to do.

Runs: "move" and "manifest" promotion, and "move-multipart" (every promotion
copy as a multipart ``UploadPartCopy``, the path of objects over 5 GiB).
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from airflow_tpc import Sink, SinkConfig, TxnState
from airflow_tpc.storage.s3 import S3Storage

from ..core.helpers import assert_invariant
from .conftest import MAX_ATTEMPTS
from .proxy import Fault, FaultPlan, FaultProxy, Op
from .workload import ReadCommittedProbe, Workload

FAULT_RATE = 0.10
EPOCHS = 25


def _sinks(bucket: str, proxied: dict[str, Any], direct: dict[str, Any],
           promotion: str) -> tuple[Sink, Sink]:
    """(sink through the proxy, observer straight to moto).

    ``"move-multipart"``: "move" promotion with every copy done as a multipart
    ``UploadPartCopy`` (threshold 0), the path objects over 5 GiB take.
    """
    target = f"s3://{bucket}/tables/events"
    config = SinkConfig(promotion=promotion.split("-")[0], copy_workers=4)
    storage = None
    if promotion == "move-multipart":
        storage = S3Storage(proxied, copy_workers=4, multipart_threshold=0)
    return (Sink(target, "events", storage_options=proxied, config=config, storage=storage),
            Sink(target, "events", storage_options=direct, config=config))


def assert_converged(work: Workload) -> None:
    """Exactly-once, no leftovers, no open attempts, every epoch's state as decided."""
    observer = work.observer
    expected = {e: list(c) for e, c in work.final.items()}
    assert_invariant(observer, expected, open_staging_ok=False)
    by_epoch: dict[str, list] = {}
    for info in observer.describe():
        by_epoch.setdefault(info.epoch, []).append(info)
        assert info.state in (TxnState.COMMITTED, TxnState.ABORTED), \
            f"{info.txn_id} left {info.state} after recover(abort_undecided=True)"
    for epoch, infos in by_epoch.items():
        live = [i for i in infos if i.state is TxnState.COMMITTED and not i.superseded]
        if epoch in work.final:
            assert len(live) == 1 and live[0].published, f"epoch {epoch}: {live}"
        else:
            assert live == [], f"epoch {epoch} was never committed but has {live}"


def assert_retries_bounded(proxy: FaultProxy, rate: float) -> None:
    """Per SDK call at most max_attempts + 1 attempts; retry volume near the fault rate."""
    st = proxy.stats
    budget = MAX_ATTEMPTS + 1
    worst = st.attempts_per_invocation()
    assert all(n <= budget for n in worst.values()), f"an SDK call retried past {budget}: {worst}"
    assert set(st.max_declared) <= {budget}, \
        f"SDK calls declared retry budgets {dict(st.max_declared)}, configured {budget}"
    assert sum(st.untracked.values()) == 0, f"requests without an SDK invocation id: {st.untracked}"
    for inv in st.resends():  # aiohttp's one re-send of an idempotent request, nothing else
        assert inv.client == "aiobotocore" and inv.method in ("GET", "HEAD", "PUT"), inv
        assert max(inv.attempts.values()) <= 2, inv
    calls = st.invocation_count()
    for op, n in st.requests.items():
        # Requests of an op: one per call, plus retries of the calls that met a fault.
        assert n <= calls[op] * budget * 2
        assert n - calls[op] <= 3 * rate * calls[op] + 10, \
            f"{op}: {n} requests for {calls[op]} calls at fault rate {rate}"


@pytest.mark.parametrize(("promotion", "seed"), [
    ("move", 1), ("move", 2), ("manifest", 3), ("move-multipart", 4), ("move", 5),
])
def test_epochs_converge_exactly_once_under_faults(proxy: FaultProxy, fault_bucket: str,
                                                   proxied_options: dict[str, Any],
                                                   direct_options: dict[str, Any],
                                                   direct_client: Any,
                                                   promotion: str, seed: int) -> None:
    sink, observer = _sinks(fault_bucket, proxied_options, direct_options, promotion)
    proxy.seed = seed
    proxy.plan = FaultPlan.uniform(FAULT_RATE, latency_rate=0.05)
    work = Workload(sink, observer, ReadCommittedProbe(direct_client, observer),
                    random.Random(seed), multipart=promotion == "move-multipart")
    work.run(EPOCHS)
    work.finish()
    assert_converged(work)
    assert_retries_bounded(proxy, FAULT_RATE)
    kinds = proxy.stats.injected_by_kind()
    assert all(kinds[k] > 0 for k in (Fault.ERROR_500, Fault.SLOWDOWN_503, Fault.DROP_BEFORE,
                                      Fault.DROP_AFTER, Fault.ERROR_500_AFTER, Fault.TRUNCATE))
    took_effect = proxy.stats.injected[(Op.CONDITIONAL_PUT, Fault.DROP_AFTER)] \
        + proxy.stats.injected[(Op.CONDITIONAL_PUT, Fault.ERROR_500_AFTER)]
    assert took_effect > 0  # the nasty case was exercised

    # A second restore through the faulty store finds nothing to do and changes nothing.
    before = work.probe.view()
    report = work.call("recover", lambda: sink.recover(abort_undecided=True))
    assert (report.rolled_forward, report.aborted, report.cleaned) == ([], [], [])
    assert work.probe.view() == before
    # Incomplete multipart uploads (a create whose response was lost) are invisible to
    # readers; only a bucket lifecycle rule removes them.  Reported, not asserted.
    orphans = len(direct_client.list_multipart_uploads(Bucket=fault_bucket).get("Uploads", []))
    print(f"seed {seed} {promotion}: {dict(work.actions)}; {proxy.stats.summary()}; "
          f"verb failures {sum(work.verb_failures.values())} {dict(work.verb_failures)}; "
          f"views checked {work.views_checked}; conditional puts that took effect unheard "
          f"{took_effect}; orphan multipart uploads {orphans}")
