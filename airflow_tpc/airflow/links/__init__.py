"""Extra links: :mod:`.tpc` (the published manifest, the run's transaction page).

``airflow_tpc.airflow.links`` was a module before this folder; its names still resolve
(with a warning) through :func:`airflow_tpc._moved.forwarder`.
"""

from airflow_tpc._moved import forwarder

__getattr__ = forwarder(__name__)
