#!/usr/bin/env bash
# Runs every benchmark and regenerates their documents in one go:
#   docs/benchmarks.md (summary with every goal, local commit, history, memory, S3, Azure)
#   and docs/bench-spark.md (Spark end to end), from bench/results/{core,s3,azure,spark}.json.
# Full: local commit vs its floor and Hadoop's FileOutputCommitter up to 100,000 files,
# 500-epoch history, S3 (moto and SeaweedFS behind 50-100 ms a request) at 1,000 and
# 10,000 files, Azure (Azurite, the same latency) at 1,000 and 10,000 files, Spark at 1M and
# 5M rows x 2 and 200 files. On 2 busy cores: core ~7 min,
# S3 at 1,000 files ~25 min (both servers, 3 reps; 10,000 files add well over an hour:
# `bench/bench_s3.py --sizes 1000` skips them), Azure at 1,000 files ~19 min (10,000 files
# add over two hours on a busy machine: Azurite stages ~15 blobs/s and slows as a
# container fills), Spark about an hour.
# --quick: up to 10,000 local files, 200 epochs, S3 and Azure at 200 files, Spark 1M x 2.
# --no-spark: the core, S3 and Azure only.
# Needs what scripts/bootstrap.sh needs (python3, Java 17).
# Nothing here fails on slowness: the benchmarks measure and report, they assert no time.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=()
spark=1
for arg in "$@"; do
  case "$arg" in
    --quick) mode=(--quick) ;;
    --no-spark) spark=0 ;;
    -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; echo "usage: $0 [--quick] [--no-spark]"
               exit 0 ;;
    *) echo "unknown option: $arg (usage: $0 [--quick] [--no-spark])" >&2; exit 2 ;;
  esac
done
bash scripts/bootstrap.sh
export SPARK_LOCAL_IP=127.0.0.1 PYSPARK_PYTHON="$PWD/.venv/bin/python"
export PATH="$PWD/.venv/bin:$PATH"
start=$(date +%s)
echo "== transaction core: bench/bench_core.py ${mode[*]:-}" >&2
.venv/bin/python bench/bench_core.py "${mode[@]}"
echo "== S3: bench/bench_s3.py ${mode[*]:-}" >&2
.venv/bin/python bench/bench_s3.py "${mode[@]}"
echo "== Azure: bench/bench_s3.py --backends azurite ${mode[*]:-}" >&2
.venv/bin/python bench/bench_s3.py --backends azurite "${mode[@]}"
if [ "$spark" = 1 ]; then
  echo "== Spark end to end: bench/bench_spark.py ${mode[*]:-}" >&2
  .venv/bin/python bench/bench_spark.py "${mode[@]}"
fi
echo "== done in $(( $(date +%s) - start )) s: docs/benchmarks.md docs/bench-spark.md" \
     "bench/results/" >&2
