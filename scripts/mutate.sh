#!/usr/bin/env bash
# Mutation testing of the protocol core (issue 32 §3; docs/mutation.md): mutmut 3 over
# the modules named, against the fast local core tests ([tool.mutmut] in pyproject.toml).
# Not part of .ci/run: a full run takes tens of minutes of CPU.
#
#   scripts/mutate.sh                  the modules that guard data (ledger, records, sink*,
#                                      marker, promote, placement, group*)
#   scripts/mutate.sh all              every module in [tool.mutmut] only_mutate
#   scripts/mutate.sh ledger 'sink*' tables/scope    the modules named (globs allowed)
#   MUTATE_SAMPLE=400 scripts/mutate.sh all          a uniform random sample of 400 of
#                                      those modules' mutants (MUTATE_SEED, default 1):
#                                      the kill rate with a 95 % interval, in the time a
#                                      full run (8,000+ mutants, hours on 2 cores) cannot
#
# Prints the score per module and writes each surviving mutant's diff to
# mutants/survivors.txt.  Results are cached in mutants/ (gitignored): a later run
# re-tests only functions whose code changed, and new tests rerun mutmut's stats for
# those tests alone; `rm -rf mutants` starts afresh.  MUTATE_JOBS (default 2) sets the
# worker processes; they run under nice -n 10, the machine is shared.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/mutmut ] || { echo "mutmut is not installed: pip install -e '.[dev]'" >&2; exit 2; }

DATA=(ledger records 'sink*' marker promote placement 'group*' 'group/*' member_guard)
ALL=("${DATA[@]}" 'manifest*' layout tables/scope tables/delta_scope tables/iceberg_partitions)
if [ $# -eq 0 ]; then set -- "${DATA[@]}"; elif [ "$1" = all ]; then set -- "${ALL[@]}"; fi

globs=()
for m in "$@"; do
    m=${m#airflow_tpc/}; m=${m%.py}
    # A bare name (ledger, 'sink*', 'group*') is looked for in the core and group folders
    # too: the modules moved there from the package root (docs/ARCHITECTURE.md).
    found=0
    for p in "" core/ group/; do
        if compgen -G "airflow_tpc/$p$m.py" > /dev/null; then
            globs+=("airflow_tpc.${p//\//.}${m//\//.}.*"); found=1
        fi
    done
    [ $found = 1 ] || { echo "no module airflow_tpc/[core/|group/]$m.py" >&2; exit 2; }
done

export SPARK_LOCAL_IP=127.0.0.1 PYSPARK_PYTHON="$PWD/.venv/bin/python"
export PATH="$PWD/.venv/bin:$PATH"
# Tests that start a child Python (the CLI's) must import the mutated copy, not the
# editable install; MUTANT_UNDER_TEST reaches the child through the environment.
export PYTHONPATH="$PWD/mutants"
start=$(date +%s)
# --max-children: mutmut forks one worker per mutant, this many at a time.
mkdir -p mutants
# tests/duckdb_readers.py runs DuckDB's readers from <project>/.venv-readers, and the
# tests run inside mutants/.
[ -e .venv-readers ] && ln -sfn "$(readlink -f .venv-readers)" mutants/.venv-readers
if [ -n "${MUTATE_SAMPLE:-}" ]; then
    # 1. Generate every mutant and collect mutmut's stats (which tests reach which
    #    function), running no mutant: a name that matches none stops mutmut there.
    nice -n 10 .venv/bin/mutmut run --max-children "${MUTATE_JOBS:-2}" \
        'airflow_tpc.__no_mutant__*' > mutants/stats.log 2>&1 || true
    grep -q "nothing matches" mutants/stats.log \
        || { tail -n 30 mutants/stats.log >&2; echo "mutmut's stats run failed" >&2; exit 1; }
    # 2. Draw the sample from the modules asked for, then run exactly those mutants.
    .venv/bin/python scripts/mutate_report.py --draw "$MUTATE_SAMPLE" \
        --seed "${MUTATE_SEED:-1}" "${globs[@]}" > mutants/sample.txt
    mapfile -t globs < mutants/sample.txt
fi
nice -n 10 .venv/bin/mutmut run --max-children "${MUTATE_JOBS:-2}" "${globs[@]}" 2>&1 \
    | tee mutants/run.log | tail -n 25
echo "mutmut took $(( $(date +%s) - start )) s at $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- airflow_tpc || echo ' (+ uncommitted changes)')"
if [ -n "${MUTATE_SAMPLE:-}" ]; then
    .venv/bin/python scripts/mutate_report.py --sample mutants/sample.txt
else
    .venv/bin/python scripts/mutate_report.py "${globs[@]}"
fi
