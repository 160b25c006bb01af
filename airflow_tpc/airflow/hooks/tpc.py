"""TpcHook: the one place the Airflow layer turns sink arguments into a core :class:`Sink`
and asks it protocol questions.

Why a hook: every task of the protocol (submit, sensor, trigger, commit, abort, the
admin DAG and the UI plugin) must address the *same* target with the *same*
configuration, and credentials must come from an Airflow connection, never from
operator arguments (those are rendered in the UI and serialised in the DAG).  Why the
queries live here too: the sensor's poke and the trigger's poll must ask the *same*
cheap question (:meth:`TpcHook.check_precommit`), and the abort task and the UI plugin
must agree on which attempts a DAG run owns (:meth:`TpcHook.run_attempts`); as methods of
one class they cannot drift apart, and a regression to an expensive query shows up in
one place.

Like the Amazon provider's ``AwsBaseHookMixin`` + ``aws_conn_id``/``region_name``, the
arguments that say *which* sink (:class:`SinkArgs`) are declared once; the operator and
sensor bases in :mod:`airflow_tpc.airflow.operators.base` and :class:`PrecommitTrigger` all build
their hook from a :class:`SinkArgs`.

What the hook stands on lives beside it, and is re-exported here: building the sink from a
connection (:mod:`airflow_tpc.airflow.hooks.base`), storage credentials
(:mod:`airflow_tpc.airflow.hooks.credentials`) and the catalog connection of table targets
(:mod:`airflow_tpc.airflow.hooks.catalog`).
"""

from __future__ import annotations

import time
from dataclasses import InitVar, dataclass
from typing import TYPE_CHECKING, Any, Literal

from airflow_tpc import InvalidState, ManifestError, SinkConfig, Transaction, TxnState
from airflow_tpc.airflow.hooks.base import (
    TpcBaseHook,
    is_table_target,
    sink_config,
    sink_config_dict,
)
from airflow_tpc.airflow.hooks.catalog import (
    LEDGER_ROOT_KEY,
    IcebergCatalogHook,
    catalog_properties_from_connection,
    ledger_root_from_connection,
)
from airflow_tpc.airflow.hooks.credentials import (
    AWS_CONN_TYPE,
    PUBLIC_STORAGE_KEYS,
    AwsConnectionError,
    AwsCredentials,
    check_public,
    options_from_connection,
    public_options,
)
from airflow_tpc.airflow.utils.metrics import (
    ABORTS,
    EXPIRATIONS,
    FENCED,
    PRECOMMIT_DURATION,
    ROLL_FORWARDS,
)
from airflow_tpc.core.sink_trust import record_validated
from airflow_tpc.errors import FencedError, TransactionExpired

if TYPE_CHECKING:
    from airflow.sdk.definitions.connection import Connection

    from airflow_tpc.core.manifest import Manifest, ManifestSummary
    from airflow_tpc.core.transaction import CommitResult, TxnInfo

__all__ = [
    "AWS_CONN_TYPE", "GROUP_XCOM_KEY", "LEDGER_ROOT_KEY", "PUBLIC_STORAGE_KEYS",
    "SINK_ARG_NAMES", "TXN_XCOM_KEY",
    "AwsConnectionError", "AwsCredentials", "CommitOutcome", "IcebergCatalogHook",
    "PrecommitCheck", "PrecommitStatus", "SinkArgs", "TpcBaseHook", "TpcHook",
    "catalog_properties_from_connection", "check_public", "is_table_target",
    "ledger_root_from_connection", "options_from_connection", "public_options", "sink_config",
    "sink_config_dict",
]

#: XCom key under which the submit operator publishes the transaction it began.
TXN_XCOM_KEY = "tpc_txn"
#: XCom key under which the group submit operator publishes the group transaction it began.
GROUP_XCOM_KEY = "tpc_group_txn"

