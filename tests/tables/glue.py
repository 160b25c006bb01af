"""AWS Glue Data Catalog fixtures: pyiceberg's own GlueCatalog on moto's Glue, served by
the session's moto server (the same endpoint as its S3), the warehouse in a moto bucket.

moto keeps its Glue databases for the whole session (one server); each test's databases
are dropped when it ends, so the fixed table name the shared scenarios use is free again.
"""

from __future__ import annotations

import boto3
import pytest


def glue_catalog_properties(s3_options: dict, bucket: str) -> dict[str, str]:
    """pyiceberg properties of a GlueCatalog on moto: Glue and S3 on one endpoint."""
    endpoint, key, secret = (s3_options["endpoint_url"], s3_options["key"],
                             s3_options["secret"])
    return {"type": "glue", "glue.endpoint": endpoint, "glue.region": "us-east-1",
            "glue.access-key-id": key, "glue.secret-access-key": secret,
            "warehouse": f"s3://{bucket}/warehouse",
            "s3.endpoint": endpoint, "s3.access-key-id": key, "s3.secret-access-key": secret,
            "s3.region": "us-east-1"}


def drop_glue_databases(s3_options: dict) -> None:
    """Drop every Glue database (and its tables) moto holds: a test's own leftovers."""
    glue = boto3.client("glue", endpoint_url=s3_options["endpoint_url"],
                        aws_access_key_id=s3_options["key"],
                        aws_secret_access_key=s3_options["secret"], region_name="us-east-1")
    for db in glue.get_databases()["DatabaseList"]:
        for table in glue.get_tables(DatabaseName=db["Name"])["TableList"]:
            glue.delete_table(DatabaseName=db["Name"], Name=table["Name"])
        glue.delete_database(Name=db["Name"])


@pytest.fixture()
def glue_props(s3_options, s3_bucket):
    """A Glue catalog on moto for one test; its databases are dropped afterwards."""
    yield glue_catalog_properties(s3_options, s3_bucket)
    drop_glue_databases(s3_options)
