"""Fixtures for the fault-injection suite: moto behind a :class:`FaultProxy`.

moto's server is the store; the sink under test talks to it only through the
proxy, while the test's own checks use a second, direct endpoint so that
verifying a state can never itself be disturbed by an injected fault.

moto runs as its own process here (``moto_server``), not the in-process
threaded server of ``tests/conftest.py``: this suite sends thousands of
requests, and sharing the GIL with the clients and the proxy made it about
twice as slow on two cores.
"""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from .proxy import FaultPlan, FaultProxy

#: botocore's ``max_attempts`` (retries: 2 attempts per call) for the sink under
#: faults.  Low on purpose: at a 10% fault rate an SDK call then exhausts its
#: retries about once per hundred calls, so verbs really fail to the caller.
MAX_ATTEMPTS = 1


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


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    """moto's S3 server in a child process on a free 127.0.0.1 port, for this directory."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    exe = Path(sys.executable).with_name("moto_server")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "moto.server"]
    proc = subprocess.Popen([*cmd, "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        deadline = time.monotonic() + 300  # moto start-up on a busy machine
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("moto_server did not start") from None
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover
            proc.kill()
            proc.wait()


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
