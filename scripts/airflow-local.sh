#!/usr/bin/env bash
# Real Airflow services (api-server, scheduler, dag-processor, triggerer) on the embedded
# defaults -- SQLite, LocalExecutor, local Spark, 127.0.0.1 -- and a backfill through them.
#
#   scripts/airflow-local.sh start                       # migrate, start, wait until healthy
#   scripts/airflow-local.sh backfill tpc_daily_events 2026-11-01 2026-11-03 [--max-active-runs 2]
#   scripts/airflow-local.sh status | logs [SERVICE] | stop
#
# AIRFLOW_HOME defaults to ./.airflow-local; see docs/scheduler.md and scripts/airflow_local.py.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || bash scripts/bootstrap.sh
export PATH="$PWD/.venv/bin:$PATH"
exec .venv/bin/python scripts/airflow_local.py "$@"
