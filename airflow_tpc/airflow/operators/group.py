"""Airflow tasks of a group transaction: one epoch, several targets, all or nothing.

The same four steps as a single target (submit, wait for the seal, commit, abort),
over a :class:`~airflow_tpc.group.Group`: the submit task begins one group attempt
(every member gets the same fencing number) and hands the job every member's
staging (``spark.airflow_tpc.group``: :func:`airflow_tpc.spark.current_group`); the
sensor waits until every member is sealed and passes each table member's check;
the commit task writes the group's one decision, switches every member, and only
then emits an Asset event per member; the abort task aborts the group.

Every task takes the same arguments (:class:`GroupArgs`): ``targets`` (member name ->
a target URI, or a dict of that member's sink arguments: ``target``, ``ledger_uri``,
``replace_where``, ``write_mode``, ``add_columns``, ``catalog_conn_id``), ``namespace``,
``group_uri`` (the group's own folder) and the shared ``storage_conn_id``,
``storage_options``, ``sink_config`` and ``catalog_conn_id``.

The arguments and the group they address are :mod:`airflow_tpc.airflow.operators.group_base`'s
(re-exported here).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import Asset, BaseOperator

from airflow_tpc import InvalidState, Transaction
from airflow_tpc.airflow.hooks.tpc import GROUP_XCOM_KEY, TpcHook
from airflow_tpc.airflow.operators.group_base import (
    GROUP_TEMPLATE_FIELDS,
    MEMBER_KEYS,
    GroupArgs,
    GroupTaskMixin,
    _loaded,
    default_group_uri,
)
from airflow_tpc.airflow.operators.submit import StagedSparkSubmitOperator, _owner, job_payload
from airflow_tpc.airflow.operators.tpc import target_asset
from airflow_tpc.airflow.utils import metrics, spark_app, task_policy
from airflow_tpc.airflow.utils.lineage_abort import abort_summary
from airflow_tpc.airflow.utils.metrics import ABORTS

if TYPE_CHECKING:
    from airflow.sdk import Context

__all__ = [
    "GROUP_TEMPLATE_FIELDS", "GROUP_XCOM_KEY", "MEMBER_KEYS", "GroupAbortOperator", "GroupArgs",
    "GroupCommitOperator", "GroupSparkSubmitOperator", "GroupTaskMixin", "default_group_uri",
]



class GroupSparkSubmitOperator(GroupTaskMixin, StagedSparkSubmitOperator):
    """Begin a new group attempt and run the Spark job that writes every member.

    The job finds the group with ``airflow_tpc.spark.current_group(spark)`` and writes
    member ``name`` into ``group.output_uri(name)``, then seals with
    ``group.precommit()``.  Credentials reach the job as for a single target
    (``job_credentials``); every member shares ``storage_conn_id``.
    """

    template_fields: Sequence[str] = tuple(dict.fromkeys(
        (*StagedSparkSubmitOperator.template_fields, *GROUP_TEMPLATE_FIELDS)))

    def __init__(self, *, targets: Mapping[str, Any], namespace: str,
                 group_uri: str | None = None, storage_conn_id: str | None = None,
                 storage_options: dict[str, Any] | None = None, sink_config: Any = None,
                 catalog_conn_id: str | None = None, **kwargs: Any) -> None:
        first = next(iter(targets.values()), None) if isinstance(targets, Mapping) else None
        first = first if isinstance(first, str) else (first or {}).get("target", "")
        super().__init__(target=first, namespace=namespace, storage_conn_id=storage_conn_id,
                         storage_options=storage_options, sink_config=sink_config, **kwargs)
        self._init_group(targets, namespace, group_uri, storage_conn_id, storage_options,
                         sink_config, catalog_conn_id)

    def begin_transaction(self, context: Context
                          ) -> tuple[Callable[[str | None], dict[str, str]],
                                     Callable[[str], object]]:
        from airflow_tpc.spark.group_context import GROUP_CONF_KEY, build_group_payload

        group, hooks = self.open_group()
        gtxn = group.begin(str(self.epoch), owner=_owner(context))
        self.log.info("Began group %s of %s (fencing number %d): %s", gtxn.txn_id, group.uri,
                      gtxn.attempt, ", ".join(f"{n} -> {t.staging_uri}"
                                              for n, t in gtxn.members.items()))
        context["ti"].xcom_push(key=GROUP_XCOM_KEY, value=self.group_args.xcom(gtxn))
        self._tpc_group_runtime = (group, gtxn)  # _record_app writes its runtime records
        for line in spark_app.stop_group_older(group, gtxn.epoch, gtxn.attempt):
            self.log.warning("Fenced by group %s: %s", gtxn.txn_id, line)

        def conf_for(credentials_file: str | None) -> dict[str, str]:
            members = {name: job_payload(
                gtxn.member(name), guarantee=self.guarantee,
                promotion=hooks[name].get_sink().config.promotion,
                public_storage=hooks[name].job_public_options(),
                credentials_file=credentials_file,
                table=hooks[name].target if hooks[name].is_table else None,
                epoch_column=hooks[name].epoch_layout) for name in gtxn.members}
            return {GROUP_CONF_KEY: build_group_payload(group.uri, gtxn.namespace, gtxn.epoch,
                                                        gtxn.attempt, members)}

        def abort(reason: str) -> None:
            try:
                group.abort(gtxn, reason)
            except Exception as exc:  # the next attempt fences it; abort/recover cleans
                self.log.warning("Could not abort group %s (%s)", gtxn.txn_id, exc)

        return conf_for, abort

    def _record_app(self, started: dict[str, Any]) -> None:
        """spark-submit runs: write the group attempt's runtime record for every member
        (PROTOCOL.md §3.4.12), so the group's abort paths can stop the application."""
        runtime = getattr(self, "_tpc_group_runtime", None)
        if runtime is not None:
            spark_app.write_group_records(*runtime, self._tpc_marker, started)


