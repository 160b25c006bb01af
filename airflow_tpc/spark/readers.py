"""Read-committed (and, for debugging, read-uncommitted) views of a target.

:func:`read_committed` is Kafka's ``isolation.level=read_committed`` for a
target: it reads exactly the files of each epoch's published attempt, as the
ledger's published markers list them (``Sink.committed_files``) — never a staged,
aborted or superseded attempt, and never a file that merely sits in an epoch
directory.  Each row gets an ``epoch`` column (a string, as the ledger spells it).

Targets on a store Spark reaches as shipped (the store class says so:
``spark_native``; local disks) are read by Spark itself, distributed.  Others
(S3, Azure: pyspark ships no ``s3a://`` nor ``abfs://`` connector here) are read on
the executors by the ``tpc`` data source's reader (Parquet), or on the driver with
pyarrow/fsspec and handed to ``spark.createDataFrame``: fine for what fits in the
driver's memory.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..core.layout import epoch_sort_key
from ..core.staging import list_staged
from ..errors import TpcError, UnsupportedStorage
from ..storage import storage_class
from .committed import _ATTEMPT_BASE, fsspec_options, group_by_base, reader_sink

log = logging.getLogger("airflow_tpc.spark")


def _is_table(target: str) -> bool:
    """A table URI (its schemes are :mod:`airflow_tpc.tables`'s; importing that package
    imports no table library)."""
    from ..tables import TABLE_SCHEMES

    return isinstance(target, str) and target.startswith(TABLE_SCHEMES)



def _read_spark(spark: Any, fmt: str, base: str, files: list[str], options: dict[str, str]
                ) -> Any:
    return spark.read.format(fmt).options(basePath=base, **options).load(files)


def _read_arrow(spark: Any, fmt: str, base: str, files: list[str],
                storage_options: dict[str, Any] | None) -> Any:
    """Driver-side read of one group of files (stores Spark cannot read here)."""
    import fsspec
    import pyarrow.dataset as ds

    opts = fsspec_options(base, storage_options)
    fs, root = fsspec.core.url_to_fs(base, use_listings_cache=False, **opts)
    paths = [fsspec.core.url_to_fs(u, **opts)[1] for u in files]
    dataset = ds.dataset(paths, format=fmt, filesystem=fs,
                         partitioning=ds.partitioning(flavor="hive"),
                         partition_base_dir=root.rstrip("/"))
    return spark.createDataFrame(dataset.to_table())


def _read_groups(spark: Any, fmt: str, groups: list[tuple[str, list[str], dict[str, Any]]],
                 target: str, storage_options: dict[str, Any] | None,
                 options: dict[str, str], schema: Any) -> Any:
    from pyspark.sql import functions as F

    # a store Spark as shipped cannot reach (S3, Azure: no connector jars) is read with
    # pyarrow
    remote = not storage_class(target).spark_native
    frames = []
    for base, files, extra in groups:
        if remote:
            if fmt not in ("parquet", "orc", "csv", "json"):
                raise TpcError(f"format {fmt!r} cannot be read from {target.split(':', 1)[0]}"
                               ":// here (pyarrow reads parquet, orc, csv and json)")
            df = _read_arrow(spark, fmt, base, files, storage_options)
        else:
            df = _read_spark(spark, fmt, base, files, options)
        for name, value in extra.items():
            df = df.withColumn(name, F.lit(value).cast("string" if name != "attempt"
                                                         else "int"))
        frames.append(df)
    if not frames:
        from pyspark.sql.types import StringType, StructField, StructType

        if schema is None:
            return spark.createDataFrame([], "epoch string")
        if not isinstance(schema, StructType):
            schema = spark.createDataFrame([], schema).schema
        return spark.createDataFrame([], StructType(
            [*schema.fields, StructField("epoch", StringType())]))
    out = frames[0]
    for df in frames[1:]:
        out = out.unionByName(df, allowMissingColumns=True)
    return out


def load_committed(committed: Mapping[str, Iterable[str]] | str,
                   storage_options: dict[str, Any] | None = None) -> dict[str, list[str]]:
    """``{epoch: [file URI, ...]}`` as ``Sink.committed_files()`` returns it: the mapping
    itself, or read from a JSON document at a path/URI (fsspec) where the Airflow side
    wrote it (``json.dump(sink.committed_files(epochs), fh)``)."""
    if isinstance(committed, str):
        import json

        import fsspec

        try:  # the list may lie on any fsspec store, not only on a target's
            opts = fsspec_options(committed, storage_options)
        except UnsupportedStorage:
            opts = {}
        try:
            fs, path = fsspec.core.url_to_fs(committed, **opts)
            with fs.open(path, "rb") as fh:
                committed = json.load(fh)
        except (OSError, ValueError) as exc:
            raise TpcError(f"cannot read the committed file list {committed}: "
                           f"{type(exc).__name__}: {exc}") from None
    if not isinstance(committed, Mapping) or not all(
            isinstance(v, (list, tuple)) and all(isinstance(u, str) and "://" in u for u in v)
            for v in committed.values()):
        raise TpcError("committed must map each epoch to a list of file URIs, as "
                       "Sink.committed_files() returns")
    return {str(e): list(v) for e, v in committed.items()}


def _read_files(spark: Any, committed: dict[str, list[str]], epochs: Iterable[str] | None,
                format: str, storage_options: dict[str, Any] | None,
                options: dict[str, str], schema: Any) -> Any:
    """Exactly the given files, each group under its attempt folder as partition base."""
    wanted = None if epochs is None else {str(e) for e in epochs}
    groups = []
    first = None
    for epoch, uris in committed.items():
        if wanted is not None and epoch not in wanted:
            continue
        by_base: dict[str, list[str]] = {}
        for uri in uris:
            m = _ATTEMPT_BASE.match(uri)
            by_base.setdefault(m.group("base") if m else uri.rsplit("/", 1)[0], []).append(uri)
            first = first or uri
        groups += [(base, files, {"epoch": epoch}) for base, files in by_base.items()]
    log.info("read_committed: %d epoch(s), %d file(s) given", len(groups),
             sum(len(g[1]) for g in groups))
    return _read_groups(spark, format, groups, first or "file:///", storage_options,
                        options, schema)


def _group_cut(group: str, storage_options: dict[str, Any] | None
               ) -> Callable[[], dict[str, int]]:
    """A look at group ``group``'s consistent cut (PROTOCOL §14.4): its ledger and each
    member's, every member opened as a plain folder from ``group.json`` (a table
    member's ledger root too: no table library)."""
    from ..group.cut import consistent_cut, member_staging_roots, read_group_claim

    ledger, claim = read_group_claim(group, storage_options)
    staging = member_staging_roots(ledger)
    members = {str(n): reader_sink(str(t), storage_options, staging.get(str(n)))
               for n, t in sorted(claim["members"].items())}

    def look() -> dict[str, int]:
        cut, moved = consistent_cut(ledger, members)
        for m in moved:
            log.warning("read_committed: group %s leaves epoch %s out of its cut: %s", group,
                        m.epoch, m.describe())
        return cut
    return look


