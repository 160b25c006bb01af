#!/usr/bin/env bash
# Installs everything (first run ~1 min) and runs the example pipeline end to end on
# embedded defaults: a temporary SQLite Airflow DB, local Spark, the local filesystem.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh demo   # the example's parts only: no test-only installs
export SPARK_LOCAL_IP=127.0.0.1 PYSPARK_PYTHON="$PWD/.venv/bin/python"
export PATH="$PWD/.venv/bin:$PATH"
exec .venv/bin/python scripts/demo.py "$@"
