#!/usr/bin/env bash
# Installs everything (first run ~1 min) and runs the whole test suite.
# Needs only python3 (3.10+) and Java 17. Extra pytest arguments are passed through.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
export SPARK_LOCAL_IP=127.0.0.1 PYSPARK_PYTHON="$PWD/.venv/bin/python"
export PATH="$PWD/.venv/bin:$PATH"
.venv/bin/ruff check airflow_tpc tests dags bench scripts
# Two worker processes (pytest-xdist; TPC_TEST_WORKERS=0 runs the tests in this one):
# much of the suite waits on real services (Airflow's scheduler, Spark's JVM, S3
# latency), so two workers keep both cores busy.  --dist loadfile keeps each module on
# one worker, so a module's services still start once; each worker is its own session.
# The 25 slowest tests close the report: what to look at when the suite grows.
exec .venv/bin/python -m pytest --durations=25 -n "${TPC_TEST_WORKERS:-2}" --dist loadfile "$@"
