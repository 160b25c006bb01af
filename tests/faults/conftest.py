"""Fixtures for the fault-injection suite: moto behind a :class:`FaultProxy`.

moto's server (the session fixture ``moto_endpoint`` of ``tests/conftest.py``) is
the store; the sink under test talks to it only through the proxy, while the
test's own checks use a second, direct endpoint so that verifying a state can
never itself be disturbed by an injected fault.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

import boto3
import pytest

from .proxy import FaultPlan, FaultProxy

#: botocore's ``max_attempts`` for the sink's clients under faults.  Low on
#: purpose: at a 10% fault rate an SDK call then exhausts its retries about once
#: per hundred calls, so the suite also exercises verbs failing to the caller.
MAX_ATTEMPTS = 3


@pytest.fixture(autouse=True)
def fast_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    """Shrink SDK back-off sleeps (not the number of attempts) to keep the suite fast.

    Standard mode sleeps up to 1 s (throttling, e.g. SlowDown) or 50 ms per
    retry, legacy mode up to 1 s; hundreds of injected faults would make that
    minutes.  Attempt counting and the retry quota are untouched.
    """
    from botocore import retryhandler
    from botocore.retries import standard

    monkeypatch.setattr(standard.ExponentialBackoff, "delay_amount",
                        lambda self, context: 0.001)
    monkeypatch.setattr(retryhandler, "delay_exponential",
                        lambda base, growth_factor, attempts: 0.001)


def _client(endpoint: str) -> Any:
    return boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="testing",
                        aws_secret_access_key="testing-secret-key", region_name="us-east-1")


@pytest.fixture()
def fault_bucket(moto_endpoint: str, request: pytest.FixtureRequest) -> str:
    """A bucket named after the test id (not random), so a seed replays the same requests."""
    digest = hashlib.sha256(request.node.nodeid.encode()).hexdigest()[:16]
    name = f"tpcf-{digest}"
    _client(moto_endpoint).create_bucket(Bucket=name)
    return name


@pytest.fixture()
def direct_client(moto_endpoint: str) -> Any:
    """A boto3 client straight to moto, for the test's own reads."""
    return _client(moto_endpoint)


@pytest.fixture()
def proxy(moto_endpoint: str) -> Iterator[FaultProxy]:
    """A started proxy with no faults; tests set ``proxy.plan`` and ``proxy.seed``."""
    with FaultProxy(moto_endpoint, FaultPlan.none()) as p:
        yield p


def options_for(endpoint: str, **extra: Any) -> dict[str, Any]:
    return {"endpoint_url": endpoint, "key": "testing", "secret": "testing-secret-key",
            "region_name": "us-east-1", **extra}


@pytest.fixture()
def direct_options(moto_endpoint: str) -> dict[str, Any]:
    """Storage options straight to moto (for the test's own observations)."""
    return options_for(moto_endpoint)


@pytest.fixture()
def proxied_options(proxy: FaultProxy) -> dict[str, Any]:
    """Storage options through the proxy, with a bounded standard-mode retry budget."""
    return options_for(proxy.endpoint, max_attempts=MAX_ATTEMPTS, read_timeout=10,
                       connect_timeout=5)
