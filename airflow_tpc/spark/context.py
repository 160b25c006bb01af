"""How a Spark job finds the transaction it writes for: :func:`current_transaction`.

The submit operator begins the transaction (it owns the ledger and the fencing
number) and hands the job a small JSON document, the *payload*::

    {<Transaction.to_dict()>, "guarantee": "EXACTLY_ONCE", "promotion": "move",
     "storage": {"endpoint_url": ..., "region_name": ...}}

in the Spark conf key ``spark.airflow_tpc.txn`` (``--conf`` of spark-submit), or,
as a fallback, in the environment variable ``AIRFLOW_TPC_TXN``.  The payload is
visible in the Spark UI, so it never carries credentials: the job takes S3 keys
from a credentials file the operator shipped with ``--files`` (the payload names
the file, ``"credentials_file"``; the job finds it with ``SparkFiles`` or in its
working directory) or from its own environment (``AWS_ACCESS_KEY_ID`` ...), as
boto/s3fs always do.

This module imports only the standard library and the pure core; pyspark is
used through the ``spark`` object the caller passes in.
"""

from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import dataclass, field
from typing import Any

from ..core.manifest import Manifest
from ..core.sink import Sink
from ..core.staging import list_staged
from ..core.transaction import DeliveryGuarantee, SinkConfig, Transaction
from ..errors import FencedError, InvalidState, TpcError
from ..storage import storage_class
from ..storage.s3_endpoint import check_endpoint_url
from .credentials import _credentials_from_env, _credentials_from_file
from .payload import (
    CONF_KEY,
    ENV_VAR,
    PUBLIC_STORAGE_KEYS,
    _as_guarantee,
    _check_credentials_file_name,
    build_payload,
    check_uri_field,
    payload_object,
    public_storage_options,
    read_payload,
    spark_conf_for,
)
from .sealing import _hash_parallel, _parquet_rows, _seal_footers

#: The payload's names moved to :mod:`.payload`; every earlier import of them from here
#: still works.
__all__ = [
    "CONF_KEY", "ENV_VAR", "HIVE_NULL", "PUBLIC_STORAGE_KEYS", "SIDECAR_PREFIX",
    "JobTransaction", "NoTransactionError", "build_payload", "current_transaction",
    "public_storage_options", "read_payload", "spark_conf_for",
]

log = logging.getLogger("airflow_tpc.spark")

#: Hidden sidecar each data-source write leaves in staging: rows/checksums measured
#: at write time, so :meth:`JobTransaction.precommit` need not re-read the files.
SIDECAR_PREFIX = "_tpc_write-"
#: The value Spark writes for a null partition value (``col=__HIVE_DEFAULT_PARTITION__``).
HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"

_STAGING_TAIL = re.compile(r"/epoch=[^/]+/attempt=\d{6,}/?$")


class NoTransactionError(TpcError):
    """The job was started without a transaction (and not in standalone mode)."""


