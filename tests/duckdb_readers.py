"""DuckDB's own Iceberg and Delta readers (``iceberg_scan``, ``delta_scan``): a reader
that shares no code with pyiceberg or delta-rs, run on every table state a test checks.

DuckDB 1.5.5's extension wheels (avro, iceberg, delta, httpfs) match that DuckDB only,
so they live in their own venv, ``.venv-readers`` (``scripts/bootstrap.sh`` makes it),
and each read runs there in a subprocess: ``duckdb_rows(...)`` returns the rows sorted.
Extensions are loaded by path (a plain ``LOAD iceberg`` would try to download).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PYTHON = ROOT / ".venv-readers" / "bin" / "python"

_SCRIPT = r'''
import glob, json, sys, duckdb
req = json.load(sys.stdin)
# No progress bar: on a busy machine a scan passes its 2 s threshold, and the bar
# would be printed to stdout before the rows.
con = duckdb.connect()
con.execute("SET enable_progress_bar = false")
for name in ("avro", "iceberg", "delta", "httpfs"):
    [path] = glob.glob(f"{sys.prefix}/lib/python*/site-packages/duckdb_extension_{name}/"
                       f"extensions/v*/{name}.duckdb_extension")
    con.execute(f"LOAD '{path}'")
s3 = req.get("s3")
if s3:
    con.execute(f"""CREATE SECRET tpc (TYPE s3, KEY_ID '{s3["key"]}', SECRET '{s3["secret"]}',
                 ENDPOINT '{s3["endpoint"]}', URL_STYLE 'path', USE_SSL false,
                 REGION 'us-east-1')""")
cols = ", ".join(req["columns"])
rest = req.get("catalog")
if rest:
    # As an engine reads a table: ATTACH the REST catalog (OAuth2 client credentials),
    # then the table by name; the catalog says which metadata is current.
    con.execute(f"""CREATE SECRET ice (TYPE iceberg, CLIENT_ID '{rest["client_id"]}',
                 CLIENT_SECRET '{rest["client_secret"]}',
                 OAUTH2_SERVER_URI '{rest["oauth2_server_uri"]}')""")
    con.execute(f"""ATTACH '{rest["warehouse"]}' AS cat (TYPE iceberg, SECRET ice,
                 ENDPOINT '{rest["endpoint"]}')""")
    rows = con.execute(f"SELECT {cols} FROM cat.{rest['table']} ORDER BY ALL").fetchall()
else:
    scan = {"iceberg": "iceberg_scan", "delta": "delta_scan"}[req["format"]]
    rows = con.execute(f"SELECT {cols} FROM {scan}(?) ORDER BY ALL",
                       [req["location"]]).fetchall()
print(json.dumps(rows, default=str))
'''


def duckdb_rows(fmt: str, location: str, columns: list[str],
                s3: dict[str, str] | None = None,
                catalog: dict[str, str] | None = None) -> list[tuple[Any, ...]]:
    """The table's rows (``columns``, sorted) as DuckDB's own reader sees them.

    ``fmt``: ``iceberg`` (``location``: the metadata JSON file) or ``delta`` (the table
    folder).  ``s3``: ``{"endpoint": "127.0.0.1:port", "key", "secret"}`` for a table on
    S3.  ``catalog``: read an Iceberg table through its REST catalog instead (DuckDB's
    ``ATTACH ... (TYPE iceberg)``): ``{"endpoint", "warehouse", "client_id",
    "client_secret", "oauth2_server_uri", "table": "<namespace>.<table>"}``.  Secrets
    travel on stdin, never on a command line."""
    if not PYTHON.exists():
        raise RuntimeError(f"{PYTHON} is missing: run scripts/bootstrap.sh (it makes the "
                           "DuckDB readers' venv)")
    request = {"format": fmt, "location": location.removeprefix("file://"),
               "columns": columns, "s3": s3, "catalog": catalog}
    done = subprocess.run([str(PYTHON), "-c", _SCRIPT], input=json.dumps(request),
                          capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise AssertionError(f"DuckDB's {fmt} reader failed on {location}:\n{done.stderr}")
    return [tuple(r) for r in json.loads(done.stdout)]
