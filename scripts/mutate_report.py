"""The score of a mutmut run, per module, and the surviving mutants' diffs.

scripts/mutate.sh calls this after ``mutmut run``: mutmut's own summary is one line for
all modules, and ``mutmut results`` lists names without the change.  This reads
mutmut's per-file results (``mutants/<path>.meta``), prints one row per module
(mutants, killed, survived, timeouts, no tests, score) and writes every survivor's
diff to ``mutants/survivors.txt``, so a reader sees what the tests let through
without re-running anything.  The score counts a timeout as killed (the mutant
changed behaviour: the test did not finish) and a mutant no selected test reaches
as not killed: that is a gap in the tests too.

Usage (from the project root, after a run): python scripts/mutate_report.py [glob ...]
where each glob matches mutant names such as ``airflow_tpc.core.ledger.*``.

A sample instead of a full run (``MUTATE_SAMPLE=N scripts/mutate.sh``): ``--draw N
--seed S glob ...`` prints N mutant names drawn uniformly at random (seeded, so a run
can be repeated) from those the globs match; ``--sample FILE`` reports on exactly the
names in FILE and adds the kill rate's 95 % Wilson interval: a uniform sample of a few
hundred estimates the whole set's rate within a few points, where a full run of the
core's 8,000+ mutants takes hours on two cores.
"""

from __future__ import annotations

import fnmatch
import json
import math
import random
import sys
from collections import Counter
from pathlib import Path

#: mutmut 3.8's exit codes (mutmut/stats.py ``status_by_exit_code``), folded into the
#: columns the report prints.
STATUS = {1: "killed", 3: "killed", 37: "killed", 0: "survived", 5: "no tests",
          33: "no tests", 36: "timeout", 24: "timeout", -24: "timeout", 152: "timeout",
          255: "timeout", None: "not run"}
COLUMNS = ["killed", "survived", "timeout", "no tests", "not run", "other"]


def module_of(meta: Path, root: Path) -> str:
    """``mutants/airflow_tpc/tables/scope.py.meta`` -> ``airflow_tpc/tables/scope.py``."""
    return str(meta.relative_to(root))[: -len(".meta")]


def collect(root: Path, globs: list[str]) -> dict[str, dict[str, str]]:
    """Status of each mutant whose name matches one of *globs* (all when none), by module."""
    out: dict[str, dict[str, str]] = {}
    for meta in sorted(root.rglob("*.py.meta")):
        codes = json.loads(meta.read_text())["exit_code_by_key"]
        chosen = {name: STATUS.get(code, "other") for name, code in codes.items()
                  if not globs or any(fnmatch.fnmatch(name, g) for g in globs)}
        if chosen:
            out[module_of(meta, root)] = chosen
    return out


def score(counts: Counter) -> str:
    """Killed (timeouts included) over all mutants run or unreached; "–" when none was."""
    total = sum(counts[c] for c in COLUMNS if c != "not run")
    return f"{100.0 * (counts['killed'] + counts['timeout']) / total:.1f} %" if total else "–"


def table(results: dict[str, dict[str, str]]) -> str:
    """One row per module and a total row, as Markdown (docs/mutation.md takes it as is)."""
    head = ["module", "mutants", *COLUMNS, "score"]
    rows = [head, ["---"] * len(head)]
    total: Counter = Counter()
    for module, statuses in results.items():
        counts = Counter(statuses.values())
        total += counts
        rows.append([module, str(len(statuses)), *(str(counts[c]) for c in COLUMNS),
                     score(counts)])
    rows.append(["**total**", str(sum(total.values())), *(str(total[c]) for c in COLUMNS),
                 score(total)])
    return "\n".join("| " + " | ".join(r) + " |" for r in rows)


def survivors(results: dict[str, dict[str, str]]) -> list[str]:
    """Names of the mutants that survived or that no selected test reached."""
    return sorted(name for statuses in results.values() for name, s in statuses.items()
                  if s in ("survived", "no tests"))


def draw(root: Path, globs: list[str], n: int, seed: int) -> list[str]:
    """``n`` mutant names drawn uniformly (without replacement, seeded) from ``globs``."""
    names = sorted(name for statuses in collect(root, globs).values() for name in statuses)
    return sorted(random.Random(seed).sample(names, min(n, len(names))))


def wilson(killed: int, total: int, z: float = 1.96) -> tuple[float, float]:
    """The 95 % Wilson score interval of a proportion: honest at rates near 100 % and at
    small samples, where the normal approximation overshoots."""
    if not total:
        return (0.0, 1.0)
    p = killed / total
    centre = (p + z * z / (2 * total)) / (1 + z * z / total)
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / (1 + z * z / total)
    return (max(0.0, centre - half), min(1.0, centre + half))


def sampled(root: Path, sample: Path) -> dict[str, dict[str, str]]:
    """The results of exactly the names listed in ``sample``, by module."""
    names = set(sample.read_text().split())
    return {module: {n: s for n, s in statuses.items() if n in names}
            for module, statuses in collect(root, []).items()
            if names & statuses.keys()}


def main(argv: list[str]) -> int:
    root = Path("mutants")
    if argv[:1] == ["--draw"]:
        n, seed, globs = int(argv[1]), int(argv[3]), argv[4:]
        print("\n".join(draw(root, globs, n, seed)))
        return 0
    results = sampled(root, Path(argv[1])) if argv[:1] == ["--sample"] else collect(root, argv)
    if not results:
        print("no mutmut results under mutants/ for", argv or "any module", file=sys.stderr)
        return 1
    print(table(results))
    if argv[:1] == ["--sample"]:
        counts = Counter(s for statuses in results.values() for s in statuses.values())
        tried = sum(counts[c] for c in COLUMNS if c != "not run")
        killed = counts["killed"] + counts["timeout"]
        low, high = wilson(killed, tried)
        print(f"\nsample: {killed} of {tried} killed ({100.0 * killed / max(tried, 1):.1f} %); "
              f"95 % interval for all the modules' mutants: {100 * low:.1f}–{100 * high:.1f} %")
    # mutmut's diff helper reads its config from the project root (this directory).
    from mutmut.mutation.diff_apply import get_diff_for_mutant

    names = survivors(results)
    by_module = {n: m for m, statuses in results.items() for n in statuses}
    with open(root / "survivors.txt", "w") as out:
        for name in names:
            out.write(f"# {name}: {results[by_module[name]][name]}\n")
            out.write(get_diff_for_mutant(name, path=by_module[name]) + "\n\n")
    print(f"\n{len(names)} surviving or unreached mutants, diffs in mutants/survivors.txt")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