#: Names of the sink arguments, in the order operators, sensor and trigger declare them.
SINK_ARG_NAMES = ("target", "namespace", "storage_conn_id", "storage_options", "sink_config",
                  "catalog_conn_id", "ledger_uri", "replace_where", "write_mode", "add_columns")



@dataclass(frozen=True)
class SinkArgs:
    """Which sink a task addresses: the arguments every protocol task shares.

    Declared once, so the submit, sensor, commit and abort tasks, the trigger (whose
    kwargs are stored in the metadata DB) and the UI plugin cannot disagree about them,
    and one check keeps secrets out: ``storage_options`` holds public options only
    (``endpoint_url``, ``region_name``); credentials come from the *named* connection,
    resolved where the hook runs.

    :param target: ``/abs/path``, ``file:///abs/path`` or ``s3://bucket/prefix``.
    :param namespace: the pipeline's transactional id prefix; one per pipeline and target.
    :param storage_conn_id: connection holding credentials: a generic one (login = access
        key, password = secret; extra ``endpoint_url``/``region_name``/``token``) or, with
        the Amazon provider, an ``aws`` one (:class:`AwsCredentials`: keys, session tokens,
        role assumption). Without it the store's default chain is used (environment,
        profile, instance role).
    :param storage_options: public options only (``endpoint_url``, ``region_name``).
    :param sink_config: :class:`SinkConfig` or its keyword arguments.
    :param catalog_conn_id: for a table target, the ``iceberg_catalog`` connection holding
        the catalog's properties; without it pyiceberg's own configuration is used
        (``~/.pyiceberg.yaml``, ``PYICEBERG_CATALOG__<NAME>__*``).
    :param ledger_uri: for a table target, where its ledger lives apart from the table
        (see :func:`airflow_tpc.tables.open_sink`).
    :param replace_where: for a table target, the rows one epoch owns (a predicate or
        a column mapping; :mod:`airflow_tpc.tables.scope`).
    :param write_mode: ``"replace"`` (default) or ``"append"`` (table targets).
    :param add_columns: an Iceberg target's commit may add the staged files' new columns.
    :param where: who passed them, for the refusal message.
    """

    target: str
    namespace: str
    storage_conn_id: str | None = None
    storage_options: dict[str, Any] | None = None
    sink_config: SinkConfig | dict[str, Any] | None = None
    catalog_conn_id: str | None = None
    ledger_uri: str | None = None
    replace_where: Any = None
    write_mode: str = "replace"
    add_columns: bool = False
    where: InitVar[str] = "SinkArgs"

    def __post_init__(self, where: str) -> None:
        object.__setattr__(self, "storage_options", check_public(self.storage_options, where))

    def serialize(self) -> dict[str, Any]:
        """JSON-safe keyword arguments (trigger kwargs): names and public options only."""
        return {"target": self.target, "namespace": self.namespace,
                "storage_conn_id": self.storage_conn_id,
                "storage_options": dict(self.storage_options or {}),
                "sink_config": sink_config_dict(self.sink_config),
                "catalog_conn_id": self.catalog_conn_id, "ledger_uri": self.ledger_uri,
                "replace_where": self.replace_where, "write_mode": self.write_mode,
                "add_columns": self.add_columns}

    @classmethod
    def from_txn_doc(cls, doc: dict[str, Any], where: str = "transaction XCom") -> SinkArgs:
        """The sink a submit task's ``tpc_txn`` XCom names (target, namespace, connection
        name, public options): how the UI plugin finds a run's transactions."""
        return cls(doc.get("table") or doc["target"], doc["namespace"],
                   doc.get("storage_conn_id") or None, doc.get("storage_options") or None,
                   catalog_conn_id=doc.get("catalog_conn_id") or None,
                   ledger_uri=doc.get("ledger_uri") or None, where=where)

    def hook(self, *, connection: Connection | None = None,
             catalog_connection: Connection | None = None) -> TpcHook:
        return TpcHook(self.target, self.namespace, storage_conn_id=self.storage_conn_id,
                       storage_options=self.storage_options, config=self.sink_config,
                       catalog_conn_id=self.catalog_conn_id, ledger_uri=self.ledger_uri,
                       replace_where=self.replace_where, write_mode=self.write_mode,
                       add_columns=self.add_columns, connection=connection,
                       catalog_connection=catalog_connection)


