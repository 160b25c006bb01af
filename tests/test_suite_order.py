"""tests/conftest.py's SLOW_MODULES name modules that exist (a renamed module would
silently drop back to the end of the run and make its tail)."""

from pathlib import Path

from .conftest import SLOW_MODULES

REPO = Path(__file__).resolve().parent.parent


def test_every_slow_module_exists_once():
    assert [m for m in SLOW_MODULES if not (REPO / m).is_file()] == []
    assert len(set(SLOW_MODULES)) == len(SLOW_MODULES)
