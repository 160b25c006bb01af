"""Operators of the two-phase commit: begin+submit, commit, abort.

They are thin: every protocol decision (fencing, validation, the atomic commit
point, roll-forward) is made by the core :class:`airflow_tpc.Sink`; the operators
only carry the transaction between tasks (XCom), map outcomes onto task states and
Asset events, and keep secrets out of logs, XComs and the Spark conf.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import tempfile
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from typing import cast as typing_cast

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import Asset
from airflow.sdk.exceptions import AirflowFailException

from airflow_tpc import DeliveryGuarantee, InvalidState, TpcError, Transaction
from airflow_tpc.airflow.base import TpcBaseOperator, tpc_template_fields
from airflow_tpc.airflow.hooks import TXN_XCOM_KEY
from airflow_tpc.airflow.links import ManifestLink, TransactionLink
from airflow_tpc.faults import crashpoint
from airflow_tpc.tables.history import table_uri

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_tpc.airflow.hooks import TpcHook

#: Spark conf key through which the job receives its transaction (see airflow_tpc.spark).
SPARK_CONF_KEY = "spark.airflow_tpc.txn"
#: XCom key of the commit operator's summary.
COMMIT_XCOM_KEY = "tpc_commit"
#: Task state store key: the commit (txn id + digest) whose Asset event a try of this
#: task instance already handed to Airflow (see CommitOperator._should_emit).
EVENT_STATE_KEY = "airflow_tpc.asset_event"
#: Default epoch: the run's data interval, so a scheduled run, a manual rerun and a
#: backfill of the same interval all address the same epoch (reprocessing replaces).
DEFAULT_EPOCH = "{{ (data_interval_start or logical_date or dag_run.run_after) | ds }}"

_ZIP_CACHE: dict[str, str] = {}


def package_zip(dest_dir: str | None = None) -> str:
    """A zip of the job-side package for ``--py-files`` (airflow_tpc without its Airflow layer).

    Built with ``airflow_tpc.spark.py_files_zip`` into a file unique to this process,
    then renamed to a name derived from its content: concurrent tasks on one worker
    (a backfill with max_active_runs > 1) never write the same temporary file, and
    a spark-submit reading the zip never sees a half-written one.
    """
    dest = dest_dir or os.path.join(tempfile.gettempdir(), f"airflow_tpc-{os.getuid()}")
    if dest in _ZIP_CACHE and os.path.exists(_ZIP_CACHE[dest]):
        return _ZIP_CACHE[dest]
    os.makedirs(dest, exist_ok=True)
    build = os.path.join(dest, f".build-{os.getpid()}-{uuid.uuid4().hex}.zip")
    try:
        built = _build_zip(build)
        digest = hashlib.sha256(Path(built).read_bytes()).hexdigest()[:16]
        final = os.path.join(dest, f"airflow_tpc-{digest}.zip")
        os.replace(built, final)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(build)
    _ZIP_CACHE[dest] = final
    return final


def _build_zip(path: str) -> str:
    from airflow_tpc.spark import py_files_zip

    return str(py_files_zip(path) or path)


def job_payload(txn: Transaction, *, guarantee: str, promotion: str,
                public_storage: dict[str, Any], credentials_file: str | None = None,
                table: str | None = None, epoch_column: bool = True) -> str:
    """The JSON for ``spark.airflow_tpc.txn``: the transaction, never a credential.

    Defined once, by the job side that parses it
    (:func:`airflow_tpc.spark.context.build_payload`); ``credentials_file`` is the
    *name* (not the content) of the file shipped with ``--files`` (``job_credentials``).
    """
    from airflow_tpc.spark.context import build_payload

    return build_payload(txn, guarantee=guarantee, promotion=promotion,
                         storage_options=public_storage, credentials_file=credentials_file,
                         table=table, epoch_column=epoch_column)


# -- handing credentials to spark-submit, never on its command line ------------------------

#: How :class:`StagedSparkSubmitOperator` hands the storage connection's credentials to the
#: job. None of them puts a secret on spark-submit's command line or in the Spark conf.
JOB_CREDENTIALS = ("auto", "file", "env", "none")
#: Names of the credentials files shipped with ``--files`` (the job finds them by name).
CREDENTIALS_FILE_PREFIX = "tpc-credentials-"
#: ``env_vars`` names that look like secrets: refused where the hook turns env_vars into
#: ``--conf`` arguments (YARN, Kubernetes).
_SECRET_NAME = re.compile(r"(?i)secret|passw|token|credential|private.?key|access.?key|session")


class SecretOnCommandLine(TpcError, ValueError):
    """A credential would appear on spark-submit's command line or in its Spark conf."""