def read_committed(spark: Any, target: str, *, epochs: Iterable[str] | None = None,
                   format: str = "parquet", storage_options: dict[str, Any] | None = None,
                   options: dict[str, str] | None = None, schema: Any = None,
                   distributed: bool | None = None,
                   committed: Mapping[str, Iterable[str]] | str | None = None,
                   group: str | None = None) -> Any:
    """A DataFrame of exactly the committed epochs of ``target``, with an ``epoch`` column.

    ``group``: the folder of a group ``target`` is a member of (docs/groups.md): only the
    group's *stable* epochs are read — those every member has switched to the group's
    winning attempt — so a join with another member's read sees one consistent cut.
    Read on the driver, the member's files are listed between two looks at the group's
    ledger and an epoch whose winning attempt changed meanwhile is left out; a
    distributed read takes the cut when it is called.

    ``epochs`` restricts to some epochs (those not committed are simply absent).
    ``schema`` is only used to type the empty result when nothing is committed.
    ``distributed`` (S3, Azure: stores Spark cannot read as shipped): True reads on the
    executors through the ``tpc`` data source (Parquet; the store's
    ``public_option_names`` — S3's endpoint and region, Azure's endpoint and account
    name — as reader options, credentials from the executors' environment), False reads on the
    driver with pyarrow.  Default: distributed for Parquet unless ``storage_options``
    carries anything else (credentials must not reach the query plan).

    A **table target** (``iceberg://...``; the job side never imports a table
    library) is read from ``committed``: the epochs' committed files as the table
    sink lists them where its library is (the Airflow side:
    ``TpcHook.committed_files(epochs)`` or ``airflow_tpc.tables.open_sink(...)
    .committed_files(epochs)``), a mapping or the path/URI of that mapping as JSON.
    They are the data files the epoch's table commit added (its snapshot's files
    of the epoch's partition), read by Spark itself — distributed, no scan planning
    on the driver.  ``committed`` also works for a folder (skips reading the markers).
    """
    cut: dict[str, int] | None = None
    if group is not None:
        look = _group_cut(group, storage_options)
        cut = look()
        wanted = set(cut) if epochs is None else set(cut) & {str(e) for e in epochs}
        epochs = sorted(wanted, key=epoch_sort_key)
        log.info("read_committed %s: the stable cut of group %s: %s", target, group, cut)
    if committed is not None:
        return _read_files(spark, load_committed(committed, storage_options), epochs, format,
                           storage_options, options or {}, schema)
    if _is_table(target):
        raise TpcError(
            f"{target} is a table: the job side does not open its catalog (no table library "
            "here). Resolve its committed files where the library is — "
            "open_sink(target, namespace, catalog_properties=...).committed_files(epochs), "
            "or TpcHook.committed_files on the Airflow side — and pass them: "
            "read_committed(spark, target, committed=<that mapping, or a JSON file of it>)")
    store = storage_class(target)  # asked of the store, not the URI
    remote = not store.spark_native
    secrets = sorted(set(storage_options or {}) - set(store.public_option_names))
    if distributed is None:
        distributed = remote and format == "parquet" and not secrets
    if distributed:
        if format != "parquet":
            raise TpcError("the distributed read-committed reader reads Parquet only")
        if secrets:
            raise TpcError(f"storage options {secrets} cannot go to executors (they would show "
                           f"in the query plan; only {list(store.public_option_names)} may): give "
                           "executors credentials by environment "
                           f"({', '.join(sorted(store.credential_env))})")
        from .datasource import register_data_source

        register_data_source(spark)
        reader = spark.read.format("tpc").option("target", target)
        if epochs is not None:
            reader = reader.option("epochs", ",".join(str(e) for e in epochs))
        for key in store.public_option_names:  # e.g. S3's endpoint, Azure's account name
            if (storage_options or {}).get(key):
                reader = reader.option(key, storage_options[key])
        return reader.load()
    sink = reader_sink(target, storage_options)
    committed = sink.committed_files(epochs)
    if group is not None and cut is not None:  # listed between two looks at the group
        again = look()
        committed = {e: u for e, u in committed.items() if again.get(e) == cut.get(e)}
    groups = []
    for epoch, uris in committed.items():
        for base, files in group_by_base(uris, sink.output_uri(epoch)).items():
            groups.append((base, files, {"epoch": epoch}))
    log.info("read_committed %s: %d epoch(s), %d file(s)", sink.target, len(committed),
             sum(len(v) for v in committed.values()))
    return _read_groups(spark, format, groups, target, storage_options, options or {},
                        schema)


