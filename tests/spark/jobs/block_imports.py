"""Make ``import airflow`` (and boto3) fail, as on a Spark cluster without them."""

from __future__ import annotations

import importlib.abc
import sys

BLOCKED = ("airflow", "boto3")


class _Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"{name} is not installed on this cluster (blocked by the test)")
        return None


def install() -> None:
    for name in list(sys.modules):
        if name.split(".")[0] in BLOCKED:
            del sys.modules[name]
    sys.meta_path.insert(0, _Blocker())