def resolve_job_credentials(mode: str, master: str, deploy_mode: str | None) -> str:
    """``file``, ``env`` or ``none``: how credentials reach the job for this master/deploy mode.

    ``auto`` is ``env`` for a ``local[...]`` master (driver and executors are processes of
    spark-submit and inherit its environment; nothing is written to disk) and ``file``
    otherwise. Combinations that cannot keep the secret off the command line and still
    deliver it are refused, never degraded silently.
    """
    mode = str(mode).lower()
    if mode not in JOB_CREDENTIALS:
        raise ValueError(f"job_credentials must be one of {list(JOB_CREDENTIALS)}, not {mode!r}")
    master = str(master or "")
    cluster = deploy_mode == "cluster"
    if mode == "auto":
        mode = "env" if master.startswith("local") else "file"
    if mode == "env" and cluster:
        raise SecretOnCommandLine(
            "job_credentials='env' cannot reach a driver in cluster deploy mode: only the "
            "spark-submit process gets that environment, and passing it on (env_vars) would put "
            "the secret on the command line as --conf. Use job_credentials='file' (YARN), or "
            "'none' with the cluster's own credentials (instance role, IRSA, Kubernetes secrets).")
    if mode == "file" and cluster and master.startswith(("k8s://", "spark://")):
        where = ("Kubernetes would upload it to spark.kubernetes.file.upload.path"
                 if master.startswith("k8s://") else
                 "a standalone cluster does not ship --files to a driver it launches")
        raise SecretOnCommandLine(
            "job_credentials='file' is not supported in cluster deploy mode on "
            f"{master.split(':')[0]} ({where}). Use job_credentials='none' and give driver "
            "and executors their credentials the cluster's way: a Kubernetes secret "
            "(spark.kubernetes.driver.secretKeyRef.AWS_ACCESS_KEY_ID=<secret>:<key>, the same "
            "for AWS_SECRET_ACCESS_KEY and spark.kubernetes.executor.secretKeyRef.*), IRSA or "
            "an instance role; or use client deploy mode.")
    return mode


def refuse_secrets_in_argv(argv: Sequence[str], secrets: Sequence[str], where: str) -> None:
    """Fail closed if any secret value appears in ``argv`` (the message never shows it)."""
    for i, arg in enumerate(argv):
        if any(secret and secret in str(arg) for secret in secrets):
            shown = str(arg).split("=", 1)[0] if "=" in str(arg) else f"argument {i}"
            raise SecretOnCommandLine(
                f"{where}: a credential of the storage connection would appear on the "
                f"spark-submit command line (in {shown!r}), where `ps` shows it to every user. "
                "Remove it from conf/application_args/env_vars; the operator hands the "
                "connection's credentials to the job itself (job_credentials).")


def refuse_secret_env_vars(env_vars: dict[str, Any] | None, master: str, where: str) -> None:
    """On YARN/Kubernetes the hook turns env_vars into ``--conf`` arguments: no secrets there."""
    if not env_vars or not ("yarn" in master or "k8s" in master):
        return
    names = sorted(k for k in env_vars if _SECRET_NAME.search(str(k)))
    if names:
        raise SecretOnCommandLine(
            f"{where}: env_vars {names} look like credentials, and with master "
            f"{master.split(':')[0]!r} SparkSubmitHook passes env_vars as --conf arguments "
            "(visible in `ps` and the Spark UI). Give them through storage_conn_id (handed over "
            "by job_credentials) or the cluster's secret mechanism instead.")


def write_credentials_file(env: dict[str, str]) -> str:
    """A new 0600 file in a new 0700 directory holding ``env`` as JSON; returns its path."""
    directory = tempfile.mkdtemp(prefix="airflow_tpc-cred-")  # mode 0700
    path = os.path.join(directory, f"{CREDENTIALS_FILE_PREFIX}{uuid.uuid4().hex}.json")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(env, fh)
    return path


