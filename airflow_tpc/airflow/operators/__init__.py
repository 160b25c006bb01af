"""Operators: :mod:`.base` (the sink arguments declared once), :mod:`.submit` (the
staged spark-submit), :mod:`.tpc` (commit and abort), :mod:`.group_base` and
:mod:`.group` (the group variants).

``airflow_tpc.airflow.operators`` was a module before this folder; its names still resolve
(with a warning) through :func:`airflow_tpc._moved.forwarder`.
"""

from airflow_tpc._moved import forwarder

__getattr__ = forwarder(__name__)
