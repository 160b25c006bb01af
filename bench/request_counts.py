"""Requests each protocol verb makes, per store, measured on real stores.

Local: a counting wrapper around the real LocalStorage (calls per Storage method;
each is a handful of syscalls on a real temp dir).  S3: the same wrapper plus the
HTTP requests seen by the counting proxy of tests/faults/proxy.py in front of
moto's real server (per S3 operation).

    .venv/bin/python bench/request_counts.py [N_FILES ...]

(``PYTHONPATH=<an export of airflow_tpc>`` measures another tree.)  The counts are
quoted in docs/PROTOCOL.md §11.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
import uuid
from collections import Counter
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(1, REPO)  # after PYTHONPATH: an export there wins over the checkout
os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing-secret-key")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")

from airflow_tpc import Sink, SinkConfig  # noqa: E402
from airflow_tpc.core.faults import InjectedCrash, armed  # noqa: E402
from airflow_tpc.storage import open_storage  # noqa: E402

CALLS = ("read_bytes", "read_versioned", "list", "list_dirs", "put", "put_if_absent",
         "put_if_version", "delete_prefix", "delete_files", "replace_dir", "copy_many",
         "checksum", "iter_chunks", "check_real_dirs", "promotion_lock", "prune_empty_parent",
         "check_target")


class Counting:
    """The real store, with every call of the Storage interface counted."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls: Counter = Counter()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if name not in CALLS:
            return attr

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            return attr(*args, **kwargs)

        return counted


class Env:
    def __init__(self, kind: str, proxy: Any = None, options: dict | None = None,
                 bucket: str | None = None) -> None:
        self.kind, self.proxy, self.options, self.bucket = kind, proxy, options, bucket
        self.tmp = tempfile.mkdtemp(prefix="tpc-counts-")

    def new_target(self) -> str:
        name = uuid.uuid4().hex[:8]
        if self.kind == "local":
            return os.path.join(self.tmp, name)
        return f"s3://{self.bucket}/{name}"

    def sink(self, target: str, **cfg: Any) -> tuple[Sink, Counting]:
        inner = open_storage(target, self.options)[0]
        store = Counting(inner)
        return Sink(target, "ns", storage_options=self.options, storage=store,
                    config=SinkConfig(**cfg)), store

    def write_files(self, sink: Sink, txn: Any, n: int) -> None:
        """What the Spark job does before pre-commit (not counted)."""
        inner = sink.storage.inner
        for i in range(n):
            inner.put(inner.join(sink.layout.staging(txn.epoch, txn.attempt),
                                 f"part={i % 4}/f-{i:05d}.parquet"), os.urandom(1024))

    def reset(self) -> None:
        if self.proxy is not None:
            self.proxy.reset_stats()

    def http(self) -> dict[str, int]:
        if self.proxy is None:
            return {}
        return {str(k): v for k, v in sorted(self.proxy.stats.requests.items())}


def measure(env: Env, label: str, store: Counting, fn: Any) -> dict[str, Any]:
    store.calls.clear()
    env.reset()
    with contextlib.suppress(InjectedCrash):
        fn()
    http = env.http()
    row = {"verb": label, "calls": dict(sorted(store.calls.items())),
           "http": http, "http_total": sum(http.values())}
    print(json.dumps({"store": env.kind, **row}), flush=True)
    return row


def committed_history(env: Env, target: str, epochs: int) -> None:
    sink, _ = env.sink(target)
    for e in range(epochs):
        txn = sink.begin(f"h{e:04d}")
        env.write_files(sink, txn, 1)
        m = sink.precommit(txn)
        sink.commit(txn, expected_digest=m.digest)


