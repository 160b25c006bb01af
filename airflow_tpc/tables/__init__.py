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

from typing import Any

__all__ = ["IcebergSink", "IcebergTarget", "TableSchemaError", "open_table_sink"]


def __getattr__(name: str) -> Any:
    # Lazy: airflow_tpc.tables.iceberg imports pyiceberg only when it is used.
    if name in __all__:
        from . import iceberg

        return getattr(iceberg, name)
    raise AttributeError(name)
