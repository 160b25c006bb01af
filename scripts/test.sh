#!/usr/bin/env bash
# Installs everything (first run ~1 min) and runs the whole test suite.
# Needs only python3 (3.10+) and Java 17. Extra pytest arguments are passed through.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
export SPARK_LOCAL_IP=127.0.0.1 PYSPARK_PYTHON="$PWD/.venv/bin/python"
export PATH="$PWD/.venv/bin:$PATH"
.venv/bin/ruff check airflow_tpc tests dags bench scripts
# The 25 slowest tests close the report: what to look at when the suite grows.
exec .venv/bin/python -m pytest --durations=25 "$@"
