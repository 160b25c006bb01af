"""The module paths of releases before the core/, group/ and cli/ folders (0.1.x), and
of the flat Airflow layer before its hooks/, operators/, sensors/, triggers/, links/ and
utils/ folders, still import, with a :class:`DeprecationWarning` naming the new path.

A user's DAG or script may import ``airflow_tpc.core.sink`` or ``airflow_tpc.core.manifest``
directly; breaking it on upgrade for a tidier tree would be the wrong trade.  The old
name is an alias of the new module (the same object, so monkeypatching either is one
patch), installed on first import of the old name by a meta-path finder.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

_CORE = ("faults", "footer", "group_orphans", "group_records", "health", "layout", "ledger",
         "manifest", "manifest_codec", "marker", "member_guard", "placement", "promote",
         "records", "schema_parts", "schemas", "sink", "sink_claim", "sink_finish",
         "sink_maintenance", "sink_queries", "sink_trust", "staging", "transaction", "units")
#: old module under ``airflow_tpc`` -> its new dotted path under ``airflow_tpc``
MOVED: dict[str, str] = {
    **{name: f"core.{name}" for name in _CORE},
    "group_claim": "group.claim", "group_cut": "group.cut", "group_finish": "group.finish",
    "group_maintenance": "group.maintenance",
    "cli_common": "cli.common", "cli_group": "cli.group",
    "cli_group_status": "cli.group_status",
    # The Airflow layer in the Amazon provider's shape (docs/ARCHITECTURE.md).
    "airflow.base_hook": "airflow.hooks.base", "airflow.catalog_hook": "airflow.hooks.catalog",
    "airflow.credentials": "airflow.hooks.credentials",
    "airflow.azure_credentials": "airflow.hooks.azure_credentials",
    "airflow.job_credentials": "airflow.hooks.job_credentials",
    "airflow.base": "airflow.operators.base", "airflow.submit": "airflow.operators.submit",
    "airflow.groups": "airflow.operators.group",
    "airflow.group_base": "airflow.operators.group_base",
    "airflow.group_sensor": "airflow.sensors.group", "airflow.plugin": "airflow.ui.plugin",
    **{f"airflow.{name}": f"airflow.utils.{name}" for name in (
        "admin", "app_guard", "lineage", "lineage_abort", "metrics", "spark_app",
        "task_group", "task_policy")},
}
#: a module that became a package of the same name -> the module now holding its names.
#: ``airflow_tpc.airflow.hooks.TpcHook`` (an import in a DAG, a trigger's classpath stored
#: in the metadata DB) still resolves, through the package's :func:`forwarder`.
FORWARDED: dict[str, str] = {
    "airflow.hooks": "airflow.hooks.tpc", "airflow.operators": "airflow.operators.tpc",
    "airflow.sensors": "airflow.sensors.tpc", "airflow.triggers": "airflow.triggers.tpc",
    "airflow.links": "airflow.links.tpc",
}
_PREFIX = "airflow_tpc."


class _MovedFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds ``airflow_tpc.<old>`` and loads it as the module at its new path."""

    def __init__(self) -> None:
        self._specs: dict[str, importlib.machinery.ModuleSpec] = {}

    def find_spec(self, fullname: str, path: object = None,
                  target: object = None) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith(_PREFIX) or fullname[len(_PREFIX):] not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        new = _PREFIX + MOVED[spec.name[len(_PREFIX):]]
        warnings.warn(f"{spec.name} is now {new}: import it from there (the old path "
                      "will be removed in a later release)", DeprecationWarning, stacklevel=2)
        module = importlib.import_module(new)
        self._specs[spec.name] = module.__spec__  # module_from_spec overwrites it
        return module

    def exec_module(self, module: ModuleType) -> None:
        real = self._specs.pop(module.__spec__.name)  # the alias spec, set by import
        module.__spec__, module.__loader__ = real, real.loader


def install() -> None:
    """Put the finder on ``sys.meta_path`` once (from ``airflow_tpc/__init__``)."""
    if not any(isinstance(f, _MovedFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _MovedFinder())  # before an editable install's finder


def forwarder(package: str) -> Callable[[str], object]:
    """The module ``__getattr__`` of ``package``, a folder that replaced a module of the same
    name: a name the old module had resolves in its new module, with a warning.

    A submodule's name is never forwarded (``from package import tpc`` asks the package
    for ``tpc`` before importing it), so the folder's own modules import as usual.
    """
    new = _PREFIX + FORWARDED[package[len(_PREFIX):]]

    def __getattr__(name: str) -> object:
        folder = Path(sys.modules[package].__file__).parent
        if name.startswith("__") or (folder / f"{name}.py").exists():
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(new), name, _MISSING)
        if value is _MISSING:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        warnings.warn(f"{package}.{name} is now {new}.{name}: import it from there (the old "
                      "path will be removed in a later release)", DeprecationWarning,
                      stacklevel=2)
        return value

    return __getattr__


_MISSING = object()