def read_uncommitted(spark: Any, target: str, *, epochs: Iterable[str] | None = None,
                     format: str = "parquet", storage_options: dict[str, Any] | None = None,
                     options: dict[str, str] | None = None) -> Any:
    """DEBUGGING ONLY: everything on the target, committed or not.

    Adds ``epoch``, ``attempt`` (null for published data) and ``tpc_state``:
    ``published`` (what read_committed returns), or the state of a staged
    attempt (``OPEN``/``PRECOMMITTED``/``COMMITTED`` awaiting promotion, ...).
    Staged data may be incomplete, duplicated or about to be thrown away:
    never feed it downstream.
    """
    log.warning("read_uncommitted(%s): the result includes UNCOMMITTED, possibly partial or "
                "discarded data; use it for debugging only", target)
    sink = reader_sink(target, storage_options)
    wanted = None if epochs is None else {str(e) for e in epochs}
    groups = []
    committed = sink.committed_files(wanted)
    published_bases = set()
    for epoch, uris in committed.items():
        for base, files in group_by_base(uris, sink.output_uri(epoch)).items():
            published_bases.add(base)
            groups.append((base, files, {"epoch": epoch, "attempt": None,
                                         "tpc_state": "published"}))
    for info in sink.describe():
        if wanted is not None and info.epoch not in wanted:
            continue
        staging = sink.layout.staging(info.epoch, info.attempt)
        staged = list_staged(sink.storage, staging)
        if not staged:
            continue
        base = sink.storage.uri(staging)
        if base in published_bases:
            continue  # "manifest" promotion publishes in place: already listed above
        files = [sink.storage.uri(i.path) for i in staged.values()]
        groups.append((base, files, {"epoch": info.epoch, "attempt": info.attempt,
                                     "tpc_state": str(info.state)}))
    return _read_groups(spark, format, groups, target, storage_options, options or {},
                        None)
