"""Azurite for the tests: Microsoft's Azure Storage emulator, a real Blob service.

``scripts/bootstrap.sh`` installs ``azurite@3.37.0`` with npm into ``.tools/azurite``
(Node from the OS).  One ``azurite-blob`` runs per test session on a free port of
127.0.0.1 with its data in a temporary folder; each test takes a fresh container
(``new_container``), so tests never see each other's blobs.  Measured here: it
enforces ``If-None-Match: *`` on Put Blob (the decision), ``If-Match`` (the marker's
compare-and-swap) and ``x-ms-source-if-match`` on Copy Blob (the guarded promotion).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Azurite's well-known development account and key (published in its documentation;
#: they open nothing but a local emulator).
ACCOUNT = "devstoreaccount1"
KEY = ("Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/"
       "KBHBeksoGMGw==")
VERSION = "3.37.0"
START_TIMEOUT = 60.0
REPO = Path(__file__).resolve().parent.parent


def azurite_binary() -> str:
    """``azurite-blob`` as bootstrap.sh installs it (or ``$TPC_AZURITE``, or on PATH)."""
    candidates = [os.environ.get("TPC_AZURITE"),
                  str(REPO / ".tools" / "azurite" / "node_modules" / ".bin" / "azurite-blob"),
                  shutil.which("azurite-blob")]
    for found in candidates:
        if found and os.path.exists(found):
            return found
    raise RuntimeError(f"Azurite is missing: scripts/bootstrap.sh installs it (npm install "
                       f"azurite@{VERSION} into .tools/azurite; needs Node 18+ and npm)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _die_with_parent() -> None:
    """In the child: SIGTERM when the test process dies, even by SIGKILL."""
    import ctypes

    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


@dataclass
class Azurite:
    """A running ``azurite-blob``: its Blob endpoint and the development account."""

    process: subprocess.Popen[bytes]
    endpoint: str
    log: Path

    def options(self) -> dict[str, Any]:
        """airflow-tpc's storage options for this account."""
        return {"account_name": ACCOUNT, "account_key": KEY, "endpoint_url": self.endpoint}

    def connection_string(self) -> str:
        return (f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={KEY};"
                f"BlobEndpoint={self.endpoint};")

    def service(self) -> Any:
        from azure.storage.blob import BlobServiceClient

        return BlobServiceClient(self.endpoint, credential={"account_name": ACCOUNT,
                                                            "account_key": KEY})

    def new_container(self) -> str:
        name = f"tpc-{uuid.uuid4().hex[:12]}"
        self.service().create_container(name)
        return name

    def new_prefix(self) -> str:
        """``az://<fresh container>/<folder>``: a target no other test shares."""
        return f"az://{self.new_container()}/{uuid.uuid4().hex[:8]}"

    def stop(self) -> None:
        """SIGKILL: its data is a temporary folder, and Node's Azurite took 30 s to end on
        SIGTERM here (it waits for idle keep-alive connections)."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)


def start(workdir: Path) -> Azurite:
    """Start ``azurite-blob`` in ``workdir`` on a free port; returns once it answers.
    A port taken by another process between the probe and the bind: start again."""
    for tries_left in reversed(range(4)):
        try:
            return _start(workdir)
        except RuntimeError as exc:
            if "EADDRINUSE" not in str(exc) or not tries_left:
                raise
    raise AssertionError("unreachable")  # pragma: no cover


def _start(workdir: Path) -> Azurite:
    port = _free_port()
    data = workdir / f"data-{uuid.uuid4().hex[:6]}"
    data.mkdir(parents=True)
    log = workdir / f"azurite-{port}.log"
    cmd = [azurite_binary(), "--blobHost", "127.0.0.1", "--blobPort", str(port),
           "--location", str(data), "--skipApiVersionCheck", "--loose", "--silent"]
    with open(log, "wb") as out:
        process = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=workdir,
                                   start_new_session=True, preexec_fn=_die_with_parent)
    server = Azurite(process, f"http://127.0.0.1:{port}/{ACCOUNT}", log)
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"azurite-blob exited with {process.returncode}:\n"
                               f"{log.read_text(errors='replace')[-3000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                pass
            server.service().get_service_properties()
            return server
        except Exception:
            if time.monotonic() > deadline:
                server.stop()
                raise RuntimeError(f"azurite-blob did not answer in {START_TIMEOUT:.0f} s:\n"
                                   f"{log.read_text(errors='replace')[-3000:]}") from None
            time.sleep(0.1)
