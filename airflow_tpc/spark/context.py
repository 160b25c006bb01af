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

from ..errors import FencedError, InvalidState, TpcError
from ..manifest import Manifest
from ..sink import Sink
from ..staging import list_staged
from ..storage import storage_class
from ..storage.s3 import check_endpoint_url, public_s3_options
from ..transaction import DeliveryGuarantee, SinkConfig, Transaction

log = logging.getLogger("airflow_tpc.spark")

#: Spark conf key carrying the payload (set with ``--conf`` by the submit operator).
CONF_KEY = "spark.airflow_tpc.txn"
#: Environment variable carrying the payload when the conf key is absent.
ENV_VAR = "AIRFLOW_TPC_TXN"
#: Storage options allowed to travel in the payload (everything else may be secret).
PUBLIC_STORAGE_KEYS = ("endpoint_url", "region_name")
#: Hidden sidecar each data-source write leaves in staging: rows/checksums measured
#: at write time, so :meth:`JobTransaction.precommit` need not re-read the files.
SIDECAR_PREFIX = "_tpc_write-"
#: The value Spark writes for a null partition value (``col=__HIVE_DEFAULT_PARTITION__``).
HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"

_STAGING_TAIL = re.compile(r"/epoch=[^/]+/attempt=\d{6,}/?$")
#: A credentials file is named, never a path: a plain file name shipped with --files.
_CREDENTIALS_FILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")
#: The variables a credentials file may hold (the same names as the environment's).
_CREDENTIAL_VARS = {"AWS_ACCESS_KEY_ID": "key", "AWS_SECRET_ACCESS_KEY": "secret",
                    "AWS_SESSION_TOKEN": "token"}
_FILE_CREDENTIALS: dict[str, dict[str, Any]] = {}


class NoTransactionError(TpcError):
    """The job was started without a transaction (and not in standalone mode)."""


def _as_guarantee(value: Any) -> DeliveryGuarantee:
    try:
        return DeliveryGuarantee(str(value).upper())
    except ValueError:
        raise TpcError(f"unknown delivery guarantee {value!r}; use one of "
                       f"{[g.value for g in DeliveryGuarantee]}") from None


def public_storage_options(options: dict[str, Any] | None) -> dict[str, Any]:
    """The part of ``options`` that may be shown in a UI: endpoint and region only.

    An endpoint with ``user:secret@`` or a query string loses them here (it is refused
    where it is accepted; this is the second line of defence).
    """
    return public_s3_options(options)


def build_payload(txn: Transaction, *, guarantee: DeliveryGuarantee | str = "EXACTLY_ONCE",
                  promotion: str = "move",
                  storage_options: dict[str, Any] | None = None,
                  credentials_file: str | None = None, table: str | None = None,
                  epoch_column: bool = True) -> str:
    """The JSON the submit operator puts in ``spark.airflow_tpc.txn`` (or ``AIRFLOW_TPC_TXN``).

    Secrets in ``storage_options`` are dropped here on purpose: the Spark conf is
    shown in the Spark UI and in logs.  ``credentials_file`` is the *name* of a file
    shipped with ``--files`` holding ``AWS_*`` credentials as JSON (never its content).
    ``epoch_column``: whether a table's files carry the ``epoch`` column (the epoch
    layout); False for a table whose epoch is a ``replace_where`` or an append.
    """
    doc = {**txn.to_dict(), "guarantee": _as_guarantee(guarantee).value,
           "promotion": promotion, "storage": public_storage_options(storage_options)}
    if table:
        doc["table"] = _check_table_uri(table, "payload")
        if not epoch_column:
            doc["epoch_column"] = False
    if credentials_file:
        doc["credentials_file"] = _check_credentials_file_name(credentials_file, "payload")
    return json.dumps(doc, sort_keys=True)


def _check_table_uri(table: Any, where: str) -> str:
    """A table target's URI, for the job to know it writes a table (never credentials)."""
    if not isinstance(table, str) or "://" not in table \
            or any(c in table for c in "?#\n\x00"):
        raise TpcError(f"{where}: 'table' must be a table URI such as "
                       "iceberg://<catalog>/<namespace>.<table> (no user part, query or fragment)")
    if "@" in table.split("://", 1)[1].split("/", 1)[0]:
        raise TpcError(f"{where}: 'table' must not carry a user part")
    return table


def _check_credentials_file_name(name: Any, where: str) -> str:
    if not isinstance(name, str) or not _CREDENTIALS_FILE_NAME.fullmatch(name):
        raise TpcError(f"{where}: 'credentials_file' must be a plain file name (letters, digits, "
                       "'.', '_', '-'), the name of a file shipped with --files")
    return name


def _credentials_file_candidates(name: str) -> list[str]:
    """Where a file shipped with ``--files`` lands: SparkFiles' root (local, standalone,
    Kubernetes client; executors and Python workers too), else the working directory
    (YARN localizes ``--files`` into each container's working directory)."""
    out = []
    try:
        from pyspark import SparkFiles

        out.append(os.path.join(SparkFiles.getRootDirectory(), name))
    except Exception:  # noqa: BLE001 - no pyspark, or no SparkContext in this process
        pass
    out.append(os.path.join(os.getcwd(), name))
    return out