class GroupCommitOperator(GroupTaskMixin, BaseOperator):
    """Commit the run's group attempt against the digests the sensor validated: one
    decision, then every member switched; then one Asset event per member (never
    before the whole group switched, and not again after a finished commit)."""

    template_fields: Sequence[str] = (*GROUP_TEMPLATE_FIELDS, "sensor_task_id")
    ui_color = "#b7e4c7"

    def __init__(self, *, targets: Mapping[str, Any], namespace: str, sensor_task_id: str,
                 group_uri: str | None = None, storage_conn_id: str | None = None,
                 storage_options: dict[str, Any] | None = None, sink_config: Any = None,
                 catalog_conn_id: str | None = None, force: bool = False,
                 retries: int | None = None, retry_delay: Any = None,
                 retry_exponential_backoff: float | None = None, max_retry_delay: Any = None,
                 **kwargs: Any) -> None:
        default_outlets = "outlets" not in kwargs
        # retries by default, as CommitOperator's (task_policy.py): idempotent, so a lost
        # worker costs a retry, not the epoch
        super().__init__(**task_policy.commit_retry_args(
            retries, retry_delay, retry_exponential_backoff, max_retry_delay), **kwargs)
        self.sensor_task_id = sensor_task_id
        self.force = force
        self._init_group(targets, namespace, group_uri, storage_conn_id, storage_options,
                         sink_config, catalog_conn_id)
        if default_outlets:
            self.outlets = self.group_args.assets()

    def execute(self, context: Context) -> dict[str, Any]:
        pointer = context["ti"].xcom_pull(task_ids=self.sensor_task_id)
        if not pointer or "members" not in pointer:
            raise InvalidState(f"no pre-commit pointer from task {self.sensor_task_id!r}: "
                               "nothing validated to commit")
        group, hooks = self.open_group()
        gtxn = _loaded(group, pointer, self.sensor_task_id)
        was_published = group.poll(gtxn).published
        started = time.monotonic()
        # a refusal is final; anything else is retried; each member's gauges at the end
        with task_policy.refusals_fail_at_once(), metrics.health_at_end(*hooks.values()):
            result = group.commit(gtxn, force=self.force, expected_digests={
                n: p["digest"] for n, p in pointer["members"].items()})
        published = group.poll(gtxn).published
        if published and not was_published:  # this try made every member visible: once
            for name, p in pointer["members"].items():
                hooks[name].metrics.committed(time.monotonic() - started, p["files"],
                                              p["bytes"], p.get("rows"))
        targets = {n: args.target for n, args in self.group_args.members}
        summary = {"outcome": result.outcome, "txn_id": gtxn.txn_id, "group": group.uri,
                   "epoch": gtxn.epoch, "attempt": gtxn.attempt, "published": published,
                   "members": {n: {**p, "target": targets[n],
                                   "published_attempt": result.published.get(n)}
                               for n, p in sorted(pointer["members"].items())}}
        context["ti"].xcom_push(key="tpc_group_commit", value=summary)
        # For the OpenLineage listener (it asks from a fork, which must not do I/O of its
        # own): each member's summary as a single commit's, and what only I/O tells.
        self._tpc_members = {n: _member_summary(hooks[n], gtxn.member(n), p, result.outcome)
                             for n, p in pointer["members"].items()}
        self._tpc_facts = _member_facts(hooks, self._tpc_members)
        if not published or was_published:
            # Not every member switched to this attempt (a later one owns the epoch), or
            # a previous try already announced it: no (second) Asset event.
            self.log.info("group %s: %s; no Asset event", gtxn.txn_id,
                          "already published" if was_published else "superseded")
            self.outlets = []
            return summary
        by_uri = {target_asset(t).uri: n for n, t in targets.items()}
        for outlet in self.outlets:
            if isinstance(outlet, Asset):
                name = by_uri.get(outlet.uri)
                member = pointer["members"].get(name, {}) if name else {}
                context["outlet_events"][outlet].extra = {
                    "epoch": gtxn.epoch, "txn_id": gtxn.txn_id, "attempt": gtxn.attempt,
                    "group": group.uri, "member": name, "files": member.get("files"),
                    "rows": member.get("rows"), "digest": member.get("digest")}
        self.log.info("group %s %s: %s", gtxn.txn_id, result.outcome, ", ".join(
            f"{n} {p['files']} files" for n, p in pointer["members"].items()))
        return summary


    # -- OpenLineage (airflow_tpc.airflow.utils.lineage; only with that provider) -----------
    def get_openlineage_facets_on_start(self) -> Any:
        """Every member as an output, named before anything is committed."""
        return _group_lineage(self.group_args.hooks())

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """Every member with what the group's commit made of it (kept by ``execute``)."""
        return _group_lineage(self.group_args.hooks(), getattr(self, "_tpc_members", None),
                              getattr(self, "_tpc_facts", None))

    def get_openlineage_facets_on_failure(self, task_instance: Any) -> Any:
        return _group_lineage(self.group_args.hooks())


