"""Run chosen tests against chosen mutmut mutants, all in one process.

mutmut 3's trampolines read ``MUTANT_UNDER_TEST`` at every call, so one Python process
can run a test file once unmutated (it must pass) and then once per mutant, without
paying the interpreter's and the table libraries' start-up for each: the way this
branch checked its kills on a loaded machine (docs/mutation.md, "Run of the group
modules").  A mutant is "killed" when the tests fail under it (pytest exit 1).

Usage, from ``mutants/`` after a ``scripts/mutate.sh`` (copy new test files into
``mutants/tests/`` first; mutmut copies them only when it runs):

    PYTHONPATH=$PWD python ../scripts/mutants_by_hand.py OUT.tsv TEST... -- MUTANT...

Appends ``name<TAB>killed|survived|<exit code><TAB>seconds`` lines to OUT.tsv; the first
line is the unmutated run (``UNMUTATED<TAB>0`` when the tests pass).
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import time

import pytest


def run(name: str, tests: list[str]) -> int:
    """The tests' pytest exit code with mutant ``name`` active ("" = none)."""
    os.environ["MUTANT_UNDER_TEST"] = name
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        return int(pytest.main(["-q", "-x", "-p", "no:cacheprovider", *tests]))


def main(argv: list[str]) -> int:
    if "--" not in argv or len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    out, rest = argv[0], argv[1:]
    cut = rest.index("--")
    tests, mutants = rest[:cut], rest[cut + 1:]
    with open(out, "a") as f:
        for name in ["", *mutants]:
            start = time.time()
            code = run(name, tests)
            verdict = str(code) if not name else \
                {0: "survived", 1: "killed"}.get(code, str(code))
            f.write(f"{name or 'UNMUTATED'}\t{verdict}\t{time.time() - start:.1f}s\n")
            f.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
