"""Table-format targets (issue 11): an epoch's commit is one commit of a table format.

The protocol stays one protocol: the ledger's ``decision.json`` is still the commit
point, and the table format's own atomic commit is the promotion strategy's switch
(plugged into :func:`airflow_tpc.promote.strategy_for`).  Staged files are added to
the table where they were written — never copied — so for a table target staging
lives inside the table's data location and committed files are never deleted by
airflow-tpc while a retained snapshot references them.

Only Iceberg is implemented (:mod:`airflow_tpc.tables.iceberg`).  The table
libraries are an optional extra (``pip install airflow-tpc[tables]``): they are
imported lazily, so ``import airflow_tpc`` never needs them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from ..sink import Sink
    from ..transaction import SinkConfig

__all__ = ["IcebergSink", "IcebergTarget", "TableSchemaError", "open_sink", "open_table_sink"]

#: Target URI schemes that name a table rather than a folder.
TABLE_SCHEMES = ("iceberg://",)


def open_sink(target: str, namespace: str, *, storage_options: dict[str, Any] | None = None,
              config: SinkConfig | None = None,
              catalog_properties: dict[str, str] | None = None) -> Sink:
    """A sink for any target: a table URI (``iceberg://<catalog>/<ns>.<table>``) or a
    folder.  One call for the layers that build sinks from a user's target string
    (operators, CLI, the job side), so they take a table the way they take a folder;
    pyiceberg is imported only for a table target."""
    if isinstance(target, str) and target.startswith(TABLE_SCHEMES):
        from .iceberg import open_table_sink

        return open_table_sink(target, namespace, catalog_properties=catalog_properties,
                               storage_options=storage_options, config=config)
    if catalog_properties:
        from ..errors import TpcError

        raise TpcError(f"catalog_properties given for {target!r}, which is not a table target")
    from ..sink import Sink

    return Sink(target, namespace, storage_options=storage_options, config=config)


def __getattr__(name: str) -> Any:
    # Lazy: airflow_tpc.tables.iceberg imports pyiceberg only when it is used.
    if name in __all__ and name != "open_sink":
        from . import iceberg

        return getattr(iceberg, name)
    raise AttributeError(name)