def _member_summary(hook: TpcHook, txn: Transaction, pointer: Mapping[str, Any],
                    outcome: str) -> dict[str, Any]:
    """A member's part of the group's commit, shaped as a single commit's summary (what
    :func:`airflow_tpc.airflow.utils.lineage.lineage` reads), a table's version included."""
    out = {"outcome": outcome, "epoch": txn.epoch, "attempt": txn.attempt,
           "txn_id": txn.txn_id, "namespace": txn.namespace, "digest": pointer["digest"],
           "files": pointer.get("files"), "bytes": pointer.get("bytes"),
           "rows": pointer.get("rows")}
    if hook.is_table:
        out["location"] = txn.target
        out.update(hook.get_sink().table_version(txn.epoch, pointer["digest"]) or {})
    return out


def _member_facts(hooks: Mapping[str, TpcHook],
                  members: Mapping[str, dict[str, Any]]) -> dict[str, Any] | None:
    try:
        from airflow_tpc.airflow.utils.lineage import commit_facts
    except ImportError:  # no OpenLineage provider: no lineage
        return None
    return {n: commit_facts(hooks[n], s) for n, s in members.items()}


def _group_lineage(hooks: Mapping[str, TpcHook],
                   members: Mapping[str, dict[str, Any]] | None = None,
                   facts: Mapping[str, Any] | None = None) -> Any:
    """One output per member, as a single commit names its target."""
    try:
        from airflow.providers.openlineage.extractors import OperatorLineage

        from airflow_tpc.airflow.utils.lineage import lineage
    except ImportError:
        return None
    outputs = []
    for name, hook in hooks.items():
        outputs += lineage(hook, (members or {}).get(name),
                           (facts or {}).get(name)).outputs
    return OperatorLineage(outputs=outputs)


