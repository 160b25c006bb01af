"""Azurite's own request rates as a container fills: the floor under section 5.

Why the 10,000-file Azure case is slow: this times Azurite alone (no proxy, no
airflow-tpc), with 16 client threads as the sink's copies use, for a container that
holds ``n`` blobs: Put Blob of ``n`` small blobs, Copy Blob (synchronous, as the copy
promotion does) of each, and Delete Blob of each staged one.  Printed per quarter of
the work, so a rate that falls as the container grows shows.

    .venv/bin/python bench/azurite_rates.py 2000 10000
"""

from __future__ import annotations

import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BODY = b"x" * 2000


def _rates(pool: ThreadPoolExecutor, op: Callable[[int], object], n: int) -> list[float]:
    """Requests a second in each quarter of ``range(n)``."""
    out = []
    for lo in range(0, n, n // 4):
        hi = min(n, lo + n // 4)
        start = time.perf_counter()
        list(pool.map(op, range(lo, hi)))
        out.append((hi - lo) / (time.perf_counter() - start))
    return out


def measure(server: object, n: int) -> dict[str, list[float]]:
    """Put, copy and delete rates (requests/s by quarter) for ``n`` blobs, one container."""
    service = server.service()  # type: ignore[attr-defined]
    name = f"rates-{uuid.uuid4().hex[:10]}"
    client = service.create_container(name)

    def put(i: int) -> object:
        return client.upload_blob(f"staging/part-{i:06d}.parquet", BODY)

    def copy(i: int) -> object:
        source = client.get_blob_client(f"staging/part-{i:06d}.parquet").url
        return client.get_blob_client(f"epoch=E/part-{i:06d}.parquet").start_copy_from_url(
            source, requires_sync=True)

    def delete(i: int) -> object:
        return client.delete_blob(f"staging/part-{i:06d}.parquet")

    try:
        with ThreadPoolExecutor(16) as pool:
            return {"put": _rates(pool, put, n), "copy": _rates(pool, copy, n),
                    "delete": _rates(pool, delete, n)}
    finally:
        service.delete_container(name)


def main(argv: list[str]) -> int:
    sys.path.insert(0, str(ROOT))
    from tests import azurite as az

    sizes = [int(a) for a in argv] or [2_000, 10_000]
    for n in sizes:
        with tempfile.TemporaryDirectory(prefix="bench-azurite-rates-") as work:
            server = az.start(Path(work))  # a fresh Azurite per size: nothing left over
            try:
                rates = measure(server, n)
            finally:
                server.stop()
        print(f"{n:>6} blobs: " + "; ".join(
            f"{op} " + " / ".join(f"{r:.0f}" for r in quarters) + " per s"
            for op, quarters in rates.items()), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
