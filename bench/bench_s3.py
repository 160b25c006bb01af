"""An epoch's commit on S3 behind real-S3-like latency: moto and SeaweedFS, every mode;
and on Azure Blob Storage (Azurite) the same way.

    .venv/bin/python bench/bench_s3.py [--quick | --smoke] [--sizes 1000 10000] [--reps 3]
        [--backends moto seaweedfs | --backends azurite] [--latency-ms 50 100]
        [--results bench/results/s3.json]

Two real S3 servers, each a process of its own on 127.0.0.1: moto's server and
SeaweedFS (``weed mini``, started as the tests start it: ``tests/seaweed.py``; it also
serves an Iceberg REST catalog). The sink reaches either only through the latency proxy
(``tests/faults/proxy.py`` in a process of its own: a uniform 50-100 ms on every request,
like S3, and a count of requests per operation). One epoch of N small Parquet files is
staged straight into the server (not through the proxy), then ``precommit`` and
``commit`` are timed, each alone, with their requests counted. Each target first commits
one untimed epoch of one file, so the timed commit is a steady-state one. Variants,
interleaved, order rotating every repetition:

- **copy**: a folder target, copy promotion, default ``copy_workers``: the baseline;
- **copy, copy_workers=1**: the same copies one after the other (up to 1,000 files);
- **copy, no added latency**: *copy* through a proxy that adds nothing: what the server
  itself allows on this machine (up to 1,000 files);
- **manifest**: ``promotion="manifest"``: publishes the list of files, copies nothing;
- **iceberg**: an Iceberg table (``airflow_tpc.tables``): on moto a pyiceberg SQL
  catalog (SQLite) with its warehouse on the same S3; on SeaweedFS its REST catalog, the
  table in a table bucket, the ledger apart (``ledger_uri``), every catalog request
  behind the same latency and counted;
- **delta**: a Delta table (``delta+s3://``), on moto.

``--backends azurite`` runs the same variants on Azurite (``bench/azurite_backend.py``:
Iceberg with its warehouse on ``abfs://``, Delta on ``delta+az://``), alone: its results
go to ``bench/results/azure.json`` (a run of the S3 servers keeps its own, and the
reverse). Results go to ``bench/results/s3.json``; ``bench/report.py`` writes
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness as h  # noqa: E402
import report  # noqa: E402
from azurite_backend import AzuriteBackend  # noqa: E402

from airflow_tpc import Sink, SinkConfig  # noqa: E402
from airflow_tpc.tables import open_sink  # noqa: E402

NAMESPACE, EPOCH, WARMUP = "bench", "2026-01-02", "2026-01-01"
SEQ, FLOOR, SLOW_MAX = h.SEQ, h.FLOOR, h.SLOW_MAX


class Backend:
    """One S3 server: its direct client (staging) and the proxies the sink goes through."""

    def __init__(self, name: str, endpoint: str, creds: dict[str, str],
                 latency: tuple[float, float], server: Any = None) -> None:
        self.name, self.server, self.creds, self.endpoint = name, server, creds, endpoint
        self.client = h.s3_client(endpoint, creds["key"], creds["secret"])
        self.proxy = h.Proxy(endpoint, latency)
        self.floor = h.Proxy(endpoint, (0.0, 0.0))
        self.catalog = h.Proxy(server.catalog_uri, latency) if server else None
        self.work = tempfile.mkdtemp(prefix=f"bench-s3-{name}-")
        self.runs = 0

    def variants(self, n: int) -> list[str]:
        out = ["copy", *([SEQ, FLOOR] if n <= SLOW_MAX else []), "manifest", "iceberg"]
        return out + (["delta"] if self.server is None else [])

    def sink(self, variant: str) -> Any:
        """A fresh target of ``variant``, reached only through a proxy."""
        self.runs += 1
        via = self.floor if variant == FLOOR else self.proxy
        options = {"endpoint_url": via.endpoint, "key": self.creds["key"],
                   "secret": self.creds["secret"], "region_name": "us-east-1"}
        if self.server is None:
            h.moto_reset(self.endpoint)
            bucket = f"bench-{self.runs}"
            self.client.create_bucket(Bucket=bucket)
            folder = f"s3://{bucket}/events"
        else:
            bucket, folder = "lake", f"{self.server.new_prefix()}/events"
        if variant in ("copy", SEQ, FLOOR, "manifest"):
            config = SinkConfig(copy_workers=1) if variant == SEQ else \
                SinkConfig(promotion="manifest") if variant == "manifest" else SinkConfig()
            return Sink(folder, NAMESPACE, storage_options=options, config=config)
        if variant == "delta":
            return open_sink(f"delta+s3://{bucket}/delta/events", NAMESPACE,
                             storage_options=options)
        s3 = {"s3.endpoint": via.endpoint, "s3.access-key-id": self.creds["key"],
              "s3.secret-access-key": self.creds["secret"], "s3.region": "us-east-1"}
        if self.server is None:
            cat = tempfile.mkdtemp(prefix="catalog-", dir=self.work)
            props = {"type": "sql", "uri": f"sqlite:///{cat}/catalog.db",
                     "warehouse": f"s3://{bucket}/warehouse", **s3}
            return open_sink("iceberg://bench/analytics.events", NAMESPACE,
                             catalog_properties=props, storage_options=options)
        assert self.catalog is not None
        props = {**self.server.catalog_properties(self.server.new_warehouse()), **s3,
                 "uri": self.catalog.endpoint,
                 "oauth2-server-uri": f"{self.catalog.endpoint}/v1/oauth/tokens"}
        return open_sink("iceberg://bench/analytics.events", NAMESPACE,
                         catalog_properties=props, storage_options=options,
                         ledger_uri=self.server.new_prefix())

    def stage(self, staging_uri: str, bodies: list[bytes], n: int) -> None:
        h.put_many(self.client, staging_uri, bodies, n)

    def done(self, sink: Any) -> None:
        """Nothing: each run's bucket or prefix is fresh (moto is reset per run)."""

    def counts(self, variant: str) -> dict[str, int]:
        out = (self.floor if variant == FLOOR else self.proxy).requests()
        if self.catalog is not None:
            out.update({f"catalog {k}": v for k, v in self.catalog.requests().items()})
        return out

    def close(self) -> None:
        for p in (self.proxy, self.floor, self.catalog):
            if p is not None:
                p.close()
        h.rmtree(self.work)


