"""The ``azurite`` backend of ``bench/bench_s3.py``: Azure Blob Storage on Azurite.

Issue 35 §4: an epoch's commit on Azure behind 50-100 ms a request, by copy, manifest,
Iceberg and Delta, against copy promotion, in one run. It mirrors the S3 backends
(``bench_s3.Backend``) so the same :func:`bench_s3.run` times it: Azurite is started as
the tests start it (``tests/azurite.py``, through :func:`harness.azurite`), the sink
reaches it only through the same latency proxy (``tests/faults/proxy.py``, which counts
Azure's operations too), and the files are staged straight into Azurite, as a job
would. Variants:

- **copy** / **copy, copy_workers=1** / **copy, no added latency** / **manifest**: an
  ``az://`` folder target, as on S3;
- **iceberg**: an Iceberg table on pyiceberg's SQL catalog (SQLite: a catalog is a local
  file here, as on moto) with its warehouse on ``abfs://`` through pyiceberg's fsspec
  FileIO over adlfs, every storage request behind the proxy;
- **delta**: a Delta table (``delta+az://``: delta-rs's Azure object store).
"""

from __future__ import annotations

import tempfile
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import urlparse

import harness as h

from airflow_tpc import Sink, SinkConfig
from airflow_tpc.tables import open_sink

SEQ, FLOOR, SLOW_MAX = h.SEQ, h.FLOOR, h.SLOW_MAX


class AzuriteBackend:
    """Azurite: its direct client (staging) and the proxies the sink goes through."""

    name = "azurite"

    def __init__(self, server: Any, latency: tuple[float, float], namespace: str) -> None:
        self.server, self.namespace = server, namespace
        self.account = server.options()["account_name"]
        upstream = server.endpoint.rsplit("/", 1)[0]  # the proxy relays http://host:port
        self.proxy = h.Proxy(upstream, latency)
        self.floor = h.Proxy(upstream, (0.0, 0.0))
        self.service = server.service()
        self.work = tempfile.mkdtemp(prefix="bench-azurite-")

    def variants(self, n: int) -> list[str]:
        return ["copy", *([SEQ, FLOOR] if n <= SLOW_MAX else []), "manifest", "iceberg",
                "delta"]

    def _endpoint(self, variant: str) -> str:
        via = self.floor if variant == FLOOR else self.proxy
        return f"{via.endpoint}/{self.account}"

    def sink(self, variant: str) -> Any:
        """A fresh target of ``variant`` in a fresh container, reached only through a proxy
        (:meth:`done` deletes the container after the run: Azurite keeps every blob in its
        in-memory metadata database, which would grow over a long run)."""
        container = f"bench-{uuid.uuid4().hex[:12]}"
        self.service.create_container(container)
        endpoint = self._endpoint(variant)
        options = {**self.server.options(), "endpoint_url": endpoint}
        if variant in ("copy", SEQ, FLOOR, "manifest"):
            config = SinkConfig(copy_workers=1) if variant == SEQ else \
                SinkConfig(promotion="manifest") if variant == "manifest" else SinkConfig()
            return Sink(f"az://{container}/events", self.namespace, storage_options=options,
                        config=config)
        if variant == "delta":
            return open_sink(f"delta+az://{container}/delta/events", self.namespace,
                             storage_options=options)
        cat = tempfile.mkdtemp(prefix="catalog-", dir=self.work)
        conn = (f"DefaultEndpointsProtocol=http;AccountName={self.account};AccountKey="
                f"{options['account_key']};BlobEndpoint={endpoint};")
        props = {"type": "sql", "uri": f"sqlite:///{cat}/catalog.db",
                 "warehouse": f"abfs://{container}@{self.account}.dfs.core.windows.net/wh",
                 "py-io-impl": "pyiceberg.io.fsspec.FsspecFileIO",
                 "adls.connection-string": conn}
        return open_sink("iceberg://bench/analytics.events", self.namespace,
                         catalog_properties=props, storage_options=options)

    def stage(self, staging_uri: str, bodies: list[bytes], n: int) -> None:
        """n files straight into Azurite (not through a proxy), as a job would write them;
        ``az://container/path`` or ``abfs://container@account.../path``."""
        parsed = urlparse(staging_uri)
        container = parsed.netloc.partition("@")[0]
        prefix = parsed.path.strip("/")
        client = self.service.get_container_client(container)
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(lambda i: client.upload_blob(
                f"{prefix}/part-{i:06d}.parquet", bodies[i % len(bodies)]), range(n)))

    def done(self, sink: Any) -> None:
        """Drop the run's container (untimed), so Azurite's database stays small."""
        container = urlparse(sink.target).netloc.partition("@")[0]
        self.service.delete_container(container)

    def counts(self, variant: str) -> dict[str, int]:
        return (self.floor if variant == FLOOR else self.proxy).requests()

    def close(self) -> None:
        for p in (self.proxy, self.floor):
            p.close()
        h.rmtree(self.work)
