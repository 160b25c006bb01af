"""UI plugin: the run page, the target page and the manifest page, with an Abort action.

Served by a FastAPI app under Airflow's API server (``/airflow-tpc``) and shown inside
Airflow's UI as external views: an entry of the Plugins menu and a *Transactions* tab
of every DAG run (:data:`EXTERNAL_VIEWS`).

Plugin FastAPI routes get no authentication for free, so every route here depends
on Airflow's own auth (``GetUserDep``: the bearer JWT or the UI's ``_token`` cookie,
validated by the auth manager), and the user must be allowed to read (GET) the DAG's
runs to see a page, edit (PUT) them to abort.

State-changing requests are refused when a cross-site page could have forged them
(:mod:`airflow_tpc.airflow.ui.csrf`).  Every action and link names its transaction by
its full identity — the task that began it (or target and namespace), epoch, attempt —
and a request that does not name exactly one is refused with 400
(:mod:`airflow_tpc.airflow.ui.runs`); aborts are written to Airflow's audit log.  A group
transaction is one card and one action: its Abort aborts the group, and the single-target
abort refuses a member (:mod:`airflow_tpc.airflow.ui.groups`).

Here the plugin registers what it serves: the app (:func:`~airflow_tpc.airflow.ui.app.create_app`,
built on first use), the external views and the extra links.  The routes are
:mod:`airflow_tpc.airflow.ui.app`'s, the pages :mod:`airflow_tpc.airflow.ui.pages`'.
"""

import logging
from importlib.metadata import distributions
from typing import Any

from airflow.plugins_manager import AirflowPlugin

from airflow_tpc.airflow.links.tpc import PLUGIN_URL_PREFIX, ManifestLink, TransactionLink
from airflow_tpc.airflow.ui.app import create_app, jsonable
from airflow_tpc.airflow.ui.csrf import CSRF_HEADER, csrf_refusal, csrf_token

__all__ = ["CSRF_HEADER", "EXTERNAL_VIEWS", "AirflowTpcPlugin", "create_app", "csrf_refusal",
           "csrf_token", "installed_copies", "jsonable"]

log = logging.getLogger("airflow_tpc")


#: Where the pages appear in Airflow's UI (Airflow 3 external views, shown in an iframe):
#: the Plugins menu, and a "Transactions" tab on every DAG run ({DAG_ID}/{RUN_ID} are
#: filled in by the UI).  url_route gives each its own UI address (/plugin/<url_route>).
EXTERNAL_VIEWS: list[dict[str, Any]] = [
    {"name": "TPC transactions", "href": f"{PLUGIN_URL_PREFIX}/", "destination": "nav",
     "url_route": "airflow-tpc"},
    {"name": "Transactions", "href": f"{PLUGIN_URL_PREFIX}/run?dag_id={{DAG_ID}}"
                                     "&run_id={RUN_ID}",
     "destination": "dag_run", "url_route": "tpc-run"},
]


class AirflowTpcPlugin(AirflowPlugin):
    """Registers the transaction pages (FastAPI app + external views) and the extra links."""

    name = "airflow_tpc"
    operator_extra_links = [ManifestLink(), TransactionLink()]
    external_views = EXTERNAL_VIEWS

    @classmethod
    def on_load(cls, *args: Any, **kwargs: Any) -> None:
        """Say so when the plugin is installed twice.  Airflow 3.3.2's task-side plugin
        loader stops at a plugin it has already registered and never loads the ones
        after it: the OpenLineage provider's listener among them, so task lineage
        stops without an error in the task's log."""
        copies = installed_copies()
        if len(copies) > 1:
            log.warning("airflow-tpc's Airflow plugin is installed %d times (%s): Airflow may "
                        "skip the plugins loaded after the second copy (the OpenLineage "
                        "listener's task events among them). Keep one copy: uninstall the "
                        "other, or take its folder (holding an *.egg-info) off PYTHONPATH",
                        len(copies), ", ".join(copies))

    @property
    def fastapi_apps(self) -> list[dict[str, Any]]:  # type: ignore[override]
        """Built on first use only: workers and the scheduler never import FastAPI for it."""
        if not _APPS:
            _APPS.append({"app": create_app(), "url_prefix": PLUGIN_URL_PREFIX,
                          "name": "airflow-tpc transactions"})
        return _APPS


_APPS: list[dict[str, Any]] = []


def installed_copies() -> list[str]:
    """Where each installed distribution that declares this plugin lives (one normally).

    Every distribution on ``sys.path``, as Airflow's plugin loader enumerates them
    (``importlib.metadata.entry_points`` would show the first copy only)."""
    value = f"{__name__}:{AirflowTpcPlugin.__name__}"
    return [str(dist.locate_file("")) for dist in distributions()
            if any(p.group == "airflow.plugins" and p.value == value for p in dist.entry_points)]
