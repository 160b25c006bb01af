"""The fault proxy of ``tests/faults/proxy.py`` as a latency-only proxy, in a process of its own.

``bench_core.py`` starts it in front of moto's server so that every S3 request
waits like a request to real S3 (a uniform 50-100 ms by default), and counts the
requests per operation. It runs in its own process so that its relaying never
competes for the benchmark client's GIL::

    python bench/s3_proxy.py UPSTREAM_URL MIN_MS MAX_MS

It prints ``PROXY <endpoint>`` once listening, then answers each ``stats`` line
on stdin with ``STATS {"op": requests, ...}`` (the requests seen since the
previous ``stats``, per S3 operation) and stops at the end of stdin.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.faults.proxy import FaultPlan, FaultProxy  # noqa: E402


def main(argv: list[str]) -> int:
    upstream, lo_ms, hi_ms = argv[0], float(argv[1]), float(argv[2])
    plan = FaultPlan(latency_rate=1.0 if hi_ms > 0 else 0.0,
                     latency_s=(lo_ms / 1000, hi_ms / 1000))
    with FaultProxy(upstream, plan, seed=10) as proxy:
        print(f"PROXY {proxy.endpoint}", flush=True)
        for line in sys.stdin:
            if line.strip() == "stats":
                counts = {str(op): n for op, n in proxy.stats.requests.items()}
                proxy.reset_stats()
                print("STATS " + json.dumps(counts, sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
