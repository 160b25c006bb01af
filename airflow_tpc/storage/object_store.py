"""What the object stores (S3, Azure Blob / ADLS Gen2) share, over their own clients.

Both name an object ``<bucket or container>/<key>``, so a target's folders start after
the first part; both serve the reads a verb started ahead of time (:mod:`.ahead`) and drop
them on every write; neither has, or needs, a promotion lock: the marker's
compare-and-swap (``put_if_version``) serialises promotions and every other step is
idempotent.  One copy of that logic, so the two stores cannot drift apart on it.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from .ahead import MISS, ReadAhead
from .base import ObjectInfo, Storage


class ObjectStore(Storage):
    """The shared half of :class:`~.s3.S3Storage` and :class:`~.azure.AzureStorage`; a
    store supplies :meth:`_read_bytes` and :meth:`_list` (the reads made now)."""

    #: Reads started ahead of time by the verb under way (:mod:`.ahead`), or None.
    _ahead: ReadAhead | None = None

    def folder_names(self, root: str) -> list[str]:
        """The path's folders: the bucket (container) is the store's, not the target's."""
        return super().folder_names(root)[1:]

    @abstractmethod
    def _read_bytes(self, path: str) -> bytes | None:
        """Read ``path`` now (None if absent)."""

    @abstractmethod
    def _list(self, prefix: str) -> list[ObjectInfo]:
        """List below ``prefix`` now."""

    def read_now(self, kind: str, path: str) -> Any:
        """A read made now, never served ahead (``kind``: "read" or "list")."""
        return self._read_bytes(path) if kind == "read" else self._list(path)

    def _wrote(self) -> None:
        """Every write drops the reads ahead not yet served (:mod:`.ahead`)."""
        ahead = self._ahead
        if ahead is not None:
            ahead.drop()

    def read_bytes(self, path: str) -> bytes | None:
        ahead = self._ahead  # once: the verb may end its block meanwhile (None)
        if ahead is not None and (got := ahead.serve("read", path)) is not MISS:
            return got  # type: ignore[no-any-return]
        return self._read_bytes(path)

    def list(self, prefix: str) -> list[ObjectInfo]:
        ahead = self._ahead
        if ahead is not None and (got := ahead.serve("list", prefix)) is not MISS:
            return got  # type: ignore[no-any-return]
        return self._list(prefix)

    @contextmanager
    def promotion_lock(self, root: str) -> Iterator[None]:
        """No lock: the marker's compare-and-swap (:meth:`put_if_version`) serialises
        promotions, and every other step is idempotent."""
        yield
