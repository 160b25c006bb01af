"""One call that wires the whole protocol: submit >> pre-commit sensor >> [approval] >> commit,
with abort on any failure.  Most pipelines should use this rather than the operators."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import Asset, BaseOperator, TaskGroup

from airflow_tpc import SinkConfig
from airflow_tpc.airflow.operators.submit import DEFAULT_EPOCH, StagedSparkSubmitOperator
from airflow_tpc.airflow.operators.tpc import AbortOperator, CommitOperator, target_asset
from airflow_tpc.airflow.sensors.tpc import PrecommitSensor


def exactly_once_spark_group(
    group_id: str,
    *,
    application: str,
    target: str | None = None,
    namespace: str,
    targets: dict[str, Any] | None = None,
    group_uri: str | None = None,
    epoch: str = DEFAULT_EPOCH,
    conn_id: str = "spark_default",
    storage_conn_id: str | None = None,
    storage_options: dict[str, Any] | None = None,
    sink_config: SinkConfig | dict[str, Any] | None = None,
    catalog_conn_id: str | None = None,
    ledger_uri: str | None = None,
    replace_where: Any = None,
    write_mode: str = "replace",
    add_columns: bool = False,
    outlets: list[Asset] | None = None,
    sensor_mode: str = "poke",
    deferrable: bool = False,
    poke_interval: float = 5,
    sensor_timeout: float = 6 * 3600,
    approval: bool = False,
    approval_subject: str | None = None,
    submit_kwargs: dict[str, Any] | None = None,
    sensor_kwargs: dict[str, Any] | None = None,
    commit_kwargs: dict[str, Any] | None = None,
    abort_kwargs: dict[str, Any] | None = None,
    task_kwargs: Mapping[str, Mapping[str, Any]] | None = None,
    **spark_kwargs: Any,
) -> TaskGroup:
    """Build the task group of one exactly-once Spark write.

    Tasks (ids inside the group): ``submit`` (begin + spark-submit), ``wait_precommit``,
    optionally ``approve`` (a human picks Commit or Abort in the UI; Abort runs
    ``abort_rejected``, which aborts and then fails the run), ``commit`` (emits the
    target's Asset event), ``abort`` (runs when any of the others fails or is marked
    failed) and ``committed``, the group's leaf, which succeeds only when the epoch was
    committed (so the run fails after an abort or a rejection, and ``group >> next_task``
    continues on committed data only).
    ``spark_kwargs`` go to SparkSubmitOperator (``application_args``, ``conf``,
    ``py_files``, ``retries`` ...).

    Each task takes its own Airflow arguments (``retries``, ``retry_delay``, ``queue``,
    ``pool``, ``execution_timeout`` ...): ``submit_kwargs``, ``sensor_kwargs``,
    ``commit_kwargs``, ``abort_kwargs``, or all in one mapping ``task_kwargs={"commit":
    {...}, "wait_precommit": {...}}`` (task ids ``submit``, ``wait_precommit``, ``commit``,
    ``abort``; the per-task arguments win where both name one).  ``commit`` retries 3
    times by default (15 s, doubling): it is idempotent, so a worker lost mid-commit costs
    a retry, not the epoch, and ``abort`` runs only once it failed for good.

    :param epoch: templated; default: the run's data interval start, so scheduled runs,
        manual reruns and backfills of one interval all write (and replace) one epoch.
    :param approval: add a Human-in-the-loop gate (providers-standard HITLBranchOperator).
    :param targets: instead of ``target``, several outputs written by one job and committed
        as one group transaction, all or nothing (docs/groups.md): member name -> a target
        URI, or a dict of that member's ``target``, ``ledger_uri``, ``replace_where``,
        ``write_mode``, ``add_columns``, ``catalog_conn_id``.  The job writes member
        ``name`` into ``current_group(spark).output_uri(name)``; the commit emits an Asset
        event per member only after every member switched.
    :param group_uri: the group's own folder (default: ``_tpc_groups/<namespace>`` beside
        the first folder member, or the first table member's ``ledger_uri``).
    :param target: a folder (``/abs/path``, ``s3://bucket/prefix``) or a table
        (``iceberg://<catalog>/<namespace>.<table>``), taken the same way; for a table the
        job writes Parquet files with a string ``epoch`` column into ``txn.output_uri``
        (docs/tables.md) and ``catalog_conn_id`` names the catalog's connection;
        ``ledger_uri`` keeps the table's ledger apart from it (managed table storage,
        a new table of a REST catalog); ``replace_where`` / ``write_mode`` say which
        rows of a table of any partitioning an epoch owns (docs/tables.md).
    """
    if (target is None) == (targets is None):
        raise ValueError(f"{group_id}: give either target (one output) or targets (several, "
                         "committed as one group transaction), not both or neither")
    per_task = _task_kwargs(group_id, task_kwargs, submit=submit_kwargs,
                            wait_precommit=sensor_kwargs, commit=commit_kwargs,
                            abort=abort_kwargs)
    submit_kwargs = per_task.pop("submit", None)
    if targets is not None:
        if ledger_uri or replace_where is not None or write_mode != "replace" or add_columns:
            raise ValueError(f"{group_id}: with targets, give ledger_uri, replace_where, "
                             "write_mode and add_columns per member: targets={name: "
                             "{'target': ..., 'ledger_uri': ...}}")
        with TaskGroup(group_id=group_id) as group:
            group_tasks(application=application, targets=targets, namespace=namespace,
                        group_uri=group_uri, epoch=epoch, conn_id=conn_id,
                        storage_conn_id=storage_conn_id, storage_options=storage_options,
                        sink_config=sink_config, catalog_conn_id=catalog_conn_id,
                        outlets=outlets, sensor_mode=sensor_mode, deferrable=deferrable,
                        poke_interval=poke_interval,
                        sensor_timeout=sensor_timeout, approval=approval,
                        approval_subject=approval_subject, submit_kwargs=submit_kwargs,
                        task_kwargs=per_task, **spark_kwargs)
        return group
    shared = {"target": target, "namespace": namespace, "storage_conn_id": storage_conn_id,
              "storage_options": storage_options, "sink_config": sink_config,
              "catalog_conn_id": catalog_conn_id, "ledger_uri": ledger_uri,
              "replace_where": replace_where, "write_mode": write_mode,
              "add_columns": add_columns}
    with TaskGroup(group_id=group_id) as group:
        submit = StagedSparkSubmitOperator(task_id="submit", application=application,
                                           epoch=epoch, conn_id=conn_id, **shared,
                                           **(submit_kwargs or {}), **spark_kwargs)
        exactly_once_tasks(submit, outlets=outlets, sensor_mode=sensor_mode,
                           deferrable=deferrable, poke_interval=poke_interval,
                           sensor_timeout=sensor_timeout, approval=approval,
                           approval_subject=approval_subject, epoch=epoch,
                           task_kwargs=per_task, **shared)
    return group


def exactly_once_tasks(
    submit: BaseOperator,
    *,
    target: str,
    namespace: str,
    storage_conn_id: str | None = None,
    storage_options: dict[str, Any] | None = None,
    sink_config: SinkConfig | dict[str, Any] | None = None,
    catalog_conn_id: str | None = None,
    ledger_uri: str | None = None,
    replace_where: Any = None,
    write_mode: str = "replace",
    add_columns: bool = False,
    outlets: list[Asset] | None = None,
    sensor_mode: str = "poke",
    deferrable: bool = False,
    poke_interval: float = 5,
    sensor_timeout: float = 6 * 3600,
    approval: bool = False,
    approval_subject: str | None = None,
    epoch: str = DEFAULT_EPOCH,
    task_kwargs: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, BaseOperator]:
    """The protocol's tasks after ``submit``, wired as :func:`exactly_once_spark_group` does.

    ``submit`` is a task that begins the transaction and pushes it to XCom under
    ``tpc_txn`` (as :class:`StagedSparkSubmitOperator` does); use this for a job that is
    not a spark-submit.  Call it inside the DAG (or TaskGroup) holding ``submit``.
    Returns the tasks by id: ``wait_precommit``, ``commit``, ``abort``, ``committed`` and,
    with ``approval``, ``approve`` and ``abort_rejected``.  ``task_kwargs`` maps a task id
    (``wait_precommit``, ``commit``, ``abort``) to more arguments of that task
    (``retries``, ``queue``, ``pool``, ``execution_timeout`` ...).

    A rejection at the gate (*Abort*) runs ``abort_rejected``: it aborts the run's
    attempts, then fails (no retry), so ``committed`` is upstream_failed and the DAG run
    ends *failed*, as after any other abort.  The ``abort`` task does not run for it: the
    transaction is aborted once.
    """
    shared = {"target": target, "namespace": namespace, "storage_conn_id": storage_conn_id,
              "storage_options": storage_options, "sink_config": sink_config,
              "catalog_conn_id": catalog_conn_id, "ledger_uri": ledger_uri,
              "replace_where": replace_where, "write_mode": write_mode,
              "add_columns": add_columns}
    pulled = "{{ ti.xcom_pull(task_ids='%s')[%r] }}"
    return _protocol_tasks(
        submit, shared, (PrecommitSensor, CommitOperator, AbortOperator),
        outlets=outlets if outlets is not None else [target_asset(target)],
        sensor_mode=sensor_mode, deferrable=deferrable, poke_interval=poke_interval,
        sensor_timeout=sensor_timeout, approval=approval,
        subject=approval_subject or f"Commit {namespace} epoch {epoch}?",
        body=lambda wait: (
            f"The job pre-committed {pulled % (wait, 'files')} files "
            f"({pulled % (wait, 'rows')} rows) for {pulled % (wait, 'txn_id')}. Commit "
            "publishes them; Abort discards them and fails the run."),
        task_kwargs=task_kwargs)


#: The tasks of the protocol that take more arguments through ``task_kwargs``.
CONFIGURABLE_TASKS = ("submit", "wait_precommit", "commit", "abort")


def _task_kwargs(group_id: str, task_kwargs: Mapping[str, Mapping[str, Any]] | None,
                 **by_task: Mapping[str, Any] | None) -> dict[str, dict[str, Any]]:
    """One mapping of task id -> its extra arguments, from ``task_kwargs`` and the
    per-task shorthands (``submit_kwargs`` ...), which win where both name an argument.
    An unknown task id is refused: a misspelt one would otherwise be ignored silently."""
    merged: dict[str, dict[str, Any]] = {}
    for task_id, kwargs in (task_kwargs or {}).items():
        if task_id not in CONFIGURABLE_TASKS:
            raise ValueError(f"{group_id}: task_kwargs names no task {task_id!r}; the tasks "
                             f"that take arguments are {', '.join(CONFIGURABLE_TASKS)}")
        merged[task_id] = dict(kwargs or {})
    for task_id, kwargs in by_task.items():
        if kwargs:
            merged.setdefault(task_id, {}).update(kwargs)
    return merged


def _protocol_tasks(submit: BaseOperator, shared: dict[str, Any], kinds: tuple[type, ...], *,
                    outlets: list[Asset] | None, sensor_mode: str, deferrable: bool,
                    poke_interval: float, sensor_timeout: float, approval: bool,
                    subject: str, body: Any,
                    task_kwargs: Mapping[str, Mapping[str, Any]] | None,
                    ) -> dict[str, BaseOperator]:
    """The tasks after ``submit`` of a single target and of a group alike (``kinds``: the
    sensor, commit and abort classes), wired one way: submit >> wait [>> approve] >>
    commit, abort when any of them fails, ``committed`` the one leaf."""
    sensor_cls, commit_cls, abort_cls = kinds
    extra = {k: dict(v) for k, v in (task_kwargs or {}).items()}
    unknown = set(extra) - {"wait_precommit", "commit", "abort"}
    if unknown:  # "submit" is the caller's own task here: its arguments are the caller's
        raise ValueError(f"task_kwargs names no task after submit: {', '.join(sorted(unknown))}"
                         "; these tasks take arguments: wait_precommit, commit, abort")
    wait = sensor_cls(task_id="wait_precommit", submit_task_id=submit.task_id,
                      **{"mode": sensor_mode, "deferrable": deferrable,
                         "poke_interval": poke_interval, "timeout": sensor_timeout,
                         **extra.get("wait_precommit", {})}, **shared)
    commit = commit_cls(task_id="commit", sensor_task_id=wait.task_id, **shared,
                        **({"outlets": outlets} if outlets is not None else {}),
                        **extra.get("commit", {}))
    abort = abort_cls(task_id="abort", submit_task_id=submit.task_id, **shared,
                      **extra.get("abort", {}))
    # The single leaf: succeeds only if the epoch was committed, so the DAG run fails when
    # an abort ran (abort itself succeeds; abort_rejected fails) and `group >> next_task`
    # runs next_task only on committed data (abort, skipped on success, is not a leaf).
    committed = EmptyOperator(task_id="committed", trigger_rule="none_failed_min_one_success")
    tasks: dict[str, BaseOperator] = {"wait_precommit": wait, "commit": commit,
                                      "abort": abort, "committed": committed}
    [commit, abort] >> committed
    submit >> wait
    if approval:
        reject = abort_cls(task_id="abort_rejected", submit_task_id=submit.task_id,
                           trigger_rule="all_success", fail_run=True,
                           reason="rejected at the approval gate", **shared)
        gate = _approval_gate(wait, commit, reject, subject, body(wait.task_id))
        reject >> committed
        [submit, wait, gate, commit] >> abort
        tasks.update(approve=gate, abort_rejected=reject)
    else:
        wait >> commit
        [submit, wait, commit] >> abort
    return tasks


def group_tasks(*, application: str, targets: dict[str, Any], namespace: str,
                group_uri: str | None, epoch: str, conn_id: str, storage_conn_id: str | None,
                storage_options: dict[str, Any] | None, sink_config: Any,
                catalog_conn_id: str | None, outlets: list[Asset] | None, sensor_mode: str,
                deferrable: bool, poke_interval: float, sensor_timeout: float, approval: bool,
                approval_subject: str | None, submit_kwargs: dict[str, Any] | None,
                task_kwargs: Mapping[str, Mapping[str, Any]] | None = None,
                **spark_kwargs: Any) -> dict[str, BaseOperator]:
    """The tasks of a group transaction, wired as :func:`exactly_once_tasks` wires a
    single target's (same task ids: ``submit``, ``wait_precommit``, [``approve``,
    ``abort_rejected``], ``commit``, ``abort``, ``committed``)."""
    from airflow_tpc.airflow.operators.group import GroupSparkSubmitOperator

    shared = {"targets": targets, "namespace": namespace, "group_uri": group_uri,
              "storage_conn_id": storage_conn_id, "storage_options": storage_options,
              "sink_config": sink_config, "catalog_conn_id": catalog_conn_id}
    submit = GroupSparkSubmitOperator(task_id="submit", application=application, epoch=epoch,
                                      conn_id=conn_id, **shared, **(submit_kwargs or {}),
                                      **spark_kwargs)
    return {"submit": submit, **exactly_once_group_tasks(
        submit, outlets=outlets, sensor_mode=sensor_mode, deferrable=deferrable,
        poke_interval=poke_interval,
        sensor_timeout=sensor_timeout, approval=approval, approval_subject=approval_subject,
        epoch=epoch, task_kwargs=task_kwargs, **shared)}


def exactly_once_group_tasks(
    submit: BaseOperator, *, targets: dict[str, Any], namespace: str,
    group_uri: str | None = None, storage_conn_id: str | None = None,
    storage_options: dict[str, Any] | None = None, sink_config: Any = None,
    catalog_conn_id: str | None = None, outlets: list[Asset] | None = None,
    sensor_mode: str = "poke", deferrable: bool = False, poke_interval: float = 5,
    sensor_timeout: float = 6 * 3600, approval: bool = False,
    approval_subject: str | None = None, epoch: str = DEFAULT_EPOCH,
    task_kwargs: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, BaseOperator]:
    """The group's tasks after ``submit``, as :func:`exactly_once_tasks` is a single
    target's: ``submit`` is any task that began the group attempt and pushed it to XCom
    under ``tpc_group_txn`` as ``GroupSparkSubmitOperator`` does
    (``GroupArgs.of(targets, namespace, group_uri).xcom(gtxn)``: the run page opens the
    group from it)."""
    from airflow_tpc.airflow.operators.group import GroupAbortOperator, GroupCommitOperator
    from airflow_tpc.airflow.sensors.group import GroupPrecommitSensor

    shared = {"targets": targets, "namespace": namespace, "group_uri": group_uri,
              "storage_conn_id": storage_conn_id, "storage_options": storage_options,
              "sink_config": sink_config, "catalog_conn_id": catalog_conn_id}
    pulled = "{{ ti.xcom_pull(task_ids='%s')[%r] }}"
    return _protocol_tasks(
        submit, shared, (GroupPrecommitSensor, GroupCommitOperator, GroupAbortOperator),
        outlets=outlets, sensor_mode=sensor_mode, deferrable=deferrable,
        poke_interval=poke_interval, sensor_timeout=sensor_timeout, approval=approval,
        subject=approval_subject
        or f"Commit {namespace} epoch {epoch} ({', '.join(targets)})?",
        body=lambda wait: (
            f"The job pre-committed {pulled % (wait, 'members')} for "
            f"{pulled % (wait, 'txn_id')}. Commit publishes every member; Abort discards "
            "them all and fails the run."),
        task_kwargs=task_kwargs)


def _approval_gate(wait: BaseOperator, commit: BaseOperator, reject: BaseOperator,
                   subject: str, body: str) -> BaseOperator:
    """The Human-in-the-loop gate between the sensor and the commit: *Commit* runs
    ``commit``, *Abort* runs ``reject`` (which aborts and fails the run)."""
    from airflow.providers.standard.operators.hitl import HITLBranchOperator

    gate = HITLBranchOperator(task_id="approve", subject=subject, body=body,
                              options=["Commit", "Abort"],
                              options_mapping={"Commit": commit.task_id,
                                               "Abort": reject.task_id})
    wait >> gate >> [commit, reject]
    return gate
