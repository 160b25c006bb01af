"""Writes that took effect although the client never heard: each protocol write, one at a time.

A conditional put whose response is lost is retried by the SDK and then gets
412 — from its *own* first write.  Every put-if-absent in the protocol must
read that as "created by me" (identical content), or a begin would skip an
attempt number, a commit would report a conflict with itself, and a marker
compare-and-swap would loop.  Each test aims one fault (``proxy.script``) at
one exact request and checks the verb's outcome, not just eventual convergence.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from airflow_tpc import Sink, SinkConfig, TxnState
from airflow_tpc.core.ledger import PUBLISHED_MARKER
from airflow_tpc.storage.s3 import S3Storage

from ..core.helpers import assert_invariant, committed_contents, stage
from .conftest import options_for
from .proxy import Fault, FaultProxy, Op, Request

AFTER = [Fault.DROP_AFTER, Fault.ERROR_500_AFTER]


def _sink(proxy: FaultProxy, bucket: str, max_attempts: int = 3, **config: Any) -> Sink:
    return Sink(f"s3://{bucket}/t", "events",
                storage_options=options_for(proxy.endpoint, max_attempts=max_attempts),
                config=SinkConfig(**config))


def once(fault: Fault, op: Op, path_end: str) -> Callable[[Request, Op, int], Fault | None]:
    """Fault only the first request of ``op`` whose path ends with ``path_end``."""
    hit: list[str] = []

    def script(req: Request, seen_op: Op, n: int) -> Fault | None:
        if seen_op is op and req.path.endswith(path_end) and not hit:
            hit.append(req.path)
            return fault
        return None

    script.hit = hit  # type: ignore[attr-defined]
    return script


@pytest.mark.parametrize("fault", AFTER)
def test_begin_keeps_its_attempt_number(proxy: FaultProxy, fault_bucket: str,
                                        fault: Fault) -> None:
    sink = _sink(proxy, fault_bucket)
    proxy.script = once(fault, Op.CONDITIONAL_PUT, "/begin.json")
    txn = sink.begin("1")
    assert proxy.script.hit  # type: ignore[attr-defined]
    assert txn.attempt == 1 and [i.attempt for i in sink.describe("1")] == [1]


@pytest.mark.parametrize("fault", AFTER)
def test_commit_decision_counts_as_made_by_this_call(proxy: FaultProxy, fault_bucket: str,
                                                     fault: Fault) -> None:
    sink = _sink(proxy, fault_bucket)
    txn, manifest = stage(sink, "1", {"a.parquet": b"A"})
    proxy.script = once(fault, Op.CONDITIONAL_PUT, "/decision.json")
    result = sink.commit(txn, expected_digest=manifest.digest)
    assert proxy.script.hit  # type: ignore[attr-defined]
    assert result.outcome == "committed"
    assert_invariant(sink, {"1": [b"A"]}, open_staging_ok=False)


@pytest.mark.parametrize("fault", AFTER)
@pytest.mark.parametrize("first", [True, False])
def test_marker_swap_sees_its_own_write(proxy: FaultProxy, fault_bucket: str, fault: Fault,
                                        first: bool) -> None:
    """put-if-absent (first publication) and put-if-match (a rerun) of the marker."""
    sink = _sink(proxy, fault_bucket)
    if not first:
        txn, _ = stage(sink, "1", {"a.parquet": b"old"})
        sink.commit(txn)
    txn, _ = stage(sink, "1", {"a.parquet": b"new"})
    proxy.script = once(fault, Op.CONDITIONAL_PUT, PUBLISHED_MARKER)
    assert sink.commit(txn).outcome == "committed"
    assert proxy.script.hit  # type: ignore[attr-defined]
    assert_invariant(sink, {"1": [b"new"]}, open_staging_ok=False)


@pytest.mark.parametrize("fault", AFTER)
def test_abort_decision_and_namespace_claim(proxy: FaultProxy, fault_bucket: str,
                                            fault: Fault) -> None:
    proxy.script = once(fault, Op.CONDITIONAL_PUT, "/sink.json")
    sink = _sink(proxy, fault_bucket)
    txn, _ = stage(sink, "1", {"a.parquet": b"A"})
    assert proxy.script.hit  # type: ignore[attr-defined]
    proxy.script = once(fault, Op.CONDITIONAL_PUT, "/decision.json")
    sink.abort(txn)
    assert [i.state for i in sink.describe("1")] == [TxnState.ABORTED]
    assert_invariant(sink, {}, open_staging_ok=False)


@pytest.mark.parametrize("fault", AFTER)
def test_decision_took_effect_but_its_answer_was_lost(proxy: FaultProxy, fault_bucket: str,
                                                      direct_client: Any, fault: Fault) -> None:
    """No SDK retries: the decision's conditional put took effect, its answer was lost.

    The commit reads the decision back and finishes in the same call: reported as
    ``already_committed`` (it cannot tell its own lost write from a concurrent
    committer's); a retried commit is a no-op.
    """
    sink = _sink(proxy, fault_bucket, max_attempts=0)
    txn, _ = stage(sink, "1", {"a.parquet": b"A"})
    proxy.script = once(fault, Op.CONDITIONAL_PUT, "/decision.json")
    assert sink.commit(txn).outcome == "already_committed"
    assert proxy.script.hit  # type: ignore[attr-defined]
    proxy.script = None
    assert [i.state for i in sink.describe("1")] == [TxnState.COMMITTED]
    assert_invariant(sink, {"1": [b"A"]}, open_staging_ok=False)
    assert sink.commit(txn).outcome == "already_committed"
    assert_invariant(sink, {"1": [b"A"]}, open_staging_ok=False)


def _commit_with_failing_cleanup(proxy: FaultProxy, sink: Sink) -> tuple[Any, Any, Any]:
    """Epoch 1: an abandoned attempt with staged files, then a rerun whose commit
    cannot delete the abandoned attempt's staging (a 500 on that DELETE)."""
    abandoned = sink.begin("1")
    sink.storage.put(sink.storage.join(sink.layout.staging("1", abandoned.attempt), "x.parquet"),
                     b"zombie")
    txn, _ = stage(sink, "1", {"a.parquet": b"A"})
    # Deletes, in order: the rerun's own staging (promotion), its pending-index entry
    # (after published.json), then the abandoned attempt's staging: fail the third.
    proxy.script = lambda req, op, n: Fault.ERROR_500 if op is Op.DELETE and n == 2 else None
    try:
        result = sink.commit(txn)
    finally:
        proxy.script = None
    return txn, abandoned, result


def test_commit_survives_a_failed_cleanup_of_a_displaced_attempt(proxy: FaultProxy,
                                                                 fault_bucket: str) -> None:
    """Removing a displaced attempt's staging is best effort (docs/PROTOCOL.md §6).

    The rerun's commit is decided and published before it aborts the abandoned
    attempt; when deleting that attempt's staging fails, the commit must still
    succeed (a failure here used to fail the commit task after publication, and
    its retry found the epoch published already), leaving the files to recover.
    """
    sink = _sink(proxy, fault_bucket, max_attempts=0)
    txn, abandoned, result = _commit_with_failing_cleanup(proxy, sink)
    assert result.outcome == "committed"
    infos = {i.attempt: i for i in sink.describe("1")}
    assert infos[txn.attempt].published and committed_contents(sink) == {"1": [b"A"]}
    assert infos[abandoned.attempt].state is TxnState.ABORTED
    assert infos[abandoned.attempt].staging_files == 1  # left for later, not lost
    sink.recover()
    assert_invariant(sink, {"1": [b"A"]}, open_staging_ok=False)


def test_a_failed_delete_of_a_pending_index_entry_never_fails_the_commit(
        proxy: FaultProxy, fault_bucket: str) -> None:
    """The entry is dropped after ``published.json``: the data is visible by then, so a
    500 on that DELETE must not fail the commit; the next commit drops the entry."""
    sink = _sink(proxy, fault_bucket, max_attempts=0)
    txn, _ = stage(sink, "1", {"a.parquet": b"A"})
    proxy.script = lambda req, op, n: Fault.ERROR_500 if op is Op.DELETE and n == 1 else None
    try:
        assert sink.commit(txn).outcome == "committed"
    finally:
        proxy.script = None
    entry = sink.layout.pending_entry("1", txn.attempt)
    assert sink.storage.exists(entry)  # stale: its attempt is finished
    other, _ = stage(sink, "2", {"b.parquet": b"B"})
    assert sink.commit(other).rolled_forward == []
    assert not sink.storage.exists(entry)
    assert_invariant(sink, {"1": [b"A"], "2": [b"B"]}, open_staging_ok=False)


def test_retried_commit_cleans_the_attempt_it_aborted(proxy: FaultProxy,
                                                      fault_bucket: str) -> None:
    sink = _sink(proxy, fault_bucket, max_attempts=0)
    txn, _, _ = _commit_with_failing_cleanup(proxy, sink)
    assert sink.commit(txn).outcome == "already_committed"
    assert_invariant(sink, {"1": [b"A"]}, open_staging_ok=False)


def _multipart_storage(proxy: FaultProxy) -> S3Storage:
    return S3Storage(options_for(proxy.endpoint, max_attempts=3), copy_workers=1,
                     multipart_threshold=0)


def test_multipart_complete_took_effect(proxy: FaultProxy, fault_bucket: str,
                                        direct_client: Any) -> None:
    """CompleteMultipartUpload applied, response lost: the SDK's retry completes again.

    moto 5.2 answers a retried complete of a completed upload with success (so
    does S3 for a while); the copy succeeds and leaves no upload open.  Were a
    store to answer NoSuchUpload instead, the copy would fail to the caller and
    the restartable promotion would copy again on the next try.
    """
    b = fault_bucket
    direct_client.put_object(Bucket=b, Key="src", Body=b"payload")

    def script(req: Request, op: Op, n: int) -> Fault | None:
        complete = op is Op.MULTIPART and req.method == "POST" and "uploadId" in req.query
        return Fault.DROP_AFTER if complete and n == 0 else None

    proxy.script = script
    _multipart_storage(proxy).copy_many([(f"{b}/src", f"{b}/dst")], {f"{b}/src": 7})
    assert proxy.stats.injected == {(Op.MULTIPART, Fault.DROP_AFTER): 1}
    assert direct_client.get_object(Bucket=b, Key="dst")["Body"].read() == b"payload"
    assert direct_client.list_multipart_uploads(Bucket=b).get("Uploads", []) == []


def test_multipart_create_took_effect_leaves_an_orphan_upload(
        proxy: FaultProxy, fault_bucket: str, direct_client: Any) -> None:
    """CreateMultipartUpload applied, response lost: the retry opens a second upload.

    The copy succeeds, but the first upload id was never seen by the client, so
    nothing can abort it: only an ``AbortIncompleteMultipartUpload`` lifecycle
    rule on the bucket cleans these up (invisible to readers, billed by S3).
    """
    b = fault_bucket
    direct_client.put_object(Bucket=b, Key="src", Body=b"payload")
    proxy.script = lambda req, op, n: (Fault.ERROR_500_AFTER if op is Op.MULTIPART
                                       and "uploads" in req.query and n == 0 else None)
    _multipart_storage(proxy).copy_many([(f"{b}/src", f"{b}/dst")], {f"{b}/src": 7})
    assert direct_client.get_object(Bucket=b, Key="dst")["Body"].read() == b"payload"
    assert len(direct_client.list_multipart_uploads(Bucket=b).get("Uploads", [])) == 1
