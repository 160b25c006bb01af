"""Bases of the protocol tasks: the sink arguments declared once, like the Amazon provider's
``AwsBaseOperator``/``AwsBaseSensor`` (``aws_conn_id``, ``region_name``, ``aws_template_fields``).

Every protocol task (submit, sensor, commit, abort) takes the same sink arguments —
``target``, ``namespace``, ``storage_conn_id``, ``storage_options``, ``sink_config``,
and for a table ``catalog_conn_id``, ``ledger_uri``, ``replace_where``, ``write_mode`` —
and must turn them into the same hook.  :class:`TpcBaseOperator` declares them, checks
them (no secret in ``storage_options``: operator arguments are rendered in the UI and
serialised with the DAG), names their template fields (:func:`tpc_template_fields`) and
builds the :class:`TpcHook` from their *rendered* values (:attr:`TpcBaseOperator.tpc_hook`);
:class:`TpcBaseSensor` adds nothing but :class:`BaseSensorOperator`.  The trigger takes the
same arguments through :meth:`SinkArgs.serialize`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from airflow.sdk import BaseOperator, BaseSensorOperator

from airflow_tpc import SinkConfig
from airflow_tpc.airflow.hooks.tpc import SinkArgs, TpcHook

#: The sink arguments that are templated on every protocol task (``storage_options`` and
#: ``sink_config`` are not: they are checked when the DAG is parsed).
TPC_TEMPLATE_FIELDS = ("target", "namespace", "storage_conn_id", "catalog_conn_id",
                       "ledger_uri", "replace_where")


def tpc_template_fields(*template_fields: str) -> tuple[str, ...]:
    """``template_fields`` of a protocol task: its own fields plus the shared sink ones,
    each once, in order (an operator's parent fields first, as Airflow renders them)."""
    if not all(isinstance(f, str) for f in template_fields):
        raise TypeError(f"template fields must be strings, not {template_fields!r}")
    return tuple(dict.fromkeys((*template_fields, *TPC_TEMPLATE_FIELDS)))


class TpcBaseOperator(BaseOperator):
    """An operator that addresses one sink: declares, checks and templates its arguments and
    builds its :class:`TpcHook`.

    Cooperative: it passes every other keyword argument on, so it combines with another
    operator (``StagedSparkSubmitOperator(TpcBaseOperator, SparkSubmitOperator)``) and with
    :class:`BaseSensorOperator` (:class:`TpcBaseSensor`).

    :param target: where the output is published: ``/abs/path``, ``file:///abs/path`` or
        ``s3://bucket/prefix`` (templated).
    :param namespace: the pipeline's transactional id; two pipelines never share one
        (templated).
    :param storage_conn_id: connection with the store's credentials (login = access key,
        password = secret, extra ``endpoint_url``/``region_name``/``token``); templated.
    :param storage_options: public options only (``endpoint_url``, ``region_name``);
        anything else is refused here, when the DAG is parsed.
    :param sink_config: :class:`SinkConfig` or its keyword arguments.
    :param catalog_conn_id: for a table target (``iceberg://<catalog>/<ns>.<table>``), the
        ``iceberg_catalog`` connection holding the catalog's properties (templated);
        without it pyiceberg's own configuration (``~/.pyiceberg.yaml``, environment).
    :param ledger_uri: for a table target, a folder on the table's store for the ledger,
        claim, markers and seals, apart from the table (templated): needed where the
        table's storage takes only the table's own files (a REST catalog's managed
        storage, S3 Tables) and for a new table of a REST catalog.  Without it they live
        in the table's location.
    :param replace_where: for a table of any partitioning, the rows one epoch
        owns and a commit replaces (templated), e.g. ``"event_date = '{{ ds }}'"`` or
        ``{"event_date": "{{ ds }}"}``; every staged row must satisfy it.  The commit's
        decision records it, so a later recover applies exactly what was decided.
    :param write_mode: ``"replace"`` (default) or ``"append"`` (a table target: each
        commit adds its files, idempotent by transaction, never replacing).
    :param add_columns: an Iceberg target's commit may add the staged files' columns the
        table lacks (nullable, by name); by default such a column is refused.
    """

    template_fields = tpc_template_fields()

    target: str
    namespace: str
    storage_conn_id: str | None
    storage_options: dict[str, Any]
    sink_config: SinkConfig | dict[str, Any] | None
    catalog_conn_id: str | None
    ledger_uri: str | None
    replace_where: Any
    write_mode: str
    add_columns: bool

    def __init__(self, *, target: str, namespace: str, storage_conn_id: str | None = None,
                 storage_options: dict[str, Any] | None = None,
                 sink_config: SinkConfig | dict[str, Any] | None = None,
                 catalog_conn_id: str | None = None,
                 ledger_uri: str | None = None,
                 replace_where: Any = None,
                 write_mode: str = "replace",
                 add_columns: bool = False,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        # Checked now (a refused secret fails the DAG import, before anything renders or
        # stores it) and again whenever the hook is built from the rendered arguments.
        args = SinkArgs(target, namespace, storage_conn_id, storage_options, sink_config,
                        catalog_conn_id, ledger_uri, replace_where, write_mode, add_columns,
                        where=type(self).__name__)
        # One attribute per field of SinkArgs (the templated arguments), checked values.
        for field in dataclasses.fields(args):
            setattr(self, field.name, getattr(args, field.name))
        self.storage_options = args.storage_options or {}
        self._tpc_hook_for: tuple[SinkArgs, TpcHook] | None = None

    @property
    def sink_args(self) -> SinkArgs:
        """The sink arguments as they are now (rendered, inside ``execute``)."""
        return SinkArgs(self.target, self.namespace, self.storage_conn_id,
                        self.storage_options, self.sink_config, self.catalog_conn_id or None,
                        self.ledger_uri or None, self.replace_where,
                        self.write_mode or "replace", bool(self.add_columns),
                        where=type(self).__name__)

    @property
    def tpc_hook(self) -> TpcHook:
        """The hook of :attr:`sink_args`, built once per set of argument values.

        Cached so that a poking sensor reuses one :class:`Sink` (and one connection
        lookup) across pokes; keyed on the arguments so that a hook built before the
        templates were rendered is never used after.
        """
        args = self.sink_args
        cached = self._tpc_hook_for
        if cached is None or cached[0] != args:
            cached = (args, args.hook())
            self._tpc_hook_for = cached
        return cached[1]


class TpcBaseSensor(TpcBaseOperator, BaseSensorOperator):
    """A sensor that addresses one sink: :class:`TpcBaseOperator`'s arguments and hook plus
    :class:`BaseSensorOperator`'s (``poke_interval``, ``timeout``, ``mode`` ...)."""

    template_fields = tpc_template_fields()
