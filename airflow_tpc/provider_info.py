"""Provider metadata for Airflow's providers manager (entry point ``apache_airflow_provider``).

Kept import-free (no Airflow, no pyspark): the providers manager calls this while
Airflow's own configuration is still being initialised.
"""

from __future__ import annotations

from typing import Any


def get_provider_info() -> dict[str, Any]:
    from airflow_tpc import __version__

    return {
        # Must equal the normalised distribution name or `airflow providers list` fails.
        "package-name": "airflow-tpc",
        "name": "airflow-tpc (exactly-once Spark output)",
        "description": "Exactly-once output for Spark batch pipelines: a two-phase commit per "
                       "epoch (begin, pre-commit, commit/abort) with Airflow operators.",
        "versions": [__version__],
        "integrations": [{
            "integration-name": "airflow-tpc",
            "external-doc-url": "https://github.com/airflow-tpc/airflow-tpc",
            "tags": ["software"],
        }],
        "operators": [{
            "integration-name": "airflow-tpc",
            "python-modules": ["airflow_tpc.airflow.operators.tpc",
                               "airflow_tpc.airflow.operators.submit",
                               "airflow_tpc.airflow.operators.group"],
        }],
        "sensors": [{
            "integration-name": "airflow-tpc",
            "python-modules": ["airflow_tpc.airflow.sensors.tpc",
                               "airflow_tpc.airflow.sensors.group"],
        }],
        "triggers": [{
            "integration-name": "airflow-tpc",
            "python-modules": ["airflow_tpc.airflow.triggers.tpc",
                               "airflow_tpc.airflow.triggers.group"],
        }],
        "hooks": [{
            "integration-name": "airflow-tpc",
            "python-modules": ["airflow_tpc.airflow.hooks.tpc", "airflow_tpc.airflow.hooks.base",
                               "airflow_tpc.airflow.hooks.catalog"],
        }],
        # The catalog connection of table targets, declared here (Airflow 3.2+ reads the
        # form from provider info; no hook method, no wtforms import).
        "connection-types": [{
            "hook-class-name": "airflow_tpc.airflow.hooks.catalog.IcebergCatalogHook",
            "hook-name": "Iceberg catalog (airflow-tpc)",
            "connection-type": "iceberg_catalog",
            "ui-field-behaviour": {
                "hidden-fields": [],
                "relabeling": {"host": "Catalog URI", "schema": "Warehouse",
                               "login": "Client id (REST) / access key id (Glue)",
                               "password": "Client secret or token (REST) / secret key (Glue)",
                               "extra": "pyiceberg catalog properties (JSON); Glue: "
                                        "\"tpc.aws-conn-id\" names an aws connection for "
                                        "its keys, role and region"},
                "placeholders": {
                    "host": "https://catalog.example.com/api/catalog or sqlite:////data/cat.db",
                    "schema": "s3://lake/warehouse or file:///data/warehouse",
                    "extra": '{"type": "rest", "s3.endpoint": "https://s3.eu-west-1.amazonaws.com"}',
                },
            },
        }],
        "extra-links": [
            "airflow_tpc.airflow.links.tpc.ManifestLink",
            "airflow_tpc.airflow.links.tpc.TransactionLink",
        ],
        "plugins": [{
            "name": "airflow_tpc",
            "plugin-class": "airflow_tpc.airflow.ui.plugin.AirflowTpcPlugin",
        }],
    }