@dataclass
class JobTransaction:
    """The job's view of one transaction: where to write, and how to seal it.

    Built by :func:`current_transaction`; also rebuilt on executors and in the
    Python worker that runs a data source's ``commit()`` (from :meth:`to_json`),
    which is why it is a plain, picklable dataclass without a live Spark session.
    """

    txn: Transaction
    guarantee: DeliveryGuarantee = DeliveryGuarantee.EXACTLY_ONCE
    promotion: str = "move"
    storage: dict[str, Any] = field(default_factory=dict)
    standalone: bool = False
    #: Credentials given explicitly in standalone mode: kept on this process only,
    #: never serialised (:meth:`to_json` drops them; executors use their environment).
    credentials: dict[str, Any] = field(default_factory=dict, repr=False)
    #: Name of the file (shipped with ``--files``) holding this job's credentials; it
    #: wins over the environment. Only the name travels (payload, ``to_json``).
    credentials_file: str | None = None
    #: The table URI when the target is a table (``iceberg://<catalog>/<ns>.<table>``):
    #: ``target`` is then the table's location, where the ledger and staging live.  The
    #: job never opens the catalog (no table library here): it writes Parquet files with
    #: the string ``epoch`` column (:meth:`with_epoch_column`) and seals them with the
    #: core; the table's own check of the files runs on the Airflow side (the sensor).
    table: str | None = None
    #: Whether a table's files carry the ``epoch`` column (False: the table's epoch is a
    #: ``replace_where`` predicate or an append, and its schema has no such column).
    epoch_column: bool = True

    # -- identity ------------------------------------------------------------
    @property
    def target(self) -> str:
        return self.txn.target

    @property
    def namespace(self) -> str:
        return self.txn.namespace

    @property
    def epoch(self) -> str:
        return self.txn.epoch

    @property
    def attempt(self) -> int:
        return self.txn.attempt

    @property
    def fencing_number(self) -> int:
        return self.txn.attempt

    @property
    def txn_id(self) -> str:
        return self.txn.txn_id

    @property
    def staging_uri(self) -> str:
        return self.txn.staging_uri

    @property
    def spark_native(self) -> bool:
        """Whether Spark's own writers reach the target's store as shipped (a local disk);
        if not (S3 without hadoop-aws, Azure without hadoop-azure) write with
        :func:`~airflow_tpc.spark.write_tpc`.  Asked of the store class, not the URI."""
        return storage_class(self.target).spark_native

    @property
    def is_table(self) -> bool:
        """Whether the target is a table (its files must carry the ``epoch`` column)."""
        return self.table is not None

    def with_epoch_column(self, df: Any) -> Any:
        """``df`` with the string column ``epoch`` = this epoch when the target is a table
        in the epoch layout (it infers each file's partition from it: docs/tables.md);
        unchanged for a folder, whose epoch is the published folder's name, and for a
        table whose epoch is a ``replace_where`` or an append.  Do not ``partitionBy``
        it."""
        if not self.is_table or not self.epoch_column:
            return df
        from pyspark.sql import functions as F

        return df.withColumn("epoch", F.lit(self.epoch).cast("string"))

    @property
    def transactional(self) -> bool:
        return self.guarantee is DeliveryGuarantee.EXACTLY_ONCE

    @property
    def output_uri(self) -> str:
        """Where the job writes: staging for EXACTLY_ONCE, the epoch's output otherwise.

        Spelled the way Spark's (Hadoop's) file systems name the store, as the store
        class says (``spark_uri``): S3 as ``s3a://``, the scheme Spark's native writers
        need (with hadoop-aws on the cluster); fsspec, and so the ``tpc`` data source,
        reads it as ``s3://``.  Asked of the store, not read off the URI, so a new
        backend names its own Spark spelling.
        """
        uri = self.txn.staging_uri if self.transactional else self.sink().output_uri(self.epoch)
        return storage_class(uri).spark_uri(uri)

    def storage_options(self) -> dict[str, Any]:
        """Options for fsspec/the core on this process: public ones + credentials.

        Only a store that takes credentials (``takes_credentials``, e.g. S3) gets any:
        a local disk needs none, and must not be handed keys meant for another store.
        """
        store = storage_class(self.target)
        if not store.takes_credentials:
            return {}
        names = store.credential_env  # each store its own variables: S3's AWS_*, Azure's
        from_file = _credentials_from_file(self.credentials_file, names) \
            if self.credentials_file else {}
        if from_file:
            return {**self.storage, **from_file, **self.credentials}
        return {**self.storage, **_credentials_from_env(names), **self.credentials}

    def fsspec_options(self) -> dict[str, Any]:
        """The same options spelled the way the store's fsspec file system wants them
        (``s3fs.S3FileSystem``, ``adlfs.AzureBlobFileSystem``: the store class says).

        A store that takes no credentials (a local disk) gets none: fsspec's local
        file system needs no options and keeps no listing cache.
        """
        store = storage_class(self.target)
        if not store.takes_credentials:
            return {}
        out = store.fsspec_options(self.storage_options())  # asked of the store
        # a remote store's client caches listings: a stale one would hide a file from
        # commit(); never cache one
        out.update(use_listings_cache=False, skip_instance_cache=True)
        return out

    # -- (de)serialisation ---------------------------------------------------
    def to_json(self) -> str:
        return build_payload(self.txn, guarantee=self.guarantee, promotion=self.promotion,
                             storage_options=self.storage, credentials_file=self.credentials_file,
                             table=self.table, epoch_column=self.epoch_column)

    @classmethod
    def from_payload(cls, payload: str | dict[str, Any], *, where: str = "payload"
                     ) -> JobTransaction:
        """Parse and check a payload; refuse one that carries credentials."""
        doc = payload_object(payload, where)
        storage = doc.get("storage") or {}
        if not isinstance(storage, dict):
            raise TpcError(f"{where}: 'storage' must be an object")
        secret = sorted(set(storage) - set(PUBLIC_STORAGE_KEYS))
        if secret:
            raise TpcError(
                f"{where} carries storage options {secret}: only {list(PUBLIC_STORAGE_KEYS)} "
                "may travel in the Spark conf (it is shown in the Spark UI). Give the job its "
                "credentials through its environment (AWS_ACCESS_KEY_ID, ...) instead.")
        if storage.get("endpoint_url") is not None:
            try:
                check_endpoint_url(storage["endpoint_url"], f"{where}: storage endpoint_url")
            except ValueError as exc:
                raise TpcError(str(exc)) from None
        cred_file = doc.get("credentials_file")
        if cred_file is not None:
            cred_file = _check_credentials_file_name(cred_file, where)
        table = doc.get("table")
        if table is not None:
            table = check_uri_field(table, where, "table")
        guarantee = _as_guarantee(doc.get("guarantee", DeliveryGuarantee.EXACTLY_ONCE.value))
        txn = Transaction.from_dict(doc)
        return cls(txn, guarantee, str(doc.get("promotion", "move")), dict(storage),
                   credentials_file=cred_file, table=table,
                   epoch_column=doc.get("epoch_column", True) is not False)

    # -- the core ------------------------------------------------------------
    def sink(self) -> Sink:
        """A core :class:`Sink` for this target, configured like the operator's.

        For a table target too: a plain core sink on the table's location, with the
        staging root the operator's table sink chose (read off ``staging_uri``).  It
        reads the same ledger and seals the same manifest the table sink would; only
        the table's schema check is left to the Airflow side, which has the catalog."""
        staging_root = _STAGING_TAIL.sub("", self.txn.staging_uri)
        config = SinkConfig(timeout_s=self.txn.timeout_s, promotion=self.promotion)
        sink = Sink(self.target, self.namespace, storage_options=self.storage_options(),
                    config=config)
        if sink.storage.uri(sink.layout.staging(self.epoch, self.attempt)) != self.staging_uri:
            # the operator staged somewhere else on the same store (SinkConfig.staging_root)
            config = SinkConfig(timeout_s=self.txn.timeout_s, promotion=self.promotion,
                                staging_root=staging_root)
            sink = Sink(self.target, self.namespace, storage_options=self.storage_options(),
                        config=config)
        return sink

    def precommit(self) -> Manifest | None:
        """Seal the staging (the core writes the manifest last).  Idempotent.

        Rows and checksums recorded by data-source writes are passed on so the
        core does not re-read those files.  Returns None (and writes nothing) for
        AT_LEAST_ONCE/NONE, which have nothing to seal.  The core raises FencedError
        for a superseded attempt.
        """
        if not self.transactional:
            log.info("%s: guarantee %s writes straight to %s; nothing to pre-commit",
                     self.txn_id, self.guarantee.value, self.output_uri)
            return None
        sink = self.sink()
        if sink.read_manifest(self.txn) is not None:
            return sink.precommit(self.txn)  # sealed already: the core returns it (or refuses)
        staging = sink.layout.staging(self.epoch, self.attempt)
        listing = sink.storage.list(staging)
        staged = list_staged(sink.storage, staging, listing)
        rows: dict[str, int] = {}
        checksums: dict[str, str] = {}
        measured = self._measured_by_writers(sink, listing)
        for rel, (checksum, size, nrows) in measured.items():
            if rel in staged and staged[rel].size == size:  # trusted only if unchanged
                checksums[rel] = checksum
                if nrows is not None:
                    rows[rel] = nrows
        unmeasured = [info for rel, info in staged.items() if rel not in checksums]
        checksums.update(_hash_parallel(sink, staging, unmeasured))
        kept: dict[str, bytes] | None = {} if self.is_table else None
        rows.update(_parquet_rows(sink, staging, [i for r, i in staged.items()
                                                  if r not in rows], keep=kept))
        manifest = sink.precommit(self.txn, rows=rows or None, checksums=checksums or None,
                                  listing=listing)
        if kept:  # a table's check needs the whole footers the row count read: kept
            _seal_footers(sink, manifest, kept)
        return manifest

    def _measured_by_writers(self, sink: Sink, listing: list[Any]
                             ) -> dict[str, tuple[str, int, int | None]]:
        """rel -> (checksum, size, rows) from the sidecars of data-source writes."""
        out: dict[str, tuple[str, int, int | None]] = {}
        for info in listing:
            if not info.path.rsplit("/", 1)[-1].startswith(SIDECAR_PREFIX):
                continue
            try:
                doc = json.loads(sink.storage.read_bytes(info.path) or b"{}")
                for rel, e in doc.get("files", {}).items():
                    rows = e.get("rows")
                    out[rel] = (str(e["checksum"]), int(e["size"]),
                                None if rows is None else int(rows))
            except (ValueError, KeyError, TypeError, AttributeError):
                continue  # a torn sidecar only costs a re-hash
        return out

    def check_live(self) -> None:
        """Fail fast if this attempt can no longer be pre-committed.

        The core would refuse at pre-commit anyway; checking at job start saves
        the compute of a zombie (e.g. an Airflow retry began a higher attempt
        while this spark-submit was queued).
        """
        sink = self.sink()
        recorded = sink.transaction(self.epoch, self.attempt)  # InvalidState if unknown
        if recorded != self.txn:
            raise InvalidState(f"{self.txn_id}: the payload does not match the ledger's begin "
                               "record (stale or edited payload)")
        latest = sink.latest_transaction(self.epoch)
        if latest is not None and latest.attempt > self.attempt:
            raise FencedError(f"{self.txn_id}: attempt {latest.attempt} of epoch {self.epoch} "
                              "has begun since; this job is a zombie and its output would "
                              "never be published")
        state = {i.attempt: i.state for i in sink.describe(self.epoch)}.get(self.attempt)
        if state is not None and state.value in ("COMMITTED", "ABORTED", "EXPIRED"):
            raise InvalidState(f"{self.txn_id} is already {state.value}; begin a new attempt")

    def commit(self, **kwargs: Any) -> Any:
        """Commit from the job itself: for standalone runs (Airflow's commit task does it)."""
        if not self.standalone:
            log.warning("%s: committing from inside the job; under Airflow the commit "
                        "operator does this after validating the manifest", self.txn_id)
        return self.sink().commit(self.txn, **kwargs)

    def abort(self, reason: str = "aborted by the job") -> None:
        self.sink().abort(self.txn, reason)


