"""Job-side helpers for PySpark: find the transaction, write into it, read committed data.

Imports only the standard library, pyspark, fsspec and pyarrow (plus the pure
core), so ``py_files_zip()`` can ship it to a cluster without Airflow::

    from airflow_tpc.spark import current_transaction
    txn = current_transaction(spark)          # passed by the submit operator
    df.write.partitionBy("country").parquet(txn.output_uri)
    txn.precommit()                           # seal; Airflow's commit task publishes

The data source (``write_tpc``) and readers import pyspark lazily (they are in
submodules) so the context helpers also work in a plain Python process.
"""

from __future__ import annotations

from typing import Any

from .context import JobTransaction, NoTransactionError, current_transaction
from .group_context import JobGroup, build_group_payload, current_group
from .packaging import py_files_zip
from .payload import CONF_KEY, ENV_VAR, build_payload, spark_conf_for

__all__ = [
    "CONF_KEY", "ENV_VAR", "JobGroup", "JobTransaction", "NoTransactionError",
    "build_group_payload", "build_payload", "current_group", "current_transaction",
    "py_files_zip", "read_committed", "read_uncommitted",
    "register_data_source", "spark_conf_for", "write_tpc",
]


def write_tpc(df: Any, txn: JobTransaction, **kwargs: Any) -> None:
    """See :func:`airflow_tpc.spark.datasource.write_tpc`."""
    from .datasource import write_tpc as _write_tpc

    _write_tpc(df, txn, **kwargs)


def register_data_source(spark: Any) -> None:
    """Register the ``tpc`` format with ``spark`` (idempotent)."""
    from .datasource import register_data_source as _register

    _register(spark)


def read_committed(spark: Any, target: str, **kwargs: Any) -> Any:
    """See :func:`airflow_tpc.spark.readers.read_committed`."""
    from .readers import read_committed as _read_committed

    return _read_committed(spark, target, **kwargs)


def read_uncommitted(spark: Any, target: str, **kwargs: Any) -> Any:
    """See :func:`airflow_tpc.spark.readers.read_uncommitted` (debugging only)."""
    from .readers import read_uncommitted as _read_uncommitted

    return _read_uncommitted(spark, target, **kwargs)