def run(env: Env, n: int, history: int) -> list[dict[str, Any]]:
    rows = []
    # -- begin: first on a target (claims sink.json), then on a claimed target
    target = env.new_target()
    sink, store = env.sink(target)
    rows.append(measure(env, "begin (first, claims the target)", store,
                        lambda: sink.begin("2026-11-20")))
    sink, store = env.sink(target)
    box: dict[str, Any] = {}
    rows.append(measure(env, "begin (target claimed; new Sink object)", store,
                        lambda: box.update(txn=sink.begin("2026-11-21"))))
    txn = box["txn"]
    env.write_files(sink, txn, n)
    rows.append(measure(env, f"precommit, {n} files, core hashes", store,
                        lambda: box.update(m=sink.precommit(txn))))
    sink, store = env.sink(target)
    rows.append(measure(env, "poll (pre-committed)", store, lambda: sink.poll(txn)))
    sink, store = env.sink(target)
    rows.append(measure(env, f"commit, {n} files, move (2 epochs in ledger)", store,
                        lambda: sink.commit(txn, expected_digest=box["m"].digest)))
    sink, store = env.sink(target)
    rows.append(measure(env, "commit again (already committed)", store,
                        lambda: sink.commit(txn, expected_digest=box["m"].digest)))
    sink, store = env.sink(target)
    rows.append(measure(env, "poll (committed)", store, lambda: sink.poll(txn)))

    # -- precommit with writer checksums (the tpc data source / txn.precommit())
    t2 = sink.begin("2026-11-22")
    env.write_files(sink, t2, n)
    sums = {}
    inner = sink.storage.inner
    prefix = inner.join(sink.layout.staging(t2.epoch, t2.attempt), "")
    for info in inner.list(sink.layout.staging(t2.epoch, t2.attempt)):
        rel = info.path[len(prefix):]
        sums[rel] = f"etag:{info.etag}" if info.etag else \
            f"sha256:{inner.checksum(info.path, 'sha256')}"
    sink, store = env.sink(target)
    rows.append(measure(env, f"precommit, {n} files, writer checksums passed", store,
                        lambda: box.update(m2=sink.precommit(t2, checksums=sums))))
    # -- abort of a pre-committed attempt
    sink, store = env.sink(target)
    rows.append(measure(env, f"abort (pre-committed, {n} files)", store,
                        lambda: sink.abort(t2, "measured")))

    # -- manifest mode
    target_m = env.new_target()
    sink, store = env.sink(target_m, promotion="manifest")
    t3 = sink.begin("2026-11-20")
    env.write_files(sink, t3, n)
    m3 = sink.precommit(t3)
    sink, store = env.sink(target_m, promotion="manifest")
    rows.append(measure(env, f"commit, {n} files, manifest (1 epoch in ledger)", store,
                        lambda: sink.commit(t3, expected_digest=m3.digest)))

    # -- replacing a published epoch (attempt 2 over attempt 1)
    sink, store = env.sink(target)
    t4 = sink.begin("2026-11-21")
    env.write_files(sink, t4, n)
    m4 = sink.precommit(t4)
    sink, store = env.sink(target)
    rows.append(measure(env, f"commit, {n} files, move, replaces a published attempt", store,
                        lambda: sink.commit(t4, expected_digest=m4.digest)))

    # -- history: commit and recover on a target with `history` finished epochs
    target_h = env.new_target()
    committed_history(env, target_h, history)
    sink, store = env.sink(target_h)
    t5 = sink.begin("2026-11-20")
    env.write_files(sink, t5, n)
    m5 = sink.precommit(t5)
    sink, store = env.sink(target_h)
    rows.append(measure(env, f"commit, {n} files, move, {history} finished epochs in ledger",
                        store, lambda: sink.commit(t5, expected_digest=m5.digest)))
    sink, store = env.sink(target_h)
    rows.append(measure(env, f"recover, nothing to do, {history + 1} finished epochs", store,
                        lambda: sink.recover()))
    sink, store = env.sink(target_h)
    rows.append(measure(env, f"gc, {history + 1} finished epochs", store, lambda: sink.gc()))
    # a decision whose promotion was lost (crash right after the commit point)
    t6 = sink.begin("2026-11-23")
    env.write_files(sink, t6, n)
    m6 = sink.precommit(t6)
    with armed("commit.after_decision"), contextlib.suppress(InjectedCrash):
        sink.commit(t6, expected_digest=m6.digest)
    sink, store = env.sink(target_h)
    rows.append(measure(env, f"recover, 1 decided commit of {n} files to roll forward, "
                             f"{history + 2} epochs", store, lambda: sink.recover()))
    return rows


def main(argv: list[str]) -> int:
    sizes = [int(a) for a in argv] or [10, 1000]
    history = int(os.environ.get("HISTORY", "50"))
    out: dict[str, Any] = {}
    for n in sizes:
        out[f"local/{n}"] = run(Env("local"), n, history)
    from moto.server import ThreadedMotoServer

    sys.path.insert(0, os.environ.get("TPC_TESTS_ROOT", REPO))
    from tests.faults.proxy import FaultProxy

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    import logging

    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    with FaultProxy(f"http://{host}:{port}") as proxy:
        options = {"endpoint_url": proxy.endpoint, "key": "testing",
                   "secret": "testing-secret-key", "region_name": "us-east-1"}
        import boto3

        bucket = f"counts-{uuid.uuid4().hex[:8]}"
        boto3.client("s3", endpoint_url=f"http://{host}:{port}", aws_access_key_id="testing",
                     aws_secret_access_key="testing-secret-key",
                     region_name="us-east-1").create_bucket(Bucket=bucket)
        for n in sizes:
            out[f"s3/{n}"] = run(Env("s3", proxy, options, bucket), n, history)
    server.stop()
    with open(os.environ.get("OUT", "/tmp/helperB/counts.json"), "w") as fh:
        json.dump(out, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