def current_transaction(spark: Any = None, *, standalone_target: str | None = None,
                        epoch: str | None = None, namespace: str | None = None,
                        guarantee: DeliveryGuarantee | str = DeliveryGuarantee.EXACTLY_ONCE,
                        storage_options: dict[str, Any] | None = None,
                        check: bool = True) -> JobTransaction:
    """The transaction this job writes for.

    Under Airflow the submit operator passes it (``spark.airflow_tpc.txn`` or
    ``$AIRFLOW_TPC_TXN``).  Without one, pass ``standalone_target`` and ``epoch``:
    the job then begins its own transaction (and says so in the log), and must
    call ``txn.precommit()`` and ``txn.commit()`` itself.  A passed transaction
    always wins over the standalone arguments, so the same script runs both ways.
    ``check`` (default) reads the ledger first, so a job whose attempt is already
    fenced or decided fails at once instead of after computing its output.
    """
    payload, where = read_payload(spark)
    if payload:
        job = JobTransaction.from_payload(payload, where=where)
        if check:
            job.check_live()
        if standalone_target is not None:
            log.info("standalone_target ignored: the transaction came from %s", where)
        log.info("writing for %s (guarantee %s) from %s; output %s", job.txn_id,
                 job.guarantee.value, where, job.output_uri)
        return job
    if standalone_target is None:
        raise NoTransactionError(
            f"no airflow-tpc transaction: neither the Spark conf {CONF_KEY} nor the "
            f"environment variable {ENV_VAR} is set. Run this job through the airflow-tpc "
            "submit operator, or run it standalone with "
            "current_transaction(spark, standalone_target='s3://bucket/table', epoch='2026-11-20')"
            " (it then begins, and must commit, its own transaction).")
    if epoch is None:
        raise NoTransactionError("standalone mode needs an epoch: "
                                 "current_transaction(spark, standalone_target=..., epoch=...)")
    namespace = namespace or f"standalone-{os.path.basename(standalone_target.rstrip('/'))}"
    sink = Sink(standalone_target, namespace, storage_options=storage_options)
    txn = sink.begin(epoch, owner={"standalone": True})
    public = public_storage_options(storage_options)
    log.warning("STANDALONE: no transaction was passed, so this job began its own: %s "
                "(staging %s). Nothing publishes it unless the job commits it.",
                txn.txn_id, txn.staging_uri)
    secret = {k: v for k, v in (storage_options or {}).items() if k not in PUBLIC_STORAGE_KEYS}
    return JobTransaction(txn, _as_guarantee(guarantee), sink.config.promotion, public,
                          standalone=True, credentials=secret)
