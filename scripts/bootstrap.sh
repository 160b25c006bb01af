#!/usr/bin/env bash
# Creates .venv with everything airflow-tpc needs (idempotent; ~30-60 s the first time).
# Needs only python3.11 and Java 17 on the machine.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.tpc-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  .venv/bin/python -m pip install --quiet --disable-pip-version-check uv
  .venv/bin/python -m uv pip install --quiet --python .venv/bin/python -e ".[dev]"
  touch "$stamp"
fi
