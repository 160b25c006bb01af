"""Every S3 call of :class:`S3Storage` retries within ``storage_options["max_attempts"]``.

Found by this suite: only the boto3 client got the configured standard-mode
retries; s3fs (reads, listings, plain writes) ran aiobotocore's legacy mode (5
attempts) inside s3fs's own 5-try loop, so with ``max_attempts=1`` one listing
under dropped connections made 50 requests and one write under SlowDown 25 —
retry storms exactly when the store asks clients to back off, and a budget the
operator could not set.  The fix (``airflow_tpc/storage/s3.py``) hands s3fs the
same botocore config and turns its outer loop off; the one thing that loop did
which the SDK cannot — reading a body again after it was cut mid-download — is
now done by ``read_bytes``/``read_versioned`` within the same budget.

Each case fails every request of every op permanently and counts what one
storage call sends.  ``max_attempts`` is botocore's: retries, so attempts =
``max_attempts + 1``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from airflow_tpc import StorageError
from airflow_tpc.storage.s3 import S3Storage

from .conftest import options_for
from .proxy import Fault, FaultPlan, FaultProxy, Op

MAX_ATTEMPTS = 2

CALLS: dict[str, Callable[[S3Storage, str], object]] = {
    "read_bytes": lambda st, b: st.read_bytes(f"{b}/data/k"),
    "read_versioned": lambda st, b: st.read_versioned(f"{b}/data/k"),
    "list": lambda st, b: st.list(f"{b}/data"),
    "list_dirs": lambda st, b: st.list_dirs(b),
    "put": lambda st, b: st.put(f"{b}/data/new", b"x"),
    "put_if_absent": lambda st, b: st.put_if_absent(f"{b}/data/new", b"x"),
    "put_if_version": lambda st, b: st.put_if_version(f"{b}/data/k", b"x", '"0"'),
    "copy_many": lambda st, b: st.copy_many([(f"{b}/data/k", f"{b}/data/copy")]),
    "delete_files": lambda st, b: st.delete_files([f"{b}/data/k"]),
}
CODE = {Fault.ERROR_500: "InternalError", Fault.SLOWDOWN_503: "SlowDown",
        Fault.DROP_BEFORE: "ConnectionClosedError"}
STATUS = {**CODE, Fault.ERROR_500: "500", Fault.SLOWDOWN_503: "503"}


@pytest.mark.parametrize("fault", list(CODE))
@pytest.mark.parametrize("call", list(CALLS))
def test_each_storage_call_honours_max_attempts(proxy: FaultProxy, fault_bucket: str,
                                                direct_client: Any, call: str,
                                                fault: Fault) -> None:
    direct_client.put_object(Bucket=fault_bucket, Key="data/k", Body=b"v")
    proxy.plan = FaultPlan({op: {fault: 1.0} for op in Op})
    storage = S3Storage(options_for(proxy.endpoint, max_attempts=MAX_ATTEMPTS))

    with pytest.raises(StorageError) as info:
        CALLS[call](storage, fault_bucket)

    st = proxy.stats
    calls = list(st.invocations.values())
    assert len(calls) == 1, f"one storage call became {len(calls)} SDK calls"
    assert sorted(calls[0].attempts) == list(range(1, MAX_ATTEMPTS + 2)), calls[0]
    assert set(st.max_declared) == {MAX_ATTEMPTS + 1}
    # Below the SDK, aiohttp re-sends an idempotent request once on a disconnect.
    resend_ok = calls[0].client == "aiobotocore" and calls[0].method in ("GET", "HEAD", "PUT")
    assert max(calls[0].attempts.values()) <= (2 if resend_ok and fault is Fault.DROP_BEFORE
                                               else 1)
    # The store's reason, not a wrapper's class name (a HEAD error has no body: status only).
    reason = STATUS[fault] if calls[0].op is Op.HEAD else CODE[fault]
    assert reason in str(info.value)
    assert "testing-secret-key" not in str(info.value)


@pytest.mark.parametrize("call", ["read_bytes", "read_versioned"])
@pytest.mark.parametrize("permanent", [False, True])
def test_cut_body_is_reread_never_returned(proxy: FaultProxy, fault_bucket: str,
                                           direct_client: Any, call: str,
                                           permanent: bool) -> None:
    """A body cut mid-download is read again (the SDK cannot: its retries end at the
    headers), within the same budget — and a prefix is never returned as the object."""
    data = b'{"record": "' + b"x" * 20_000 + b'"}'
    direct_client.put_object(Bucket=fault_bucket, Key="data/k", Body=data)
    proxy.script = lambda req, op, n: (Fault.TRUNCATE if op is Op.GET and (permanent or n == 0)
                                       else None)
    storage = S3Storage(options_for(proxy.endpoint, max_attempts=MAX_ATTEMPTS))
    if permanent:
        with pytest.raises(StorageError):
            CALLS[call](storage, fault_bucket)
        assert proxy.stats.requests[Op.GET] == MAX_ATTEMPTS + 1
    else:
        got = CALLS[call](storage, fault_bucket)
        assert (got[0] if isinstance(got, tuple) else got) == data
        assert proxy.stats.requests[Op.GET] == 2
