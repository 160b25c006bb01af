"""The status digest of a local tree (docs/PROTOCOL.md §3.3): what lets a commit whose
staging is as pre-commit sealed it skip comparing file by file.

Pre-commit seals the digest of staging's listing in the manifest; a commit walks
staging again and compares.  The walk is the commit's floor (one lstat a file), so
it does per file only the lstat, a pack and two appends; the rest runs per folder
in C.
"""

from __future__ import annotations

import array
import hashlib
import operator
import os
import stat
import struct
import sys
from collections.abc import Container, Iterable

from .base import ObjectInfo, StatusDigest

_HIDDEN_STARTS = frozenset("_.")
_first = operator.itemgetter(0)
#: One file's numbers as PROTOCOL §3.3 encodes them; a folder's are joined once.
_NUMBERS = struct.Struct("<QQqqqQ")
_PACK = _NUMBERS.pack


def _status_digest(joined: str, numbers: list[int]) -> str:
    """sha256 over the relative names, NUL-joined (``joined``), then each file's six
    numbers (device, inode, size, mtime ns, ctime ns, links) as little-endian 64-bit
    integers (``<QQqqqQ``): the form both of :class:`LocalStorage`'s status digests
    share.  A file's kind needs no number: a file replaced by a link or folder has
    another inode or a new ctime."""
    return _digest(joined, [_PACK(*numbers[i:i + 6]) for i in range(0, len(numbers), 6)])


def _digest(joined: str, packed: Iterable[bytes]) -> str:
    """:func:`_status_digest` of numbers packed already (pieces of ``<QQqqqQ`` each)."""
    sha = hashlib.sha256(joined.encode("utf-8", "surrogateescape"))
    sha.update(b"\1")
    for piece in packed:
        sha.update(piece)
    return "sha256:" + sha.hexdigest()


def _sizes(packed: bytes) -> array.array[int]:
    """The size field of each file's numbers in ``packed`` (:data:`_NUMBERS` each)."""
    numbers = array.array("q", packed)
    if sys.byteorder == "big":
        numbers.byteswap()
    return numbers[2::6]  # the third of six


def _any_hidden(names: list[str]) -> bool:
    """Whether a name starts with "_" or "." (Hadoop's hidden files), in C: the first
    characters are fed to a set's disjointness test, which stops at the first hit."""
    return not _HIDDEN_STARTS.isdisjoint(map(_first, names))


def walk_status(prefix: str, skip: Container[str] = ()) -> StatusDigest:
    """The status digest of the tree below ``prefix`` (``skip``: names at its top left
    out), with its folders and visible totals: :meth:`Storage.status_digest`."""
    # The walk of list() in its order: per file one lstat, its numbers packed as the
    # digest hashes them (C) and two appends; the rest per folder in C (joins, the hash),
    # so a commit whose staging is as sealed pays about one scandir + stat pass
    # (docs/PROTOCOL.md §3.3).  Each folder is listed through a descriptor, so each
    # lstat resolves one name, not the whole path (staging sits ~7 folders deep:
    # ~20 % of a walk of 100k files).
    joined: list[str] = []  # each folder's relative names, NUL-joined
    packed: list[bytes] = []  # each folder's files' numbers, packed
    folders: list[str] = []
    files = size = 0
    is_dir, pack = stat.S_IFDIR, _PACK
    pending = [(prefix, "", True)]
    while pending:
        folder, rel, seen = pending.pop()  # seen: no part of rel is hidden
        if rel:
            folders.append(rel[:-1])
        try:
            fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        except (FileNotFoundError, NotADirectoryError):
            continue
        here: list[str] = []
        mine: list[bytes] = []
        name, number = here.append, mine.append
        try:
            with os.scandir(fd) as it:  # scandir reads a duplicate of fd
                for entry in it:
                    try:  # one lstat an entry says its kind too
                        st = entry.stat(follow_symlinks=False)
                    except FileNotFoundError:
                        continue
                    if st.st_mode & 0o170000 == is_dir:
                        n = entry.name
                        pending.append((f"{folder}/{n}", f"{rel}{n}/",
                                        seen and n[0] not in _HIDDEN_STARTS))
                        continue
                    name(entry.name)
                    number(pack(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns,
                                st.st_ctime_ns, st.st_nlink))
        finally:
            os.close(fd)
        if not here:
            continue
        if not rel:
            for gone in set(skip).intersection(here):
                i = here.index(gone)
                del here[i], mine[i]
        numbers = b"".join(mine)
        if seen:
            sizes = _sizes(numbers)
            files, size = files + len(here), size + sum(sizes)
            if _any_hidden(here):  # rare: staging holds data files
                hidden = [i for i, n in enumerate(here) if n[0] in _HIDDEN_STARTS]
                files -= len(hidden)
                size -= sum(sizes[i] for i in hidden)
        if here:
            # rel + "\0rel".join(here): every name prefixed, in one C join
            joined.append(rel + f"\0{rel}".join(here))
            packed.append(numbers)
    return StatusDigest(_digest("\0".join(joined), packed), tuple(folders), files, size)


def status_of_listing(prefix: str, listing: Iterable[ObjectInfo],
                      skip: Container[str] = ()) -> str | None:
    """The same digest of a listing made before (:meth:`Storage.status_digest_of`)."""
    names: list[str] = []
    numbers: list[int] = []
    cut = len(prefix.rstrip("/")) + 1
    for info in listing:
        rel = info.path[cut:]
        if rel in skip:
            continue
        if info.fingerprint is None:
            return None
        names.append(rel)
        numbers += (*(int(n) for n in info.fingerprint.split(":")), info.links)
    return _status_digest("\0".join(names), numbers)
