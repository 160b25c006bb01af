"""The package's folders are its layers (docs/ARCHITECTURE.md): the protocol core and the
group coordinator import no Airflow and no Spark, few modules sit loose at the root, and
the module paths of 0.1 (``airflow_tpc.sink``, ...) still import, with a warning."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from airflow_tpc import _moved

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "airflow_tpc"


def test_at_most_eight_modules_loose_at_the_package_root():
    loose = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(loose) <= 8, loose


@pytest.mark.parametrize("old", sorted(_moved.MOVED))
def test_an_old_module_path_is_the_new_module_with_a_warning(old):
    new = importlib.import_module(f"airflow_tpc.{_moved.MOVED[old]}")
    sys.modules.pop(f"airflow_tpc.{old}", None)
    with pytest.warns(DeprecationWarning, match=rf"airflow_tpc\.{old} is now "):
        alias = importlib.import_module(f"airflow_tpc.{old}")
    assert alias is new  # one object: a monkeypatch of either is seen by both
    assert alias.__spec__.name == new.__name__  # its own spec, not the alias's
    assert not PACKAGE.joinpath(*old.split(".")).with_suffix(".py").exists()


@pytest.mark.parametrize("package", sorted(_moved.FORWARDED))
def test_a_module_that_became_a_folder_still_gives_its_names_with_a_warning(package):
    """``from airflow_tpc.airflow.hooks import TpcHook`` (0.1's path, and a trigger's
    classpath stored in the metadata DB) resolves to the class in its new module."""
    old = importlib.import_module(f"airflow_tpc.{package}")
    new = importlib.import_module(f"airflow_tpc.{_moved.FORWARDED[package]}")
    name = next(n for n, v in vars(new).items()
                if isinstance(v, type) and v.__module__ == new.__name__)
    with pytest.warns(DeprecationWarning, match=rf"airflow_tpc\.{package}\.{name} is now "):
        assert getattr(old, name) is getattr(new, name)
    with pytest.raises(AttributeError):
        old.no_such_name  # noqa: B018 (an unknown name is still an AttributeError)
    assert not PACKAGE.joinpath(*package.split(".")).with_suffix(".py").exists()


def test_the_airflow_layer_is_in_the_amazon_providers_shape():
    """Only ``__init__`` loose in ``airflow/``; each kind of Airflow part in its folder."""
    airflow = PACKAGE / "airflow"
    assert sorted(p.name for p in airflow.glob("*.py")) == ["__init__.py"]
    folders = {p.name for p in airflow.iterdir() if (p / "__init__.py").is_file()}
    assert folders == {"hooks", "operators", "sensors", "triggers", "links", "ui", "utils"}
    from airflow_tpc.provider_info import get_provider_info

    info = get_provider_info()
    for kind in ("hooks", "operators", "sensors", "triggers"):  # what Airflow lists by kind
        for module in info[kind][0]["python-modules"]:
            assert module.startswith(f"airflow_tpc.airflow.{kind}."), (kind, module)
            importlib.import_module(module)
    for link in info["extra-links"]:
        assert link.startswith("airflow_tpc.airflow.links."), link


def test_the_new_paths_import_without_a_warning():
    for new in sorted(set(_moved.MOVED.values()) | set(_moved.FORWARDED.values())):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            importlib.import_module(f"airflow_tpc.{new}")


def test_the_public_imports_stay():
    from airflow_tpc import Group, Sink
    from airflow_tpc.cli import main
    from airflow_tpc.group import Group as GroupToo

    assert GroupToo is Group and callable(main) and Sink.__module__ == "airflow_tpc.core.sink"


def test_the_core_and_the_group_layer_import_no_airflow_and_no_spark():
    """In a fresh interpreter: importing every module of core/, group/ and cli/ loads
    neither Airflow nor PySpark (the core is usable from any Python process)."""
    modules = [f"airflow_tpc.{p.parent.name}.{p.stem}" for folder in ("core", "group", "cli")
               for p in sorted((PACKAGE / folder).glob("*.py")) if p.stem != "__init__"]
    code = ("import sys, importlib\n"
            f"for m in {modules!r}: importlib.import_module(m)\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('airflow', 'pyspark'))\n"
            "print(bad)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=ROOT).stdout
    assert out.strip() == "[]", out


#: Each folder's floor: a module imports only from lower floors and its own folder.  The
#: package's ``__init__`` (``from airflow_tpc import Sink``) gathers core and group, so it
#: sits just above them.  docs/ARCHITECTURE.md draws the same floors.
FLOORS = {"errors": 0, "storage": 1, "core": 2, "group": 3, "tables": 3, "__init__": 3.5,
          "spark": 4, "cli": 4, "airflow": 5, "provider_info": 5, "__main__": 5, "_moved": 0}


def _imports_of(path: Path) -> set[str]:
    """The folder (or root module) of each airflow_tpc module ``path`` imports."""
    rel = path.relative_to(ROOT).with_suffix("").parts
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            target = [*rel[:len(rel) - node.level], *(node.module or "").split(".")]
            name = node.names[0].name
            if not node.module and (ROOT.joinpath(*target, name).is_dir()
                                    or ROOT.joinpath(*target, f"{name}.py").exists()):
                target.append(name)  # from .. import footer: a module, not a name
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("airflow_tpc"):
            target = node.module.split(".")
        else:
            continue
        target = [t for t in target if t]
        found.add(target[1] if len(target) > 1 else "__init__")
    return found


def test_imports_run_down_the_floors_only():
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).with_suffix("").parts
        here = rel[0]
        for there in _imports_of(path) - {here}:
            if there not in FLOORS or FLOORS[there] >= FLOORS[here]:
                wrong.append(f"{path.relative_to(ROOT)} imports airflow_tpc.{there}")
    assert not wrong, "\n".join(wrong)


def _module_of(dotted: list[str]) -> str | None:
    """The airflow_tpc module a dotted path names (``x.y.name``: module ``x.y``)."""
    for end in range(len(dotted), 0, -1):
        path = PACKAGE.parent.joinpath(*dotted[:end])
        if path.with_suffix(".py").exists():
            return ".".join(dotted[:end])
        if (path / "__init__.py").exists():
            return ".".join(dotted[:end]) + ".__init__"
    return None


def _module_imports(path: Path) -> set[str]:
    """Every airflow_tpc module ``path`` imports, wherever the import stands (a function's
    body, ``if TYPE_CHECKING``): a circle of imports is a circle however it is spelled."""
    here = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = here[:len(here) - node.level] if node.level else []
            names = [*base, *(node.module or "").split(".")]
            names = [n for n in names if n]
            if not names or names[0] != "airflow_tpc":
                continue
            for alias in node.names:  # `from . import x` imports module x
                found.add(_module_of([*names, alias.name]) or _module_of(names))
        elif isinstance(node, ast.Import):
            found.update(_module_of(a.name.split(".")) for a in node.names
                         if a.name.startswith("airflow_tpc"))
    me = ".".join(here)
    return {m for m in found if m and m != me}


def test_no_modules_import_each_other_in_a_circle():
    """``farm-studio look`` draws no circle: each module stands above all it imports, so a
    reader can take the modules one at a time, bottom up (docs/ARCHITECTURE.md).  A
    package's ``__init__`` that only hands names on is left out: it imports its own
    modules by design and they name it only through those names."""
    graph = {}
    for path in PACKAGE.rglob("*.py"):
        name = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if name.endswith("__init__"):
            continue
        graph[name] = {m for m in _module_imports(path) if not m.endswith("__init__")}
    circles, state = [], {}

    def visit(node: str, trail: list[str]) -> None:
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                circles.append(" -> ".join(trail[trail.index(nxt):] + [node, nxt]))
            elif nxt not in state:
                visit(nxt, [*trail, node])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [])
    assert not circles, "\n".join(circles)
