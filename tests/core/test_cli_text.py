"""The CLI's text output as an operator reads it (issue 33 §5): a published folder epoch
is not called "not yet promoted", reports list attempts one a line (never a Python
tuple), and recover's dry run says what each abort or cleaning would throw away."""

from __future__ import annotations

import re

from airflow_tpc import Sink
from airflow_tpc.cli import main
from airflow_tpc.core.faults import InjectedCrash, armed

from .helpers import full_tree, stage
from .test_dry_run import _messy


def _run(capsys, *argv: str) -> str:
    assert main(list(argv)) == 0
    return capsys.readouterr().out


def test_list_notes_only_a_decided_folder_commit_as_not_yet_promoted(tmp_path, capsys):
    sink = Sink(str(tmp_path / "t"), "txt")
    done, _ = stage(sink, "e1", {"a.parquet": b"A"})
    sink.commit(done)
    decided, _ = stage(sink, "e2", {"b.parquet": b"B"})
    try:
        with armed("commit.after_decision"):
            sink.commit(decided)
    except InjectedCrash:
        pass
    rows = {line.split()[0]: line for line in _run(capsys, "list", sink.target).splitlines()
            if line.startswith("e")}
    assert rows["e1"].split()[2] == "COMMITTED" and "promoted" not in rows["e1"]
    assert rows["e2"].split()[2] == "COMMITTED"
    assert rows["e2"].rstrip().endswith("not yet promoted")


def test_recover_dry_run_lists_attempts_and_what_they_would_discard(tmp_path, capsys):
    sink = Sink(str(tmp_path / "t"), "dry")
    _messy(sink)
    before = full_tree(sink)
    text = _run(capsys, "recover", sink.target, "--dry-run", "-q")
    assert full_tree(sink) == before
    assert "(" + "'" not in text and "[(" not in text, text  # no Python reprs
    lines = text.splitlines()
    assert lines[0] == "dry run: nothing was changed; recover would"
    assert lines[1:3] == ["roll forward (1):", "  epoch e6  attempt 2"]
    assert lines[3] == "abort (2):"
    assert lines[4] == "  epoch e5  attempt 1  (superseded): OPEN, would remove 1 staged " \
                       "file(s), 1 B"
    assert re.fullmatch(r"  epoch e6  attempt 1  \(superseded\): PRECOMMITTED, would discard "
                        r"its sealed output of 1 file\(s\), 1 B \(\d+ staged file\(s\), "
                        r"\d+ B in all\)", lines[5]), lines[5]
    assert lines[6] == "clean staging of (2):"
    assert re.fullmatch(r"  epoch e4  attempt 1: ABORTED, would remove \d+ staged file\(s\), "
                        r"\d+ B", lines[7]), lines[7]
    assert lines[8] == "  epoch e7  attempt 1: COMMITTED, would remove 1 staged file(s), 6 B"


def test_recover_dry_run_json_names_what_it_would_discard(tmp_path, capsys):
    import json

    sink = Sink(str(tmp_path / "t"), "dry")
    _messy(sink)
    doc = json.loads(_run(capsys, "recover", sink.target, "--dry-run", "--json", "-q"))
    discard = {(d["epoch"], d["attempt"]): d for d in doc["would_discard"]}
    assert set(discard) == {("e5", 1), ("e6", 1), ("e4", 1), ("e7", 1)}
    assert (discard[("e6", 1)]["state"], discard[("e6", 1)]["files"],
            discard[("e6", 1)]["bytes"]) == ("PRECOMMITTED", 1, 1)
    assert discard[("e7", 1)]["staging_files"] == 1  # the zombie's late file


def test_gc_and_recover_text_after_the_real_run(tmp_path, capsys):
    sink = Sink(str(tmp_path / "t"), "dry")
    _messy(sink)
    assert _run(capsys, "gc", sink.target, "--dry-run", "-q").splitlines() == [
        "dry run: nothing was changed; gc would", "remove staging of (2):",
        "  epoch e4  attempt 1", "  epoch e7  attempt 1"]
    lines = _run(capsys, "recover", sink.target, "-q").splitlines()
    assert lines[:2] == ["rolled forward (1):", "  epoch e6  attempt 2"]
    # e6's attempt 1 is aborted by the roll-forward of its attempt 2, not listed here
    assert lines[2:7] == ["aborted (1):", "  epoch e5  attempt 1  (superseded)",
                          "abandoned: none", "staging cleaned (1):", "  epoch e7  attempt 1"]
    assert _run(capsys, "gc", sink.target, "-q").strip() == "removed staging of: none"