def remove_credentials_file(path: str | None) -> None:
    if path:
        shutil.rmtree(os.path.dirname(path), ignore_errors=True)


class SecretSafeSparkSubmitHook(SparkSubmitHook):
    """SparkSubmitHook that puts extra variables in spark-submit's *process* environment
    only (never ``--conf``) and refuses to build a command line holding a secret."""

    _tpc_env: dict[str, str]
    _tpc_secrets: tuple[str, ...]

    @classmethod
    def adopt(cls, hook: SparkSubmitHook, env: dict[str, str], secrets: Sequence[str]
              ) -> SecretSafeSparkSubmitHook:
        # The provider's operator builds its hook with ~35 arguments; re-typing the built
        # instance (this subclass adds no state of its own) follows them in every version.
        hook.__class__ = cls
        hook = typing_cast(cls, hook)
        hook._tpc_env = dict(env)
        hook._tpc_secrets = tuple(s for s in secrets if s)
        return hook

    def _build_spark_common_args(self) -> list[str]:
        args = super()._build_spark_common_args()
        refuse_secrets_in_argv(args, self._tpc_secrets, "spark-submit")
        if self._tpc_env:
            # submit() passes self._env to Popen: the process environment, not argv.
            self._env = {**(self._env or {}), **self._tpc_env}
        return args

    def _build_spark_submit_command(self, application: str) -> list[str]:
        # checked before the provider logs the command line
        refuse_secrets_in_argv([application, *(self._application_args or [])],
                               self._tpc_secrets, "spark-submit")
        return super()._build_spark_submit_command(application)


def pull_txn(context: Context, submit_task_id: str) -> dict[str, Any] | None:
    """The transaction the submit task of this run began (latest try)."""
    return context["ti"].xcom_pull(task_ids=submit_task_id, key=TXN_XCOM_KEY)


def _owner(context: Context) -> dict[str, Any]:
    ti = context["ti"]
    return {"dag_id": ti.dag_id, "run_id": ti.run_id, "task_id": ti.task_id,
            "try_number": ti.try_number, "map_index": ti.map_index}


