"""The ``tpc`` Python Data Source: Parquet from executors through fsspec, sealed on commit.

Why it exists: pyspark ships no hadoop-aws, so ``s3a://`` cannot be written by
Spark's native writers here; this writer reaches any fsspec store (S3 via s3fs)
and measures what it wrote (rows, MD5 — equal to a single-part S3 ETag) while
writing, so pre-commit does not have to read anything back.

Exactly-once inside one write:

- every file name carries the write id, the Spark partition id and the task
  attempt (``part-00003-a1-w1b2c3d4-0000.parquet``): a retried or speculative
  task never overwrites or collides with another attempt's file;
- each successful task reports its files in a :class:`TpcCommitMessage`;
- ``commit()`` (run by Spark in a Python worker once every task succeeded)
  deletes every file of *this write* that no message names — leftovers of
  failed or killed task attempts — writes a hidden sidecar with the measured
  rows/checksums, and (by default) pre-commits through the core;
- ``abort()`` deletes every file of this write.

Usage::

    df.write.format("tpc").option("txn", txn.to_json()).mode("append").save()
    # or: write_tpc(df, txn, partition_by=["country"])
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from ..errors import TpcError
from ..storage import storage_class
from .context import JobTransaction
from .writer import TpcCommitMessage, TpcFile, TpcWriter, escape_partition_value

#: The writer moved to :mod:`.writer`; every earlier import of it from here still works.
__all__ = [
    "FORMAT_NAME", "TpcCommitMessage", "TpcDataSource", "TpcFile", "TpcReader", "TpcWriter",
    "escape_partition_value", "register_data_source", "write_tpc",
]

FORMAT_NAME = "tpc"


class TpcReader(DataSourceReader):
    """Reads the committed files of a target on the executors (one partition per file)."""

    def __init__(self, parts: list[tuple[str, str, str]], arrow_schema: Any,
                 storage_options: dict[str, Any]) -> None:
        self.parts = parts
        self.arrow_schema = arrow_schema
        self.storage_options = storage_options

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(part) for part in self.parts]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        from .committed import read_part

        if partition is None or partition.value is None:
            return  # nothing committed: Spark still runs one task with no partition value
        yield from read_part(partition.value, self.arrow_schema, self.storage_options)


class TpcDataSource(DataSource):
    """``tpc`` format: transactional writes, and read-committed reads.

    Write: ``df.write.format("tpc").option("txn", txn.to_json()).save()``.
    Read:  ``spark.read.format("tpc").option("target", uri).load()`` (Parquet;
    options ``epochs`` (comma-separated) and the store's ``public_option_names`` —
    ``endpoint_url``/``region_name`` on S3, ``endpoint_url``/``account_name`` on Azure;
    credentials from the environment, as for writes).
    """

    writer_class: type[TpcWriter] = TpcWriter

    @classmethod
    def name(cls) -> str:
        return FORMAT_NAME

    def _options(self) -> dict[str, str]:
        return {k.lower(): v for k, v in dict(self.options).items()}

    def writer(self, schema: Any, overwrite: bool) -> TpcWriter:
        opts = self._options()
        payload = opts.get("txn")
        if not payload:
            raise TpcError("the tpc format needs .option('txn', txn.to_json()) "
                           "(txn = airflow_tpc.spark.current_transaction(spark))")
        job = JobTransaction.from_payload(payload, where="option 'txn'")
        return self.writer_class(job, schema, overwrite, opts)

    # -- reading ---------------------------------------------------------------
    def _read_plan(self) -> tuple[list[tuple[str, str, str]], Any, dict[str, Any]]:
        from .committed import arrow_schema_of, committed_parts

        cached = getattr(self, "_plan", None)
        if cached is not None:
            return cached
        opts = self._options()
        target = opts.get("target")
        if not target:
            raise TpcError("reading the tpc format needs .option('target', uri)")
        # which options may travel is the store's to say (S3: endpoint, region; Azure:
        # endpoint, account name); anything else may be a secret, and options show in the
        # query plan: refused by name (never by value)
        store = storage_class(target)
        secret = sorted(set(opts) - {"target", "epochs", *store.public_option_names})
        if secret:
            raise TpcError(f"options {secret} would show in the query plan (the tpc reader of "
                           f"{target.split(':', 1)[0]}:// takes target, epochs and "
                           f"{list(store.public_option_names)}): give credentials through the "
                           f"environment ({', '.join(sorted(store.credential_env))})")
        storage = {k: opts[k] for k in store.public_option_names if opts.get(k)}
        epochs = [e for e in opts.get("epochs", "").split(",") if e] or None
        parts = committed_parts(target, epochs, storage)
        self._plan = (parts, arrow_schema_of(parts, storage), storage)
        return self._plan

    def schema(self) -> Any:
        from pyspark.sql.pandas.types import from_arrow_schema

        return from_arrow_schema(self._read_plan()[1])

    def reader(self, schema: Any) -> TpcReader:
        from pyspark.sql.pandas.types import to_arrow_schema

        parts, _, storage = self._read_plan()
        return TpcReader(parts, to_arrow_schema(schema), storage)


_registered: set[int] = set()


def register_data_source(spark: Any, source: type[DataSource] = TpcDataSource) -> None:
    """Register the ``tpc`` format with this session (idempotent)."""
    key = hash((id(spark), source))
    if key not in _registered:
        spark.dataSource.register(source)
        _registered.add(key)


def write_tpc(df: Any, txn: JobTransaction, *, partition_by: list[str] | None = None,
              mode: str = "append", compression: str = "snappy",
              max_records_per_file: int = 0, precommit: bool = True,
              format_name: str = FORMAT_NAME, options: dict[str, str] | None = None) -> None:
    """Write ``df`` into the transaction through the ``tpc`` data source.

    With ``precommit=True`` (default) the write seals the transaction when it
    succeeds; pass False to add more writes to the same transaction and call
    ``txn.precommit()`` once at the end.  ``options`` go to the data source as is.
    """
    if mode not in ("append", "overwrite"):
        raise TpcError(f"the tpc format supports modes append and overwrite, not {mode!r}")
    if format_name == FORMAT_NAME:
        register_data_source(df.sparkSession)
    (df.write.format(format_name)
     .option("txn", txn.to_json())
     .option("partition_by", ",".join(partition_by or []))
     .option("compression", compression)
     .option("max_records_per_file", str(max_records_per_file))
     .option("precommit", "true" if precommit else "false")
     .options(**(options or {}))
     .mode(mode).save())
