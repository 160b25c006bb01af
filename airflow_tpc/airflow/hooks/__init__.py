"""Hooks: :mod:`.tpc` (``TpcHook``, the sink's queries), :mod:`.base` (building the
sink from connections), :mod:`.catalog` (the catalog connection), :mod:`.credentials`,
:mod:`.azure_credentials` and :mod:`.job_credentials` (storage secrets, and how they
reach spark-submit).

``airflow_tpc.airflow.hooks`` was a module before this folder; its names still resolve
(with a warning) through :func:`airflow_tpc._moved.forwarder`.
"""

from airflow_tpc._moved import forwarder

__getattr__ = forwarder(__name__)
