"""The submit operator of the two-phase commit: begin an attempt, run the Spark job in it.

Apart from the commit and abort operators because it is the one task that runs the job:
it builds on the provider's ``SparkSubmitOperator``, ships the job-side package
(:func:`package_zip`), hands the job its transaction in the Spark conf
(:func:`job_payload`) and its credentials the way :mod:`airflow_tpc.airflow.hooks.job_credentials`
allows; the commit and abort tasks never touch Spark.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

from airflow_tpc import DeliveryGuarantee, Transaction
from airflow_tpc.airflow.hooks.azure_credentials import AZURE_SECRET_ENV
from airflow_tpc.airflow.hooks.job_credentials import (
    JOB_CREDENTIALS,
    SecretSafeSparkSubmitHook,
    refuse_secret_env_vars,
    remove_credentials_file,
    resolve_job_credentials,
    write_credentials_file,
)
from airflow_tpc.airflow.hooks.tpc import TXN_XCOM_KEY
from airflow_tpc.airflow.links.tpc import TransactionLink
from airflow_tpc.airflow.operators.base import TpcBaseOperator, tpc_template_fields
from airflow_tpc.airflow.utils.spark_app import (
    AppStoppingSparkSubmitHook,
    failure_reason,
    new_marker,
    new_record,
    stop_older,
    write_record,
)

if TYPE_CHECKING:
    from airflow.sdk import Context

#: Spark conf key through which the job receives its transaction (see airflow_tpc.spark).
SPARK_CONF_KEY = "spark.airflow_tpc.txn"
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
    :param openlineage_inject_parent_job_info: default True: the Spark conf carries this
        task's OpenLineage run (``spark.openlineage.parentRunId``, ``parentJobName``,
        ``rootParentRunId``...), so the job's own lineage events join the Airflow run.
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
        # The job's own OpenLineage events (the Spark integration) name this task's run as
        # their parent: the provider's injection into the Spark conf, on by default here
        # (the provider's own default is [openlineage] spark_inject_parent_job_info, off),
        # made by execute so that lineage can never fail the submit (_with_parent_run).
        self.inject_parent_run = bool(kwargs.pop("openlineage_inject_parent_job_info", True))
        kwargs["openlineage_inject_parent_job_info"] = False
        super().__init__(**kwargs)  # TpcBaseOperator takes the sink arguments
        self.epoch = epoch
        self.guarantee = DeliveryGuarantee(str(guarantee).upper()).value
        self.ship_package = ship_package
        self.job_credentials = str(job_credentials).lower()
        self.durable = False
        self._tpc_env: dict[str, str] = {}
        self._tpc_secrets: tuple[str, ...] = ()
        self._tpc_marker = new_marker()
        #: (sink, txn) whose runtime record the hook's start writes (single target only)
        self._tpc_runtime: tuple[Any, Transaction] | None = None
        self._tpc_killed: str | None = None
        self._tpc_stopped = 0  # processes of the application on_kill killed

    def _get_hook(self) -> SparkSubmitHook:
        hook = SecretSafeSparkSubmitHook.adopt(super()._get_hook(), getattr(self, "_tpc_env", {}),
                                               getattr(self, "_tpc_secrets", ()))
        return AppStoppingSparkSubmitHook.adopt_app(hook, self._tpc_marker, self._record_app)

    def _record_app(self, started: dict[str, Any]) -> None:
        """spark-submit runs: write the attempt's runtime record (docs/PROTOCOL.md §2)."""
        if self._tpc_runtime is not None:
            sink, txn = self._tpc_runtime
            write_record(sink, txn, new_record(txn, self._tpc_marker, started))

    def on_kill(self) -> None:
        """Airflow stops the task (SIGTERM): stop the whole application, not just
        spark-submit (the hook kills every process carrying the attempt's marker)."""
        self._tpc_killed = "SIGTERM"
        self._tpc_stopped = AppStoppingSparkSubmitHook.stop_marked(self._tpc_marker)
        super().on_kill()

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
                                  if k in ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                                           *AZURE_SECRET_ENV))
        self._tpc_env = {}
        if not env or self.job_credentials == "none":
            return "none"
        mode = resolve_job_credentials(self.job_credentials, master, deploy_mode)
        if mode == "env":
            self._tpc_env = dict(env)
        return mode

    def execute(self, context: Context) -> None:
        self._forget_previous_job(context)
        self._tpc_marker = new_marker()  # one application per try
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
            if self.inject_parent_run:
                self.conf = _with_parent_run(self.conf, context, self.log)
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
            # The attempt is dead: stop its application, throw its staging away now and
            # fence a late job; the reason says what happened to the task, the application
            stopped = AppStoppingSparkSubmitHook.stop_marked(self._tpc_marker) + self._tpc_stopped
            abort(failure_reason(exc, self._tpc_killed, stopped))
            raise
        finally:
            remove_credentials_file(cred_path)
            self.files = files

    def begin_transaction(self, context: Context
                          ) -> tuple[Callable[[str | None], dict[str, str]],
                                     Callable[[str], object]]:
        """Begin this try's attempt and push it to XCom.  Returns the Spark conf the job
        gets (given the credentials file's *name*, or None) and how to abort the attempt
        when the job fails.  :class:`~airflow_tpc.airflow.operators.group.GroupSparkSubmitOperator`
        begins a group instead."""
        hook = self.tpc_hook
        sink = hook.get_sink()
        txn = sink.begin(str(self.epoch), owner=_owner(context))
        self.log.info("Began %s (fencing number %d); staging %s", txn.txn_id, txn.attempt,
                      txn.staging_uri)
        self._tpc_runtime = (sink, txn)
        for line in stop_older(sink, txn.epoch, txn.attempt):  # fenced now: stop them
            self.log.warning("Fenced by %s: %s", txn.txn_id, line)
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


def _with_parent_run(conf: dict[str, Any], context: Context, log: Any) -> dict[str, Any]:
    """``conf`` plus this task's OpenLineage run as the job's parent (the provider's own
    ``inject_parent_job_information_into_spark_properties``: ``spark.openlineage.
    parentRunId``, ``parentJobName``...; a conf that already names a parent is kept).
    Lineage is never worth a failed submit: an error costs a warning and no parent."""
    try:
        from airflow.providers.common.compat.openlineage.utils.spark import (
            inject_parent_job_information_into_spark_properties,
        )

        return dict(inject_parent_job_information_into_spark_properties(conf, context))
    except Exception as exc:
        log.warning("No OpenLineage parent run in the Spark conf (%s): the job's own "
                    "lineage events will not link to this task", exc)
        return conf
