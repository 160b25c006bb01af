"""Table-format targets (issue 11): an epoch's commit is one commit of a table format.

The protocol stays one protocol: the ledger's ``decision.json`` is still the commit
point, and the table format's own atomic commit is the promotion strategy's switch
(plugged into :func:`airflow_tpc.core.promote.strategy_for`).  Staged files are added to
the table where they were written — never copied — so for a table target staging
lives inside the table's location and committed files are never deleted by
airflow-tpc while a retained table version references them.

Formats: Iceberg (:mod:`airflow_tpc.tables.iceberg`, ``iceberg://<catalog>/<ns>.<table>``,
one snapshot per epoch commit) and Delta Lake through delta-rs
(:mod:`airflow_tpc.tables.delta`, ``delta+file:///path`` / ``delta+s3://bucket/prefix``,
one version per epoch commit).  Both are built on one skeleton
(:mod:`airflow_tpc.tables.base`).  The table libraries are an optional extra
(``pip install airflow-tpc[tables]``): they are imported lazily, so ``import
airflow_tpc`` never needs them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from ..core.sink import Sink
    from ..core.transaction import SinkConfig
    from .base import TableSink

__all__ = ["DeltaSink", "DeltaTarget", "IcebergSink", "IcebergTarget", "TableSchemaError",
           "TableSink", "open_sink", "open_table_sink"]

#: Target URI schemes that name a table rather than a folder.
TABLE_SCHEMES = ("iceberg://", "delta+file://", "delta+s3://", "delta+az://", "delta+abfs://",
                 "delta+abfss://")

_HOMES = {"IcebergSink": "iceberg", "IcebergTarget": "iceberg", "DeltaSink": "delta",
          "DeltaTarget": "delta", "TableSchemaError": "base", "TableSink": "base"}


def open_table_sink(target: str, namespace: str, *,
                    catalog_properties: dict[str, str] | None = None,
                    storage_options: dict[str, Any] | None = None,
                    config: SinkConfig | None = None,
                    ledger_uri: str | None = None,
                    replace_where: Any = None, mode: str = "replace",
                    add_columns: bool = False) -> TableSink:
    """A sink for a table target URI: ``iceberg://<catalog>/<namespace>.<table>``
    (``catalog_properties``: pyiceberg's catalog properties) or ``delta+file:///<path>``
    / ``delta+s3://<bucket>/<prefix>`` (``catalog_properties``: extra delta-rs storage
    options, merged over those translated from ``storage_options``).  ``ledger_uri``:
    keep the ledger, claim and markers there instead of inside the table's location
    (managed table storage; a folder on the table's store).  ``replace_where`` (a
    predicate or a column mapping) / ``mode="append"``: which rows an epoch owns in
    a table of any partitioning (:mod:`airflow_tpc.tables.scope`; Delta: over
    partition columns).  ``add_columns``: a commit may add the staged files' new
    columns to the table (Iceberg; refused by default)."""
    from ..errors import TpcError

    sink: type[TableSink]
    if isinstance(target, str) and target.startswith("iceberg://"):
        from .iceberg import IcebergSink

        sink = IcebergSink
    elif isinstance(target, str) and target.startswith(TABLE_SCHEMES[1:]):
        from .delta import DeltaSink

        sink = DeltaSink
    else:
        raise TpcError(f"{target!r} is not a table target (supported: iceberg://, "
                       "delta+file://, delta+s3://, delta+az://, delta+abfs[s]://)")
    return sink(target, namespace, catalog_properties=catalog_properties,
                storage_options=storage_options, config=config, ledger_uri=ledger_uri,
                replace_where=replace_where, mode=mode, add_columns=add_columns)


def open_sink(target: str, namespace: str, *, storage_options: dict[str, Any] | None = None,
              config: SinkConfig | None = None,
              catalog_properties: dict[str, str] | None = None,
              ledger_uri: str | None = None,
              replace_where: Any = None, mode: str = "replace",
              add_columns: bool = False) -> Sink:
    """A sink for any target: a table URI (``iceberg://<catalog>/<ns>.<table>``,
    ``delta+file:///<path>``, ``delta+s3://<bucket>/<prefix>``) or a folder.  One call
    for the layers that build sinks from a user's target string (operators, CLI, the
    job side), so they take a table the way they take a folder; a table library is
    imported only for a table target."""
    if isinstance(target, str) and target.startswith(TABLE_SCHEMES):
        return open_table_sink(target, namespace, catalog_properties=catalog_properties,
                               storage_options=storage_options, config=config,
                               ledger_uri=ledger_uri, replace_where=replace_where, mode=mode,
                               add_columns=add_columns)
    for given, name in ((catalog_properties, "catalog_properties"), (ledger_uri, "ledger_uri"),
                        (replace_where, "replace_where"),
                        (mode if mode != "replace" else None, "mode"),
                        (add_columns or None, "add_columns")):
        if given:
            from ..errors import TpcError

            raise TpcError(f"{name} given for {target!r}, which is not a table target (a "
                           "folder target keeps its ledger in itself)")
    from ..core.sink import Sink

    return Sink(target, namespace, storage_options=storage_options, config=config)


def __getattr__(name: str) -> Any:
    # Lazy: a format's module imports its table library only when it is used.
    home = _HOMES.get(name)
    if home is not None:
        from importlib import import_module

        return getattr(import_module(f"{__name__}.{home}"), name)
    raise AttributeError(name)