def _credentials_from_file(name: str) -> dict[str, Any]:
    """S3 options from the credentials file the payload names (cached per process).

    A named file that cannot be found or read is an error, never a silent fall back to
    another identity.  Messages name the file, never its content.
    """
    for path in _credentials_file_candidates(name):
        if path in _FILE_CREDENTIALS:
            return _FILE_CREDENTIALS[path]
        try:
            with open(path, encoding="utf-8") as fh:
                doc = json.load(fh)
        except FileNotFoundError:
            continue
        except (OSError, ValueError):
            raise TpcError(f"the credentials file {name} shipped with the job cannot be read "
                           "or is not JSON") from None
        if not isinstance(doc, dict) or not all(
                isinstance(doc.get(k), str) and doc[k]
                for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")):
            raise TpcError(f"the credentials file {name} must be a JSON object with "
                           "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")
        opts = {opt: doc[var] for var, opt in _CREDENTIAL_VARS.items()
                if isinstance(doc.get(var), str) and doc[var]}
        _FILE_CREDENTIALS[path] = opts
        return opts
    raise TpcError(
        f"the payload names the credentials file {name}, but it is neither in SparkFiles' "
        "directory nor in the working directory: it must be shipped with spark-submit "
        "--files (the submit operator does this; a standalone cluster in cluster deploy mode "
        "cannot).")


def spark_conf_for(txn: Transaction, **kwargs: Any) -> dict[str, str]:
    """``{CONF_KEY: payload}``: ready for SparkSubmitOperator(conf=...)."""
    return {CONF_KEY: build_payload(txn, **kwargs)}


def _credentials_from_env() -> dict[str, Any]:
    """S3 options that come from the job's environment, never from the payload."""
    opts: dict[str, Any] = {}
    if os.environ.get("AWS_ACCESS_KEY_ID") and os.environ.get("AWS_SECRET_ACCESS_KEY"):
        opts["key"] = os.environ["AWS_ACCESS_KEY_ID"]
        opts["secret"] = os.environ["AWS_SECRET_ACCESS_KEY"]
        if os.environ.get("AWS_SESSION_TOKEN"):
            opts["token"] = os.environ["AWS_SESSION_TOKEN"]
    return opts  # empty: s3fs/botocore fall back to their default chain (profiles, IAM role)


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
        if not storage_class(self.target).takes_credentials:
            return {}
        from_file = _credentials_from_file(self.credentials_file) if self.credentials_file else {}
        if from_file:
            return {**self.storage, **from_file, **self.credentials}
        return {**self.storage, **_credentials_from_env(), **self.credentials}

    def fsspec_options(self) -> dict[str, Any]:
        """The same options spelled the way ``s3fs.S3FileSystem`` wants them.

        A store that takes no credentials (a local disk) gets none: fsspec's local
        file system needs no options and keeps no listing cache.
        """
        if not storage_class(self.target).takes_credentials:
            return {}
        opts = self.storage_options()
        out: dict[str, Any] = {k: opts[k] for k in ("key", "secret", "token", "endpoint_url")
                               if k in opts}
        if "region_name" in opts:
            out["client_kwargs"] = {"region_name": opts["region_name"]}
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
        if isinstance(payload, str):
            try:
                doc = json.loads(payload)
            except ValueError as exc:
                raise TpcError(f"{where} is not valid JSON: {exc}") from None
        else:
            doc = dict(payload)
        if not isinstance(doc, dict):
            raise TpcError(f"{where} must be a JSON object")
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
            table = _check_table_uri(table, where)
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
        rows.update(_parquet_rows(sink, staging, [i for r, i in staged.items()
                                                  if r not in rows]))
        return sink.precommit(self.txn, rows=rows or None, checksums=checksums or None,
                              listing=listing)

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


def _hash_parallel(sink: Sink, staging: str, infos: list[Any]) -> dict[str, str]:
    """Checksums of files no writer measured (native writers), on a few threads.

    S3 objects are not read at all (their ETag is used).
    """
    from ..staging import checksum_for, on_threads

    prefix = staging.rstrip("/") + "/"
    sums = on_threads(lambda i: checksum_for(sink.storage, i), infos)
    return {info.path[len(prefix):]: s for info, s in zip(infos, sums, strict=True)}


def _parquet_rows(sink: Sink, staging: str, infos: list[Any]) -> dict[str, int]:
    """Row counts of Parquet files no writer counted (Spark's native writers), from
    their footers: a ranged read of each file's tail, on a few threads, never the
    data.  ``list`` then shows rows for native jobs as it does for the ``tpc`` source.
    A file that is not Parquet after all keeps its rows unknown (None), as before."""
    import pyarrow.parquet as pq

    from ..staging import on_threads

    def rows_of(info: Any) -> int | None:
        if not info.path.endswith(".parquet"):
            return None
        try:
            with sink.storage.open_input(info.path) as fh:
                return int(pq.read_metadata(fh).num_rows)
        except Exception as exc:  # noqa: BLE001 - unknown rows, never a failed seal
            log.warning("no row count for %s (%s); its rows stay unknown",
                        sink.storage.uri(info.path), type(exc).__name__)
            return None

    prefix = staging.rstrip("/") + "/"
    counted = on_threads(rows_of, infos)
    return {info.path[len(prefix):]: n for info, n in zip(infos, counted, strict=True)
            if n is not None}


def read_payload(spark: Any = None, conf_key: str = CONF_KEY,
                 env_var: str = ENV_VAR) -> tuple[str | None, str]:
    """(payload, where it came from): the Spark conf key first, then the environment
    (a group's payload has its own key and variable)."""
    conf_value = None
    if spark is not None:
        try:
            conf_value = spark.conf.get(conf_key, None)
        except Exception:  # noqa: BLE001 - e.g. a Connect session without that conf
            conf_value = None
    env_value = os.environ.get(env_var)
    if conf_value:
        if env_value and env_value != conf_value:
            log.warning("both %s and $%s are set and differ; using the Spark conf", conf_key,
                        env_var)
        return conf_value, f"Spark conf {conf_key}"
    if env_value:
        return env_value, f"environment variable {env_var}"
    return None, ""


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
