"""Sensors: :mod:`.tpc` (one target's pre-commit) and :mod:`.group` (a group's).

``airflow_tpc.airflow.sensors`` was a module before this folder; its names still resolve
(with a warning) through :func:`airflow_tpc._moved.forwarder`.
"""

from airflow_tpc._moved import forwarder

__getattr__ = forwarder(__name__)
