"""Named crash points for fault-injection tests.

The protocol calls :func:`crashpoint` between its steps.  In production nothing is
armed and the call is a dictionary lookup.  Tests arm a point with an action —
raise an exception (a crash), or block (so another process can SIGKILL us at a
known step).  Points can also be armed from the environment
(``AIRFLOW_TPC_CRASH_AT=commit.after_decision``) so a separate process — a task
run by Airflow — can be made to die at an exact step.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

ENV_VAR = "AIRFLOW_TPC_CRASH_AT"
PAUSE_ENV_VAR = "AIRFLOW_TPC_PAUSE_AT"

_armed: dict[str, Callable[[str], None]] = {}
_seen: list[str] = []


class InjectedCrash(RuntimeError):
    """Raised by an armed crash point: stands for the process dying at that step."""


def crashpoint(name: str) -> None:
    """Mark a protocol step boundary; fires the action armed for ``name``, if any."""
    _seen.append(name)
    if len(_seen) > 10_000:
        del _seen[:5_000]
    action = _armed.get(name)
    if action is not None:
        action(name)
        return
    if os.environ.get(ENV_VAR) == name:
        # Die the way a killed process does: no cleanup, no exception handlers.
        os._exit(137)
    if os.environ.get(PAUSE_ENV_VAR) == name:
        flag = os.environ.get("AIRFLOW_TPC_PAUSE_FLAG")
        if flag:
            with open(flag, "w") as fh:
                fh.write(str(os.getpid()))
        time.sleep(3600)


def _raise(name: str) -> None:
    raise InjectedCrash(f"injected crash at {name}")


@contextmanager
def armed(name: str, action: Callable[[str], None] = _raise) -> Iterator[None]:
    """Arm ``name`` for the duration of the block (default action: raise InjectedCrash)."""
    _armed[name] = action
    try:
        yield
    finally:
        _armed.pop(name, None)


def seen() -> list[str]:
    """Crash points passed so far in this process (to enumerate the protocol's steps)."""
    return list(_seen)


def reset() -> None:
    _armed.clear()
    _seen.clear()


@contextmanager
def crash_at(points: list[str], k: int) -> Iterator[None]:
    """Crash (raise InjectedCrash) at the k-th crash point passed among ``points``,
    counting every occurrence of every name: a test records the points one run passes
    (:func:`seen`), then crashes a fresh run at each of them in turn."""
    passed = [0]

    def action(name: str) -> None:
        passed[0] += 1
        if passed[0] == k:
            raise InjectedCrash(f"injected crash at step {k}: {name}")

    for name in set(points):
        _armed[name] = action
    try:
        yield
    finally:
        for name in set(points):
            _armed.pop(name, None)
