#!/usr/bin/env bash
# Creates .venv with what airflow-tpc needs (idempotent).  Needs only python3 (3.10+)
# and Java 17 on the machine.
#
#   scripts/bootstrap.sh demo   the example's parts only: the package with its spark,
#                               airflow and tables extras (~30 s the first time)
#   scripts/bootstrap.sh        everything the tests need besides (the dev extra, the OS's
#                               Chromium, PostgreSQL and Redis, DuckDB's readers)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
mode=${1:-test}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
extras=dev
[ "$mode" = demo ] && extras="all,tables"
stamp=.venv/.tpc-installed-${extras/,/-}
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  .venv/bin/python -m pip install --quiet --disable-pip-version-check uv
  .venv/bin/python -m uv pip install --quiet --python .venv/bin/python -e ".[$extras]"
  touch "$stamp"
fi
[ "$mode" = demo ] && exit 0
# Test-only parts from the OS, installed when missing and we may (root): Chromium for the
# browser tests (tests/airflow/test_run_page.py), PostgreSQL and Redis for production
# Airflow (scripts/airflow-local.sh start --celery, tests/airflow/test_production_airflow.py),
# Node.js and npm for Azurite (the Azure tests).
# Without them those tests fail with a clear message.  The demo never needs them.
need=()
command -v chromium >/dev/null 2>&1 || need+=(chromium)
compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || need+=(postgresql)
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v npm >/dev/null 2>&1 || need+=(nodejs npm)  # Azurite, below
if [ ${#need[@]} -gt 0 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"
fi
# Azurite, Azure Storage's emulator, for the Azure tests (tests/azurite.py): from npm into
# a project-local, git-ignored folder, once.  Needs Node 18+ and npm (Debian: nodejs npm).
azurite=.tools/azurite
if [ ! -x "$azurite/node_modules/.bin/azurite-blob" ]; then
  if command -v npm >/dev/null 2>&1; then
    mkdir -p "$azurite"
    (cd "$azurite" && npm install --no-audit --no-fund --silent azurite@3.37.0)
  else
    echo "bootstrap: npm is missing, so the Azure tests cannot start Azurite" \
      "(apt-get install nodejs npm)" >&2
  fi
fi
# DuckDB's own Iceberg and Delta readers, for the tests that read every table state with
# them (tests/duckdb_readers.py): DuckDB 1.5.5 and its extension wheels, which match that
# version only, live in their own venv (the project's DuckDB is 2.x).
readers=.venv-readers
readers_stamp=$readers/.tpc-installed-1
if [ ! -f "$readers_stamp" ]; then
  "$PY" -m venv "$readers"
  .venv/bin/python -m uv pip install --quiet --python "$readers/bin/python" duckdb==1.5.5 \
    duckdb-extension-avro==1.5.5 duckdb-extension-iceberg==1.5.5 \
    duckdb-extension-delta==1.5.5 duckdb-extension-httpfs==1.5.5
  touch "$readers_stamp"
fi