class GroupAbortOperator(task_policy.AbortTask, GroupTaskMixin, BaseOperator):
    """Abort the run's group attempt (every member): by default when submit, sensor or
    commit failed.  A committed group is never aborted (logged, not raised: a commit that
    failed after its decision is rolled forward by re-running the commit task)."""

    template_fields: Sequence[str] = (*GROUP_TEMPLATE_FIELDS, "submit_task_id", "reason")
    ui_color = "#f4a6a6"

    def __init__(self, *, targets: Mapping[str, Any], namespace: str, submit_task_id: str,
                 group_uri: str | None = None, storage_conn_id: str | None = None,
                 storage_options: dict[str, Any] | None = None, sink_config: Any = None,
                 catalog_conn_id: str | None = None,
                 reason: str = task_policy.DEFAULT_ABORT_REASON,
                 trigger_rule: str = "one_failed", fail_run: bool = False,
                 **kwargs: Any) -> None:
        super().__init__(trigger_rule=trigger_rule, **kwargs)
        self._init_abort(submit_task_id, reason, fail_run)
        self._init_group(targets, namespace, group_uri, storage_conn_id, storage_options,
                         sink_config, catalog_conn_id)

    def execute(self, context: Context) -> dict[str, Any]:
        return self._abort_result(context, self._abort(context), "group transaction")

    def _abort(self, context: Context) -> dict[str, list[str]]:
        doc = context["ti"].xcom_pull(task_ids=self.submit_task_id, key=GROUP_XCOM_KEY)
        if not doc:
            self.log.info("No group transaction was begun by %s: nothing to abort",
                          self.submit_task_id)
            return {"aborted": [], "committed": []}
        group, hooks = self.open_group()
        gtxn = _loaded(group, doc, self.submit_task_id)
        self.reason = task_policy.abort_reason(self, context, str(self.reason))
        try:
            with metrics.health_at_end(*hooks.values()):  # each member's gauges
                made = group.abort(gtxn, self.reason)
                # after the decision (its reason is this abort's), as TpcHook.abort_run
                stopped = spark_app.stop_group(group, gtxn.epoch, gtxn.attempt)
                for line in stopped:
                    self.log.info("group %s: %s", gtxn.txn_id, line)
                if spark_app.group_stopped(stopped):
                    group.abort(gtxn, self.reason)  # removes what the job wrote meanwhile
            if made:  # counted per member, as a single target's abort is
                for hook in hooks.values():
                    hook.metrics.incr(ABORTS)
        except InvalidState as exc:
            self.log.warning("Not aborted: %s. If a commit task failed after its decision, "
                             "re-run it to finish the switch.", exc)
            return {"aborted": [], "committed": [gtxn.txn_id]}
        self.log.info("Aborted group %s%s", gtxn.txn_id, "" if made else " (already aborted)")
        if made:  # for the OpenLineage listener (a fork): each member's aborted attempt
            self._tpc_members = {n: abort_summary(t.epoch, t.namespace, [t.txn_id])
                                 for n, t in gtxn.members.items()}
        return {"aborted": [gtxn.txn_id], "committed": []}

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """Every member as an output, always; with the member's aborted attempt when this
        try aborted the group (nothing was written to any)."""
        return _group_lineage(self.group_args.hooks(), getattr(self, "_tpc_members", None))
