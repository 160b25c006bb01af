"""Reads started ahead of time: one verb's independent reads side by side.

A table commit's reads before its decision — its begin record, the epoch's ledger
listing, the sealed manifest and table statistics, the staging listing — depend on
nothing but the transaction, yet the verbs make them one after another.  Behind
50-100 ms of object-store latency each is a round trip on the commit's sequential
path.  :func:`reading_ahead` starts them together; the code then runs exactly as
before and each of its reads is served from the one started ahead.

The rule that keeps this exact: a read started ahead is served **once**, to the first
identical read (the same path, or a listing of the same prefix), and only while the
store has not been written through this storage since it was started — the first
write (a put, a conditional put, a delete, a copy) drops every read ahead not yet
served, and every later read goes to the store.  So a read served ahead returns what
the same read would have returned had the code issued it at the moment it was
started, with none of this process's writes in between: a schedule the sequential
code could have had (a foreign writer may land on either side of any read anyway).
A read ahead that failed is not served: the reader reads again, as it would have.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

#: A commit starts a handful of reads ahead (six for a table commit).
AHEAD_THREADS = 8
#: ``serve`` found nothing to serve: the caller reads the store.
MISS = object()

_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def ahead_pool() -> ThreadPoolExecutor:
    """One small pool for the process (idle threads of per-verb pools would pile up in
    a long-lived worker)."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(AHEAD_THREADS, thread_name_prefix="tpc-ahead")
        return _POOL


def _key(kind: str, path: str) -> tuple[str, str]:
    return (kind, path.rstrip("/") if kind == "list" else path)


class ReadAhead:
    """Reads under way or done, each served at most once (see the module)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: dict[tuple[str, str], Future[Any]] = {}

    def start(self, kind: str, path: str, read: Callable[[], Any]) -> Future[Any]:
        fut = ahead_pool().submit(read)
        with self._lock:
            self._pending.setdefault(_key(kind, path), fut)
        return fut

    def serve(self, kind: str, path: str) -> Any:
        """The result of the read ahead of ``kind`` ``path`` (once), or :data:`MISS`."""
        with self._lock:
            fut = self._pending.pop(_key(kind, path), None)
        if fut is None or fut.exception() is not None:  # waits for one under way
            return MISS
        return fut.result()

    def drop(self) -> None:
        """Forget every read not yet served (a write, or the end of the verb)."""
        with self._lock:
            self._pending.clear()


def _after_all(futures: list[Future[Any]], then: Callable[[], Any]) -> None:
    """Run ``then`` in the pool once every one of ``futures`` is done (no thread waits).

    The store's ``warm_up`` (making the client of its first write, ~0.1-0.4 s of CPU)
    runs so: after the reads ahead, whose own clients it would otherwise slow down,
    and before the verb's first conditional write (a commit's decision), which would
    otherwise wait for it on its path."""
    left = [len(futures)]
    lock = threading.Lock()

    def one_done(_: Future[Any]) -> None:
        with lock:
            left[0] -= 1
            last = left[0] == 0
        if last:
            ahead_pool().submit(then)

    if not futures:
        ahead_pool().submit(then)
    for fut in futures:
        fut.add_done_callback(one_done)


@contextmanager
def reading_ahead(storage: Any, reads: Iterable[tuple[str, str]]) -> Iterator[None]:
    """Start ``reads`` — ``("read", path)`` (:meth:`Storage.read_bytes`) or
    ``("list", prefix)`` (:meth:`Storage.list`) — side by side now, to be served to the
    same reads made inside the block (the module says when).  A store that does not
    take reads ahead (a local disk: its reads cost microseconds) ignores it."""
    read_now = getattr(storage, "read_now", None)
    if read_now is None or getattr(storage, "_ahead", None) is not None:
        yield  # not a store that reads ahead, or already inside a block: nothing more
        return
    ahead = ReadAhead()
    started = [ahead.start(kind, path, lambda kind=kind, path=path: read_now(kind, path))
               for kind, path in reads]
    warm_up = getattr(storage, "warm_up", None)
    if warm_up is not None:
        _after_all(started, warm_up)
    storage._ahead = ahead
    try:
        yield
    finally:
        storage._ahead = None
        ahead.drop()