def run(backend: Backend | AzuriteBackend, variant: str, n: int, bodies: dict[str, list[bytes]]
        ) -> dict[str, Any]:
    """One steady-state commit of n files: seconds and requests of precommit and commit."""
    sink = backend.sink(variant)
    warm = sink.begin(WARMUP)
    backend.stage(warm.staging_uri, bodies[WARMUP], 1)
    sink.commit(warm, expected_digest=sink.precommit(warm).digest)
    txn = sink.begin(EPOCH)
    backend.stage(txn.staging_uri, bodies[EPOCH], n)
    backend.counts(variant)
    t_pre, manifest = h.timed(lambda: sink.precommit(txn))
    pre_req = backend.counts(variant)
    t_commit, result = h.timed(lambda: sink.commit(txn, expected_digest=manifest.digest))
    if result.outcome != "committed":
        raise RuntimeError(f"{backend.name} {variant}, {n} files: {result.outcome}")
    backend.done(sink)
    return {"precommit": t_pre, "commit": t_commit, "precommit_requests": pre_req,
            "commit_requests": backend.counts(variant)}


@contextlib.contextmanager
def backend(name: str, latency: tuple[float, float]) -> Iterator[Backend | AzuriteBackend]:
    if name == "azurite":
        with h.azurite() as server:
            az = AzuriteBackend(server, latency, NAMESPACE)
            try:
                yield az
            finally:
                az.close()
        return
    if name == "moto":
        with h.moto_server() as endpoint:
            b = Backend(name, endpoint, {"key": h.MOTO_CREDS["key"],
                                         "secret": h.MOTO_CREDS["secret"]}, latency)
            try:
                yield b
            finally:
                b.close()
        return
    with h.seaweed() as server:
        opts = server.s3_options()
        b = Backend(name, server.s3_endpoint, {"key": opts["key"], "secret": opts["secret"]},
                    latency, server)
        try:
            yield b
        finally:
            b.close()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    h.add_common_args(parser, "s3.json")
    parser.add_argument("--sizes", type=int, nargs="+", default=None,
                        help="files per commit (default 1000 10000; quick 200)")
    parser.add_argument("--backends", nargs="+", choices=["moto", "seaweedfs", "azurite"],
                        default=["moto", "seaweedfs"],
                        help="S3 servers, or azurite alone (results: azure.json)")
    parser.add_argument("--latency-ms", type=float, nargs=2, default=[50.0, 100.0],
                        metavar=("MIN", "MAX"))
    args = parser.parse_args(argv)
    azure = "azurite" in args.backends
    if azure and len(set(args.backends)) > 1:
        parser.error("--backends azurite runs alone: its results go to "
                     "bench/results/azure.json, the S3 servers' to s3.json")
    if azure and args.results == str(h.RESULTS / "s3.json"):
        args.results = str(h.RESULTS / "azure.json")
    sizes = args.sizes or ([20] if args.smoke else [200] if args.quick else [1_000, 10_000])
    reps = args.reps or (1 if args.smoke else 2 if args.quick else 3)
    latency = (0.0, 0.0) if args.smoke else (args.latency_ms[0], args.latency_ms[1])
    bodies = {e: h.parquet_bodies(e) for e in (EPOCH, WARMUP)}
    partial = str(Path(args.results).with_suffix(".partial.json"))
    data = h.run_info("bench/bench_s3.py " + " ".join(argv), h.mode(args))
    data.update(latency_ms=list(latency), default_workers=SinkConfig().copy_workers, cases=[])
    for name in args.backends:
        h.log(f"{'Azure' if azure else 'S3'} on {name}, behind {latency[0]:g}-"
              f"{latency[1]:g} ms a request")
        with backend(name, latency) as b:
            for n in sizes:
                def progress(rep: int, out: dict[str, list[Any]], n: int = n, name: str = name
                             ) -> None:
                    h.log(f"  {name} n={n} rep {rep + 1}/{reps}: " + ", ".join(
                        f"{v} {h.fmt_s(r[-1]['commit'])} "
                        f"({sum(r[-1]['commit_requests'].values())} req)"
                        for v, r in out.items()))
                    # the repetitions so far, should a long run be stopped before its end
                    case = {"backend": name, "n": n, "reps": rep + 1, "runs": out,
                            "load": h.load_average()}
                    h.save({**data, "cases": [*data["cases"], case], "partial": True},
                           partial, quiet=True)

                runs = h.interleave(b.variants(n), reps,
                                    lambda v, _rep, n=n, b=b: run(b, v, n, bodies), progress)
                data["cases"].append({"backend": name, "n": n, "reps": reps, "runs": runs,
                                      "load": h.load_average()})
    h.save(data, args.results)
    Path(partial).unlink(missing_ok=True)
    report.publish("azure" if azure else "s3", data, args.output)
    return 0


if __name__ == "__main__":
    h.on_sigterm()
    os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")
    raise SystemExit(main())
