"""Opening an Iceberg catalog, and making a namespace in it, safely when several first
runs do it at the same moment.

A brand-new embedded catalog (pyiceberg's SQL catalog on SQLite) creates its own tables
on first open: "does ``iceberg_tables`` exist? no: CREATE TABLE".  Two processes doing
that together make one of them fail with ``table iceberg_tables already exists`` (seen
when a fresh install's first backfill started three runs at once); creating a namespace
has the same check-then-insert race (a unique-constraint failure), and SQLite answers
``database is locked`` to a writer that waited past its busy timeout.  Each of these
means "another process is creating the same thing right now": the call is retried, a
bounded number of times, and a namespace that exists afterwards is as good as one we
made.  Any other error (a wrong URI, a refused credential) fails at once, unchanged.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog

log = logging.getLogger("airflow_tpc")

T = TypeVar("T")

#: What a catalog's client says when it lost a creation race to a concurrent creator.
RACE_MESSAGES = ("already exists", "database is locked", "unique constraint failed",
                 "duplicate key value")
#: Tries of one call that keeps losing such races (the last one's error is raised).
RACE_TRIES = 8


def lost_creation_race(exc: BaseException) -> bool:
    """True when ``exc`` says another process created the same catalog table, namespace
    row or lock holder at the same moment (a retry then finds it made)."""
    text = str(exc).lower()
    return any(m in text for m in RACE_MESSAGES)


def retry_creation_races(what: str, fn: Callable[[], T], tries: int = RACE_TRIES) -> T:
    """``fn()``, tried again (with a short randomized backoff) while it loses a creation
    race; any other error, or the last try's, is raised as it is."""
    for attempt in range(1, tries + 1):
        try:
            return fn()
        except Exception as exc:
            if attempt == tries or not lost_creation_race(exc):
                raise
            delay = min(2.0, 0.05 * 2 ** attempt) * (0.5 + random.random())
            log.info("%s lost a creation race to a concurrent first run (%s); retrying in "
                     "%.2f s", what, type(exc).__name__, delay)
            time.sleep(delay)
    raise AssertionError("unreachable")  # pragma: no cover


def open_catalog(name: str, properties: dict[str, Any]) -> Catalog:
    """``pyiceberg.catalog.load_catalog(name, **properties)``, safe when several processes
    open a catalog that does not exist yet at the same moment."""
    from pyiceberg.catalog import load_catalog

    return retry_creation_races(f"opening Iceberg catalog {name!r}",
                                lambda: load_catalog(name, **properties))


def ensure_namespace(catalog: Catalog, namespace: tuple[str, ...]) -> None:
    """Create ``namespace`` unless it exists; a concurrent creator's namespace counts."""
    def create() -> None:
        try:
            catalog.create_namespace_if_not_exists(namespace)
        except Exception:
            if not catalog.namespace_exists(namespace):
                raise

    retry_creation_races(f"creating namespace {'.'.join(namespace)!r}", create)
