#!/usr/bin/env bash
# Runs every benchmark and regenerates their documents in one go:
#   docs/benchmarks.md (summary + transaction core), docs/bench-spark.md (Spark end to end),
#   docs/img/*.svg (plots) and bench/results/*.json (every timing, for plots and summary).
# Full mode (local commit vs Hadoop's FileOutputCommitter up to 100,000 files, a 500-epoch
# history, S3 behind 50-100 ms a request at 1,000 files, 1M and 5M Spark rows written as 2 and
# as 200 files): ~15-25 min on 2 busy cores, plus roughly an hour for the 200-file Spark cases
# when the machine is as loaded as in their first run (1M x 200 files took 12 min at 3 reps).
# --quick ~6 min (up to 10,000 files, 200 epochs, S3 at 200 files, 1M rows as 2 files only).
# Needs what scripts/bootstrap.sh needs (python3, Java 17); adds the `bench` extra (matplotlib).
# Nothing here fails on slowness: the benchmarks measure and report, they assert no time.
set -euo pipefail
cd "$(dirname "$0")/.."
quick=()
spark_args=(--rows 1000000 5000000 --files 2 200)
for arg in "$@"; do
  case "$arg" in
    --quick) quick=(--quick); spark_args=(--rows 1000000 --files 2 --reps 3) ;;
    -h|--help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; echo "usage: $0 [--quick]"; exit 0 ;;
    *) echo "unknown option: $arg (usage: $0 [--quick])" >&2; exit 2 ;;
  esac
done
bash scripts/bootstrap.sh
stamp=.venv/.tpc-bench-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  .venv/bin/python -m uv pip install --quiet --python .venv/bin/python -e ".[bench]"
  touch "$stamp"
fi
export SPARK_LOCAL_IP=127.0.0.1 PYSPARK_PYTHON="$PWD/.venv/bin/python"
export PATH="$PWD/.venv/bin:$PATH"
start=$(date +%s)
echo "== 1/2 transaction core: bench/bench_core.py ${quick[*]:-}" >&2
.venv/bin/python bench/bench_core.py "${quick[@]}" >/dev/null
echo "== 2/2 Spark end to end: bench/bench_spark.py ${spark_args[*]}" >&2
.venv/bin/python bench/bench_spark.py "${spark_args[@]}"
echo "== 3/3 tables: bench/bench_tables.py ${quick[*]:-}" >&2 && nice -n 10 .venv/bin/python bench/bench_tables.py "${quick[@]}" >/dev/null
echo "== done in $(( $(date +%s) - start )) s: docs/benchmarks.md docs/bench-spark.md" \
     "docs/img/ bench/results/" >&2