PrecommitStatus = Literal["ready", "waiting", "failed"]


@dataclass(frozen=True)
class PrecommitCheck:
    """One look at an attempt for the sensor or the trigger (:meth:`TpcHook.check_precommit`).

    ``sealed`` is what the attempt pre-committed when ``status == "ready"``: the validated
    manifest while staged, or the commit decision's digest and totals once committed,
    so the pointer is built from it without reading storage again.
    """

    status: PrecommitStatus
    message: str
    txn: Transaction
    sealed: Manifest | ManifestSummary | None = None


@dataclass(frozen=True)
class CommitOutcome:
    """What :meth:`TpcHook.commit_pointer` did, and whether readers already saw the attempt
    before it (a rerun after a try that published: the Asset event may still be owed)."""

    txn: Transaction
    result: CommitResult
    was_published: bool


class TpcHook(TpcBaseHook):
    """Builds the :class:`Sink` of one target from public options plus a connection, and asks
    it the protocol questions the tasks need.

    :param target: ``/abs/path``, ``file:///abs/path`` or ``s3://bucket/prefix``.
    :param namespace: the pipeline's transactional id prefix; one per pipeline and target.
    :param storage_conn_id: optional connection holding credentials: generic (login =
        access key, password = secret; extra ``endpoint_url``/``region_name``/``token``) or
        the Amazon provider's ``aws`` type (:class:`AwsCredentials`). Without it s3fs uses
        its default chain (environment, profile, instance role).
    :param storage_options: public options only (``endpoint_url``, ``region_name``).
    :param config: :class:`SinkConfig` or its keyword arguments.
    :param catalog_conn_id: a table target's ``iceberg_catalog`` connection
        (:class:`IcebergCatalogHook`); None: pyiceberg's own configuration.
    :param ledger_uri: a table target's ledger apart from the table (managed storage).
    :param replace_where, write_mode: which rows of a table an epoch owns.
    :param add_columns: an Iceberg target's commit may add the staged files' new columns.
    """

    # -- the protocol questions of the tasks --------------------------------------------

    def check_precommit(self, txn_doc: dict[str, Any] | str) -> PrecommitCheck:
        """Is the attempt pre-committed?  One look at storage, blocking; the sensor's poke
        and the trigger's poll both ask exactly this.

        Cheap on purpose, since it runs every ``poke_interval``: the begin record, then
        :meth:`Sink.poll` (one listing of the epoch's ledger, the attempt's decision or
        its manifest), never :meth:`Sink.describe` (which lists and reads every attempt's
        staging).  Failure signals are the ledger's: the attempt was aborted, expired or
        abandoned (the job, an operator or a person gave up on it), a higher attempt has
        begun (this one is fenced: its manifest would never be committed), or it passed
        its timeout.
        """
        sink = self.get_sink()
        txn = self.transaction(txn_doc)
        try:
            status = sink.poll(txn)
        except ManifestError as exc:
            return PrecommitCheck("failed", f"invalid pre-commit manifest for {txn.txn_id}: "
                                            f"{exc}", txn)
        if status.state is TxnState.COMMITTED:
            # A cleared sensor re-running after the commit: the pre-commit it waits for
            # happened (the decision records its digest and totals). Rare: one more read.
            return PrecommitCheck("ready", f"{txn.txn_id} is already COMMITTED", txn,
                                  sink.sealed(txn))
        if status.state in (TxnState.ABORTED, TxnState.EXPIRED, TxnState.ABANDONED):
            if status.state is TxnState.EXPIRED:
                self.metrics.incr(EXPIRATIONS)
            return PrecommitCheck(
                "failed", f"{txn.txn_id} was {status.state} ({status.reason}): the job failed "
                          "or the attempt was given up", txn)
        if status.highest_attempt > txn.attempt:
            self.metrics.incr(FENCED)
            return PrecommitCheck(
                "failed", f"{txn.txn_id} is fenced: attempt {status.highest_attempt} of epoch "
                          f"{txn.epoch} has begun since, so this attempt can never be committed",
                txn)
        manifest = status.manifest
        if manifest is not None:
            try:
                self.table_check(txn)
            except ManifestError as exc:
                return PrecommitCheck("failed", f"{txn.txn_id} cannot go into the table: {exc}",
                                      txn)
            if not status.validated:  # poll decoded and checked it in full: say so once
                record_validated(sink.ledger, manifest, "sensor")
            return PrecommitCheck("ready", f"{txn.txn_id} pre-committed: {manifest.total_files} "
                                           f"files, digest {manifest.digest}", txn, manifest)
        if txn.expired():
            self.metrics.incr(EXPIRATIONS)
            return PrecommitCheck("failed", f"{txn.txn_id} passed its {txn.timeout_s:.0f} s "
                                            "transaction timeout without a pre-commit", txn)
        return PrecommitCheck("waiting", f"{txn.txn_id} not pre-committed yet", txn)

    def precommit_pointer(self, check: PrecommitCheck) -> dict[str, Any]:
        """The sensor's XCom: a few hundred bytes naming what a "ready" check saw (manifest
        URI, digest, counts), built without another storage request; the commit re-reads
        and re-verifies the manifest against this digest."""
        sealed = check.sealed
        if check.status != "ready" or sealed is None:
            raise InvalidState(f"{check.txn.txn_id} is not pre-committed ({check.message})")
        txn = check.txn
        created_at = getattr(sealed, "created_at", None)  # a Manifest: sealed, not decided
        if created_at is not None:
            self.metrics.timing(PRECOMMIT_DURATION, created_at - txn.started_at)
        return {"txn_id": txn.txn_id, "epoch": txn.epoch, "attempt": txn.attempt,
                "manifest_uri": self.get_sink().manifest_uri(txn), "digest": sealed.digest,
                "files": sealed.total_files, "bytes": sealed.total_bytes,
                "rows": sealed.total_rows}

    def commit_pointer(self, pointer: dict[str, Any], *, force: bool = False) -> CommitOutcome:
        """Commit the attempt a sensor pointer names, against the digest it validated.

        The transaction is re-loaded from the ledger (the XCom is not trusted) and the
        core re-verifies staging against ``pointer["digest"]`` before its one
        put-if-absent decision.  ``was_published`` (asked before the commit) tells the
        operator whether this call made the data visible or a previous try had.
        """
        sink = self.get_sink()
        txn = sink.transaction(pointer["epoch"], int(pointer["attempt"]))
        was_published = sink.is_published(txn)  # one ledger listing, not describe()
        started = time.monotonic()
        try:
            result = sink.commit(txn, expected_digest=pointer["digest"], force=force)
        except FencedError:
            self.metrics.incr(FENCED)
            raise
        except TransactionExpired:
            self.metrics.incr(EXPIRATIONS)
            raise
        self._commit_metrics(result, was_published, time.monotonic() - started)
        return CommitOutcome(txn, result, was_published)

    def _commit_metrics(self, result: CommitResult, was_published: bool,
                        seconds: float) -> None:
        """Count what this commit call made visible, once: a fresh commit, or this
        attempt's promotion rolled forward after a try that decided and died before
        publishing (that try emitted nothing); never a no-op rerun after a publish.
        Other attempts' pending promotions it finished are roll-forwards too."""
        rolled_here = result.outcome == "already_committed" and not was_published
        if result.outcome == "committed" or rolled_here:
            manifest = result.manifest
            self.metrics.committed(seconds, manifest.total_files, manifest.total_bytes,
                                   manifest.total_rows)
        rolled = len(result.rolled_forward) + (1 if rolled_here else 0)
        if rolled:
            self.metrics.incr(ROLL_FORWARDS, rolled)

    def run_attempts(self, txn_doc: dict[str, Any], dag_id: str, run_id: str) -> list[TxnInfo]:
        """The attempts of the XCom's epoch that this DAG run owns: the one the XCom names,
        and every attempt whose begin record names this run (earlier tries, whose XCom
        a retry replaced).  The abort task and the UI plugin both use this."""
        claimed = Transaction.from_dict(txn_doc)
        return [info for info in self.get_sink().describe(claimed.epoch)
                if info.attempt == claimed.attempt
                or ((info.owner or {}).get("dag_id"), (info.owner or {}).get("run_id"))
                == (dag_id, run_id)]

    def abort_run(self, txn_doc: dict[str, Any], dag_id: str, run_id: str,
                  reason: str) -> dict[str, list[str]]:
        """Abort every undecided attempt this run owns (:meth:`run_attempts`); finish the
        cleanup of aborted ones that left staging (a try killed between the abort decision
        and the cleanup; aborting again is idempotent).  Committed attempts are never
        touched: they are returned under ``committed`` (a commit that failed after its
        decision must be rolled forward, not thrown away)."""
        sink = self.get_sink()
        aborted: list[str] = []
        committed: list[str] = []
        for info in self.run_attempts(txn_doc, dag_id, run_id):
            if info.state is TxnState.COMMITTED:
                committed.append(info.txn_id)
                continue
            finished = info.state in (TxnState.ABORTED, TxnState.EXPIRED)
            if finished and not info.staging_files:
                self._stop_application(sink, info)
                continue
            try:
                txn = sink.transaction(info.epoch, info.attempt)
                sink.abort(txn, reason)
            except InvalidState as exc:  # committed concurrently
                committed.append(info.txn_id)
                self.log.warning("%s", exc)
                continue
            if self._stop_application(sink, info):
                sink.abort(txn, reason)  # idempotent: removes what it wrote meanwhile
            if finished:
                self.log.info("%s was already %s; removed the %d staged file(s) it left",
                              info.txn_id, info.state.value, info.staging_files)
            else:
                aborted.append(info.txn_id)
        if aborted:
            self.metrics.incr(ABORTS, len(aborted))
        return {"aborted": aborted, "committed": committed}

    def _stop_application(self, sink: Any, info: Any) -> bool:
        """Stop the Spark application an attempt's runtime record names; True when it was
        alive.  After the abort decision (so the reason is this abort's, not the dying
        task's); the caller then aborts again to remove what the job wrote meanwhile."""
        from airflow_tpc.airflow.utils.spark_app import stop_recorded

        what = stop_recorded(sink, info.epoch, info.attempt)
        if what:
            self.log.info("%s: %s", info.txn_id, what)
        return bool(what and what.startswith("spark application stopped"))

    def abort_quietly(self, txn: Transaction, reason: str) -> bool:
        """Abort ``txn`` now if possible; a failure is logged, never raised (the next attempt
        fences it and the abort task or ``recover`` cleans it).  True when aborted."""
        try:
            self.get_sink().abort(txn, reason)
        except Exception as exc:
            self.log.warning("Could not abort %s (%s); the next attempt fences it and the "
                             "abort task or recover cleans it", txn.txn_id, exc)
            return False
        self.metrics.incr(ABORTS)
        self.log.info("Aborted %s: %s", txn.txn_id, reason)
        return True

    def emit_health(self, now: float | None = None) -> dict[str, Any]:
        """Compute the target's health (:class:`~airflow_tpc.core.health.TargetHealth`: one
        ``describe``) and send it as gauges; returns it.  The sensor, commit and abort
        tasks call it when their work is done (``metrics.health_at_end``), the admin
        DAG's ``status`` between runs; never the protocol calls themselves."""
        from airflow_tpc.core.health import TargetHealth

        health = TargetHealth.of(self.get_sink().describe(now=now), now)
        self.metrics.health(health)
        return health.to_dict()
