"""Apply each mutant issue 32 §3 lists, run the test meant to kill it, put the code back.

    .venv/bin/python scripts/listed_mutants.py [--neighbours] [ID ...]

A mutant is one textual edit of one guard (``old`` must occur exactly once in its file).
For each: the killing tests must FAIL with the mutant in place; with ``--neighbours``
the existing modules named beside it are run too, and are expected to PASS (that is
the issue's claim: the suite before these tests did not notice).  The file is always
restored, also on Ctrl-C.  docs/mutation.md ("Listed survivors of the issue") is the
table this prints.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORE = "tests/core/test_mutants_listed.py"
TABLES = "tests/tables/test_mutants_listed_tables.py"
GROUP = "tests/core/test_mutants_listed_group.py"


@dataclass(frozen=True)
class Mutant:
    id: str
    file: str
    old: str
    new: str
    kills: tuple[str, ...]  # pytest node ids (or -k expressions after "::-k ")
    neighbours: tuple[str, ...] = ()


MUTANTS = [
    Mutant("gc-marker-guard", "airflow_tpc/core/sink_maintenance.py",
           "and SUPERSEDED not in rec.kinds and not self._marker_at_least(",
           "and False and not self._marker_at_least(",
           (f"{CORE}::test_gc_keeps_a_decided_attempts_staging_despite_a_published_record_"
            "it_never_earned",),
           ("tests/core/test_property_damage.py", "tests/core/test_dry_run.py")),
    Mutant("recover-published-claim", "airflow_tpc/core/sink_maintenance.py",
           "                rec.kinds.discard(PUBLISHED)\n", "                pass\n",
           (f"{CORE}::test_recover_publishes_a_decided_commit_whose_published_record_it_"
            "never_earned",),
           ("tests/core/test_property_damage.py",)),
    Mutant("commit-digest-conflict", "airflow_tpc/core/sink.py",
           "if expected_digest and decision.manifest_digest != expected_digest:",
           "if False:",
           (f"{CORE}::test_a_second_commit_with_another_digest_is_a_conflict_and_changes_"
            "nothing",),
           ("tests/core/test_fencing_and_races.py", "tests/core/test_commit_shortcut.py")),
    Mutant("ledger-vanished-as-created", "airflow_tpc/core/ledger.py",
           'raise LedgerError(f"{self.storage.uri(path)} vanished after a conflicting write")',
           "return True, self._parse(epoch, attempt, kind, doc)",
           (f"{CORE}::test_a_decision_that_vanished_after_a_conflicting_write_is_never_"
            "taken_as_ours",),
           ("tests/core/test_records.py", "tests/core/test_fencing_and_races.py")),
    Mutant("sync-pending-drops-unfinished", "airflow_tpc/core/ledger.py",
           "if rec is None or rec.kinds & FINISHED_KINDS:",
           "if rec is None or rec.kinds:",
           (f"{CORE}::test_recover_keeps_a_decided_unfinished_commit_in_the_pending_index",),
           ("tests/core/test_pending_index.py",)),
    Mutant("roll-forward-pending-drops-unfinished", "airflow_tpc/core/sink_finish.py",
           "(rec and rec.kinds & FINISHED_KINDS)", "rec",
           (f"{CORE}::test_a_commit_keeps_an_abort_whose_staging_removal_failed_in_the_"
            "pending_index",),
           ("tests/core/test_pending_index.py", "tests/core/test_pending_soon.py")),
    Mutant("placement-topmost-folder", "airflow_tpc/core/placement.py",
           "range(len(parts) - 1, 0, -1)", "range(len(parts) - 1, 1, -1)",
           (f"{CORE}::test_a_target_under_a_target_at_the_bucket_root_is_refused",),
           ("tests/core/test_placement.py",)),
    Mutant("tables-symlink-refusal", "airflow_tpc/tables/base.py",
           "if any(o.is_symlink for o in files):\n            raise",
           "if False:\n            raise",
           (f"{TABLES}::test_superseded_staging_that_holds_a_symlink_is_kept_and_old_"
            "versions_stay_readable",),
           ("tests/tables/test_delta.py",)),
    Mutant("proof-and-as-or", "airflow_tpc/tables/scope.py",
           "return proves(expr.left, stats) and proves(expr.right, stats)",
           "return proves(expr.left, stats) or proves(expr.right, stats)",
           (f"{TABLES}::-k and-as-or",),
           ("tests/tables/test_delta_data_columns.py", "tests/tables/test_delta_scope.py")),
    Mutant("proof-nulls-ignored", "airflow_tpc/tables/scope.py",
           "if nulls != 0 or lo is None or hi is None:", "if lo is None or hi is None:",
           (f"{TABLES}::-k nulls-ignored",),
           ("tests/tables/test_delta_data_columns.py", "tests/tables/test_delta_scope.py")),
    Mutant("proof-inclusive-upper", "airflow_tpc/tables/scope.py",
           "BoundLessThan: lambda: hi < value", "BoundLessThan: lambda: hi <= value",
           (f"{TABLES}::-k inclusive-upper",),
           ("tests/tables/test_delta_data_columns.py", "tests/tables/test_delta_scope.py")),
    Mutant("proof-in-without-equal-bounds", "airflow_tpc/tables/scope.py",
           "return lo == hi and lo in {lit.value for lit in expr.literals}",
           "return lo in {lit.value for lit in expr.literals}",
           (f"{TABLES}::-k in-without-equal-bounds",),
           ("tests/tables/test_delta_data_columns.py", "tests/tables/test_delta_scope.py")),
    Mutant("partition-check-unreadable", "airflow_tpc/tables/iceberg_partitions.py",
           'return uri, None, f"{uri}: its partition columns cannot be read ({exc})"',
           "return uri, None, None",
           (f"{TABLES}::test_a_staged_file_whose_partition_values_cannot_be_read_is_refused",),
           ("tests/tables/test_iceberg_scope.py::test_a_bucket_partitioned_table_takes_one_"
            "file_per_bucket[sql]",)),
    # Not listed by the issue: the fix found beside "nulls ignored" (NaN hides behind
    # a float column's bounds), pinned the same way.
    Mutant("proof-nan-unchecked", "airflow_tpc/tables/scope.py",
           'and stats.get("nans", {}).get(fid) != 0:', "and False:",
           (f"{TABLES}::-k nan",),
           ("tests/tables/test_delta_data_columns.py", "tests/tables/test_delta_scope.py")),
    Mutant("group-abort-members-unchecked", "airflow_tpc/group/finish.py",
           'if isinstance(begin, Begin) and begin.group is not None \\\n'
           '                    and begin.group.get("uri", "").rstrip("/") == self.uri:',
           "if isinstance(begin, Begin):",
           (f"{GROUP}::test_a_group_abort_never_aborts_a_writer_outside_the_group",),
           ("tests/core/test_groups.py",)),
    Mutant("group-published-when-any", "airflow_tpc/group/finish.py",
           "if PUBLISHED not in rec.kinds and all(a is not None and a >= attempt",
           "if PUBLISHED not in rec.kinds and any(a is not None and a >= attempt",
           (f"{GROUP}::test_the_epoch_is_not_stable_while_a_member_has_not_switched",),
           ("tests/core/test_groups.py",)),
    Mutant("group-member-digest-unchecked", "airflow_tpc/group/finish.py",
           'if not isinstance(decision, CommitDecision) \\\n'
           '            or decision.manifest_digest != doc["manifest_digest"]:',
           "if not isinstance(decision, CommitDecision):",
           (f"{GROUP}::test_a_member_decision_not_carrying_the_groups_digest_is_refused",),
           ("tests/core/test_groups.py", "tests/core/test_cli_group.py")),
    Mutant("group-commit-no-roll-forward", "airflow_tpc/group/group.py",
           "rolled = self._roll_forward_pending(skip=epoch)", "rolled = []",
           (f"{GROUP}::test_a_group_commit_rolls_an_earlier_decided_epoch_forward",),
           ("tests/core/test_groups.py", "tests/core/test_group_process_kill.py")),
    Mutant("group-cut-ignores-changed-winner", "airflow_tpc/group/maintenance.py",
           "if after.get(e) == a", "if True",
           (f"{GROUP}::test_the_cut_never_shows_an_epoch_half_old_half_new",),
           ("tests/core/test_groups.py",)),
    Mutant("group-forged-transaction", "airflow_tpc/group/group.py",
           "or begin != gtxn \\\n                or set(begin.members)",
           "or set(begin.members)",
           (f"{GROUP}::test_a_forged_group_transaction_is_refused_and_changes_nothing",),
           ("tests/core/test_groups.py", "tests/core/test_cli_group.py")),
    Mutant("group-copied-record", "airflow_tpc/core/group_records.py",
           "if kind in (BEGIN, DECISION) and (", "if False and (",
           (f"{GROUP}::test_a_copied_group_abort_decision_is_refused",),
           ("tests/core/test_groups.py",)),
    Mutant("group-copied-record-epoch", "airflow_tpc/core/group_records.py",
           'doc.get("epoch") != epoch or doc.get("attempt")', 'doc.get("attempt")',
           (f"{GROUP}::-k from_epoch",), ()),
    Mutant("group-copied-record-attempt", "airflow_tpc/core/group_records.py",
           ' or doc.get("attempt") != attempt\n', "\n",
           (f"{GROUP}::-k from_attempt",), ()),
    Mutant("group-copied-record-group", "airflow_tpc/core/group_records.py",
           'or str(doc.get("group", "")).rstrip("/") != group.rstrip("/")\n            or ',
           "or ",
           (f"{GROUP}::-k from_group",), ()),
    Mutant("group-unknown-outcome-as-abort", "airflow_tpc/core/group_records.py",
           'if doc.get("outcome") == "abort":', 'if doc.get("outcome") != "commit":',
           (f"{GROUP}::test_an_unknown_group_outcome_is_never_read_as_abort",),
           ("tests/core/test_groups.py", "tests/core/test_json_schema.py")),
]


def pytest(args: list[str]) -> int:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SPARK_LOCAL_IP": "127.0.0.1"}
    cmd = [str(ROOT / ".venv/bin/python"), "-m", "pytest", "-q", "-x", "-p",
           "no:cacheprovider", *args]
    return subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL, check=False).returncode


def node_args(node: str) -> list[str]:
    path, sep, rest = node.partition("::-k ")
    return [path, "-k", rest] if sep else [node]


def check(mutant: Mutant, neighbours: bool) -> tuple[bool, str]:
    path = ROOT / mutant.file
    original = path.read_text()
    if original.count(mutant.old) != 1:
        return False, f"guard text found {original.count(mutant.old)} times (code moved?)"
    try:
        path.write_text(original.replace(mutant.old, mutant.new))
        killed = [pytest(node_args(n)) != 0 for n in mutant.kills]
        quiet = {n: pytest([n]) == 0 for n in mutant.neighbours} if neighbours else {}
    finally:
        path.write_text(original)
    alive = [n for n, ok in quiet.items() if not ok]
    restored = [pytest(node_args(n)) == 0 for n in mutant.kills]
    ok = all(killed) and all(restored)
    note = ("killed" if all(killed) else "SURVIVES") + \
        ("" if all(restored) else "; the killing test FAILS on the real code")
    if neighbours:
        note += "; neighbours green under the mutant" if not alive else \
            f"; already killed by {', '.join(alive)}"
    return ok, note


def main(argv: list[str]) -> int:
    neighbours = "--neighbours" in argv
    wanted = [a for a in argv if not a.startswith("--")]
    groups = {m.id for m in MUTANTS}
    unknown = [w for w in wanted if w not in groups]
    if unknown:
        print(f"unknown mutant(s): {unknown}; known: {sorted(groups)}")
        return 2
    failed = 0
    for mutant in MUTANTS:
        if wanted and mutant.id not in wanted:
            continue
        ok, note = check(mutant, neighbours)
        failed += not ok
        print(f"{mutant.id:40} {mutant.file:45} {note}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
