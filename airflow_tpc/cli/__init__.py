"""``airflow-tpc``, the operator's command line: ``commands`` (single targets),
``group`` and ``group_status`` (group transactions), ``common`` (what both print)."""

from .commands import main

__all__ = ["main"]
