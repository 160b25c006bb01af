"""Airflow's simple auth manager with one user limited to some DAGs, for the UI tests.

The simple auth manager gives every user its role on every DAG; per-DAG access (what
FAB or Keycloak deployments configure) is what the plugin's listings must honour, so
the API server of tests/airflow/test_run_page.py runs this subclass: user ``limited``
(a viewer) may read the DAGs in ``AIRFLOW_TPC_TEST_LIMITED_DAGS`` (comma-separated) and
no other; everyone else is as the simple auth manager says.  It is Airflow's own
extension point (``[core] auth_manager``), exercised through the real api-server.
"""

from __future__ import annotations

import os
from typing import Any

from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager

LIMITED_USER = "limited"


class PerDagAuthManager(SimpleAuthManager):
    """User ``limited`` reads only the DAGs ``AIRFLOW_TPC_TEST_LIMITED_DAGS`` names."""

    def is_authorized_dag(self, *, method: Any, user: Any, access_entity: Any = None,
                          details: Any = None) -> bool:
        allowed = super().is_authorized_dag(method=method, user=user,
                                            access_entity=access_entity, details=details)
        if not allowed or user.get_name() != LIMITED_USER or details is None \
                or details.id is None:
            return allowed
        return details.id in os.environ.get("AIRFLOW_TPC_TEST_LIMITED_DAGS", "").split(",")