class StagedSparkSubmitOperator(TpcBaseOperator, SparkSubmitOperator):
    """SparkSubmitOperator that runs the job inside a new transaction attempt.

    Every execution (first try, retry, clear) begins a *new* attempt with a higher
    fencing number, so output of an earlier (possibly still running, "zombie") job
    can never be published for this one.  That is also why SparkSubmitOperator's
    durable mode is switched off: it would reconnect a retry to the *previous*
    job (or skip it as "already succeeded") whose output belongs to a fenced attempt.

    The job receives the transaction in the Spark conf ``spark.airflow_tpc.txn`` and
    writes into ``txn.staging_uri``, then seals it with ``JobTransaction.precommit()``.

    The sink arguments (``target``, ``namespace``, ``storage_conn_id``,
    ``storage_options``, ``sink_config``) are :class:`TpcBaseOperator`'s.

    :param epoch: templated; defaults to the run's data interval start (``YYYY-MM-DD``).
    :param guarantee: ``EXACTLY_ONCE`` (default), ``AT_LEAST_ONCE`` or ``NONE``.
    :param ship_package: add the job-side ``airflow_tpc`` zip to ``py_files``.
    :param job_credentials: how the ``storage_conn_id`` credentials reach the job, never
        on spark-submit's command line nor in its Spark conf: ``auto`` (default: ``env``
        for a ``local[...]`` master, else ``file``), ``env`` (spark-submit's process
        environment; client/local deploy mode only), ``file`` (a 0600 file shipped with
        ``--files``, found by the job by name, deleted when spark-submit returns; not for
        Kubernetes or standalone cluster deploy mode) or ``none`` (the job uses its default
        credential chain). Refused combinations fail before the transaction begins.
    """

    template_fields: Sequence[str] = tpc_template_fields(*SparkSubmitOperator.template_fields,
                                                         "epoch")
    operator_extra_links = (TransactionLink(),)
    ui_color = "#f5d6a8"

    def __init__(self, *, epoch: str = DEFAULT_EPOCH,
                 guarantee: str = DeliveryGuarantee.EXACTLY_ONCE.value,
                 ship_package: bool = True, job_credentials: str = "auto",
                 **kwargs: Any) -> None:
        if str(job_credentials).lower() not in JOB_CREDENTIALS:
            raise ValueError(f"job_credentials must be one of {list(JOB_CREDENTIALS)}, "
                             f"not {job_credentials!r}")
        if kwargs.get("durable"):
            raise ValueError("StagedSparkSubmitOperator cannot be durable: a retry must run a new "
                             "attempt, never reconnect to the previous attempt's job")
        kwargs["durable"] = False
        super().__init__(**kwargs)  # TpcBaseOperator takes the sink arguments
        self.epoch = epoch
        self.guarantee = DeliveryGuarantee(str(guarantee).upper()).value
        self.ship_package = ship_package
        self.job_credentials = str(job_credentials).lower()
        self.durable = False
        self._tpc_env: dict[str, str] = {}
        self._tpc_secrets: tuple[str, ...] = ()

    def _get_hook(self) -> SparkSubmitHook:
        return SecretSafeSparkSubmitHook.adopt(super()._get_hook(), getattr(self, "_tpc_env", {}),
                                               getattr(self, "_tpc_secrets", ()))

    def plan_job_credentials(self, env: dict[str, str]) -> str:
        """Decide how ``env`` (the connection's ``AWS_*``) reaches the job; refuse unsafe setups.

        Reads the Spark connection (master, deploy mode) like the submit will. Returns
        ``file``, ``env`` or ``none``; sets what the hook puts in the process environment
        and which values must never appear on the command line.
        """
        connection = SparkSubmitOperator._get_hook(self)._connection
        master, deploy_mode = str(connection["master"]), connection["deploy_mode"]
        refuse_secret_env_vars(self.env_vars, master, type(self).__name__)
        self._tpc_secrets = tuple(v for k, v in env.items()
                                  if k in ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"))
        self._tpc_env = {}
        if not env or self.job_credentials == "none":
            return "none"
        mode = resolve_job_credentials(self.job_credentials, master, deploy_mode)
        if mode == "env":
            self._tpc_env = dict(env)
        return mode

    def execute(self, context: Context) -> None:
        self._forget_previous_job(context)
        hook = self.tpc_hook
        # before begin: a setup that would leak or not deliver credentials fails here
        mode = self.plan_job_credentials(hook.job_env())
        conf_for, abort = self.begin_transaction(context)
        files = self.files
        cred_path = None
        try:
            if mode == "file":
                # The path travels on the command line (--files) and the *name* in the
                # payload; the content only in the file (0600, in a 0700 directory).
                cred_path = write_credentials_file(hook.job_env())
                self.files = f"{files},{cred_path}" if files else cred_path
            self.conf = {**(self.conf or {}),
                         **conf_for(os.path.basename(cred_path) if cred_path else None)}
            if self.ship_package:
                shipped = package_zip()
                self.py_files = f"{self.py_files},{shipped}" if self.py_files else shipped
            if mode != "none":
                self.log.info("Credentials of %s reach the job by %s (never the command line)",
                              self.storage_conn_id, "a --files file" if mode == "file"
                              else "spark-submit's environment")
            self._hook = None  # rebuild the hook with the conf/py_files/files above
            super().execute(context)
        except BaseException as exc:
            # The attempt is dead: throw its staging away now and fence a late job.
            abort(f"spark job failed: {type(exc).__name__}")
            raise
        finally:
            remove_credentials_file(cred_path)
            self.files = files

    def begin_transaction(self, context: Context
                          ) -> tuple[Callable[[str | None], dict[str, str]],
                                     Callable[[str], object]]:
        """Begin this try's attempt and push it to XCom.  Returns the Spark conf the job
        gets (given the credentials file's *name*, or None) and how to abort the attempt
        when the job fails.  :class:`~airflow_tpc.airflow.groups.GroupSparkSubmitOperator`
        begins a group instead."""
        hook = self.tpc_hook
        sink = hook.get_sink()
        txn = sink.begin(str(self.epoch), owner=_owner(context))
        self.log.info("Began %s (fencing number %d); staging %s", txn.txn_id, txn.attempt,
                      txn.staging_uri)
        # The transaction plus *where* it lives (connection name and public options only):
        # enough for the sensor, abort and the UI plugin to find it, no credential.
        doc = {**txn.to_dict(), "storage_conn_id": self.storage_conn_id,
               "storage_options": hook.public_options}
        if hook.is_table:  # the table URI and the catalog connection's *name*, never its
            doc.update(table=self.target, catalog_conn_id=self.catalog_conn_id,  # properties
                       ledger_uri=hook.resolved_ledger_uri())
        context["ti"].xcom_push(key=TXN_XCOM_KEY, value=doc)
        TransactionLink.persist(context, txn)

        def conf_for(credentials_file: str | None) -> dict[str, str]:
            return {SPARK_CONF_KEY: job_payload(
                txn, guarantee=self.guarantee, promotion=sink.config.promotion,
                public_storage=hook.job_public_options(), credentials_file=credentials_file,
                table=self.target if hook.is_table else None, epoch_column=hook.epoch_layout)}

        return conf_for, lambda reason: hook.abort_quietly(txn, reason)

    def _forget_previous_job(self, context: Context) -> None:
        """Drop the durable job id a previous try may have stored (belt and braces)."""
        store = context.get("task_state_store")
        if store is None:
            return
        try:
            if store.get(self.external_id_key) is not None:
                self.log.info("Forgetting %s of a previous try: this try runs a new attempt",
                              self.external_id_key)
                store.delete(self.external_id_key)
        except Exception as exc:  # a store we cannot reach must not stop a fresh submit
            self.log.warning("Could not clear the task state store: %s", exc)


class CommitOperator(TpcBaseOperator):
    """Commit the run's pre-committed transaction, then emit the target's Asset event.

    The sensor's XCom pointer names the manifest digest that was validated; the core
    re-checks storage against it before writing the one atomic decision record, so
    files changed after validation are never published.  Re-running is safe: after a
    finished commit it is a no-op (and emits no second Asset event); after a crash
    between the decision and the end of promotion it rolls the promotion forward.

    :param sensor_task_id: the :class:`PrecommitSensor` whose pointer is committed.
    :param outlets: Assets updated on commit (default: one Asset for the target URI).
    :param force: commit even past the transaction timeout (logged loudly).
    """

    template_fields: Sequence[str] = tpc_template_fields("sensor_task_id")
    operator_extra_links = (ManifestLink(),)
    ui_color = "#b7e4c7"

    def __init__(self, *, sensor_task_id: str, force: bool = False, **kwargs: Any) -> None:
        default_outlets = "outlets" not in kwargs
        super().__init__(**kwargs)
        if default_outlets:  # the target may have come from default_args: read it here
            self.outlets = [target_asset(self.target)]
        self.sensor_task_id = sensor_task_id
        self.force = force

    def execute(self, context: Context) -> dict[str, Any]:
        pointer = context["ti"].xcom_pull(task_ids=self.sensor_task_id)
        if not pointer or "digest" not in pointer:
            raise InvalidState(f"no pre-commit pointer from task {self.sensor_task_id!r}: "
                               "nothing validated to commit")
        outcome = self.tpc_hook.commit_pointer(pointer, force=self.force)
        txn, result, was_published = outcome.txn, outcome.result, outcome.was_published
        crashpoint("commit_task.after_commit")
        manifest = result.manifest
        summary = {"outcome": result.outcome, "txn_id": txn.txn_id, "target": txn.target,
                   "namespace": txn.namespace, "epoch": txn.epoch,
                   "attempt": txn.attempt, "digest": manifest.digest,
                   "files": manifest.total_files, "bytes": manifest.total_bytes,
                   "rows": manifest.total_rows, "manifest_uri": pointer.get("manifest_uri"),
                   "rolled_forward": [list(x) for x in result.rolled_forward]}
        # A table target: named by its own URI (the transaction's target is the
        # location its sink is rooted at, kept as "location": lineage names it), and the
        # snapshot (Iceberg) or version (Delta) the epoch's commit became, asked of the
        # sink (None for folders, or a superseded attempt the table never took).
        version = None
        if self.tpc_hook.is_table:
            summary.update(target=table_uri(self.tpc_hook.get_sink()), location=txn.target)
        if self.tpc_hook.is_table and result.outcome != "superseded":
            version = self.tpc_hook.get_sink().table_version(txn.epoch, manifest.digest)
        if version:
            summary.update(version)
        context["ti"].xcom_push(key=COMMIT_XCOM_KEY, value=summary)
        self._tpc_summary = summary  # for the OpenLineage listener (it asks from a fork)
        self._tpc_facts = _lineage_facts(self.tpc_hook, summary)
        ManifestLink.persist(context, pointer.get("manifest_uri"))
        event_id = f"{txn.txn_id}@{manifest.digest}"
        if not self._should_emit(context, result.outcome, was_published, event_id):
            # Nothing new became visible: a later attempt owns the epoch, or a successful
            # try of this task already announced this commit. No second Asset event.
            self.log.info("%s: %s; no Asset event", txn.txn_id,
                          "superseded by a later attempt" if result.outcome == "superseded"
                          else "already committed, published and announced (no-op)")
            self.outlets = []
            return summary
        self.log.info("%s %s: %d files, %d bytes, %s rows%s", txn.txn_id, result.outcome,
                      manifest.total_files, manifest.total_bytes, manifest.total_rows,
                      " (rolled forward)" if result.outcome == "already_committed" else "")
        extra = {"epoch": txn.epoch, "txn_id": txn.txn_id, "attempt": txn.attempt,
                 "files": manifest.total_files, "rows": manifest.total_rows,
                 "bytes": manifest.total_bytes, "digest": manifest.digest}
        if version:  # {"table", "format", "snapshot_id" | "version"}
            extra.update(version)
        for outlet in self.outlets:
            if isinstance(outlet, Asset):
                context["outlet_events"][outlet].extra = dict(extra)
        self._remember_event(context, event_id)
        return summary

    def _should_emit(self, context: Context, outcome: str, was_published: bool,
                     event_id: str) -> bool:
        """Whether this try announces the commit with an Asset event.

        Airflow records outlet events only when the try *succeeds*.  So a try that
        published the epoch and then failed (killed, lost its API server) announced
        nothing, and the next try must — although for the ledger the commit is
        already done.  The task state store (it survives retries and clears) holds
        the commit a try last announced: a rerun after a success finds it and stays
        quiet; a rerun after a failed try does not, and emits.  Without a state store
        (Airflow < 3.3) "published before this try" stands in for "announced".
        """
        if outcome == "superseded":
            return False
        if not was_published:
            return True  # this try made the data visible (or rolled it forward)
        store = context.get("task_state_store")
        if store is None:
            return False
        try:
            return store.get(EVENT_STATE_KEY) != event_id
        except Exception as exc:  # an unreachable store: prefer a duplicate to a lost event
            self.log.warning("Could not read the task state store (%s): emitting the Asset "
                             "event again; downstream may run twice on the same data", exc)
            return True

    def _remember_event(self, context: Context, event_id: str) -> None:
        store = context.get("task_state_store")
        if store is None:
            return
        try:
            store.set(EVENT_STATE_KEY, event_id)
        except Exception as exc:  # a rerun would then announce once more: harmless
            self.log.warning("Could not record the Asset event in the task state store: %s",
                             exc)

    # -- OpenLineage (airflow_tpc.airflow.lineage; only with that provider) -----------
    def get_openlineage_facets_on_start(self) -> Any:
        """The target as the output, named before anything is committed."""
        return _lineage(self.tpc_hook, None)

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """The target with what this try's commit made: statistics, schema, version and
        the transaction (kept by ``execute``; the listener asks from a fork, which must
        not pull XComs)."""
        return _lineage(self.tpc_hook, getattr(self, "_tpc_summary", None),
                        getattr(self, "_tpc_facts", None))

    def get_openlineage_facets_on_failure(self, task_instance: Any) -> Any:
        """A failed commit names the output it did not finish writing."""
        return _lineage(self.tpc_hook, None)


def _lineage_facts(hook: TpcHook, summary: dict[str, Any]) -> dict[str, Any] | None:
    """What the lineage facets need read in this process (None: no OpenLineage)."""
    try:
        from airflow_tpc.airflow.lineage import commit_facts
    except ImportError:
        return None
    return commit_facts(hook, summary)


def _lineage(hook: TpcHook, summary: dict[str, Any] | None,
             facts: dict[str, Any] | None = None) -> Any:
    try:
        from airflow_tpc.airflow.lineage import lineage
    except ImportError:  # no OpenLineage provider: no lineage
        return None
    return lineage(hook, summary, facts)


def target_asset(target: str) -> Asset:
    """The Asset standing for a target's committed data (one URI per target)."""
    uri = target if "://" in target else f"file://{os.path.abspath(target)}"
    return Asset(uri=uri.rstrip("/"))


class AbortOperator(TpcBaseOperator):
    """Abort the run's transaction(s): by default when submit, sensor or commit failed.

    ``trigger_rule="one_failed"`` makes it run when any upstream protocol task fails
    *or is marked failed in the UI* (which runs no callbacks, but trigger rules still
    fire).  Aborting a committed transaction is refused by the core; that case is
    logged, not raised, because a commit that failed after its decision must be rolled
    forward by re-running the commit task, not thrown away.

    Besides the latest attempt named in XCom, every undecided attempt of the epoch
    begun by *this* DAG run is aborted (earlier tries whose XCom is gone).

    :param fail_run: for an abort that is the run's *outcome* rather than its cleanup (a
        rejection at the approval gate): after aborting, the task fails with
        ``AirflowFailException`` (no retry), so the DAG run ends failed and the rejection
        is not mistaken for success.  An error of the abort itself is raised as it is (and
        retried as the task's ``retries`` say); rerunning the task aborts nothing twice.
    """

    template_fields: Sequence[str] = tpc_template_fields("submit_task_id", "reason")
    ui_color = "#f4a6a6"

    def __init__(self, *, submit_task_id: str,
                 reason: str = "aborted by the DAG run ({{ ti.task_id }})",
                 trigger_rule: str = "one_failed", fail_run: bool = False,
                 **kwargs: Any) -> None:
        super().__init__(trigger_rule=trigger_rule, **kwargs)
        self.submit_task_id = submit_task_id
        self.reason = reason
        self.fail_run = fail_run

    def execute(self, context: Context) -> dict[str, Any]:
        doc = pull_txn(context, self.submit_task_id)
        if not doc:
            self.log.info("No transaction was begun by %s in this run: nothing to abort",
                          self.submit_task_id)
            result: dict[str, Any] = {"aborted": [], "committed": []}
        else:
            ti = context["ti"]
            result = self.tpc_hook.abort_run(doc, ti.dag_id, ti.run_id, str(self.reason))
            if result["committed"]:
                self.log.warning("Not aborted (already COMMITTED): %s. If a commit task failed "
                                 "after its decision, re-run it to finish the promotion.",
                                 result["committed"])
            self.log.info("Aborted %s", result["aborted"] or "nothing (already decided)")
            if result["aborted"]:  # for the OpenLineage listener: what was thrown away
                txn = Transaction.from_dict(doc)
                self._tpc_summary = {"epoch": txn.epoch, "attempt": txn.attempt,
                                     "txn_id": txn.txn_id, "namespace": txn.namespace,
                                     "outcome": "aborted"}
        if self.fail_run:
            context["ti"].xcom_push(key="return_value", value=result)
            raise AirflowFailException(
                f"{self.reason}: the run's transaction was aborted "
                f"({', '.join(result['aborted']) or 'nothing left to abort'}); "
                "failing the run so the epoch is not taken as committed")
        return result

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """The target, with the attempt this try aborted (outcome ``aborted``): nothing
        was written to it.  Only when something was aborted."""
        summary = getattr(self, "_tpc_summary", None)
        return _lineage(self.tpc_hook, summary) if summary else None

    def get_openlineage_facets_on_failure(self, task_instance: Any) -> Any:
        """A rejection (``fail_run``) fails the task after aborting: the FAIL event names
        the target and the aborted attempt."""
        return self.get_openlineage_facets_on_complete(task_instance)
