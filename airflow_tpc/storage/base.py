"""The one narrow interface between the protocol and a store.

Paths are *store paths*: absolute paths without a scheme (``/data/t/x`` on a
local disk, ``bucket/prefix/x`` on S3).  :meth:`Storage.uri` turns one back into a
URI for people and for Spark.  Everything the protocol needs from a store is
here; the two implementations differ mainly in how promotion can be made
cheap: a local disk can swap whole directories atomically, S3 can copy
server-side in parallel.
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Container, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, NamedTuple

from ..errors import StorageError, UnsupportedStorage

CHUNK = 8 * 1024 * 1024
#: The folder beside a target that holds its staging (docs/PROTOCOL.md §2).
STAGING_HOME_DIR = "_tpc_staging"


def copy_in_parallel(pairs: list[tuple[str, str]], workers: int,
                     copy_one: Callable[[str, str], None], thread_name: str) -> None:
    """Run ``copy_one(src, dst)`` for every pair, up to ``workers`` at a time: the object
    stores' server-side promotion.  Every copy is tried even when one fails (a refused
    source is reported, not left half-known), then one :class:`StorageError` says how
    many failed and names the first; any other exception propagates as raised."""
    workers = max(1, min(workers, len(pairs)))
    if workers == 1:
        for src, dst in pairs:
            copy_one(src, dst)
        return
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix=thread_name) as pool:
        futures = [pool.submit(copy_one, src, dst) for src, dst in pairs]
        errors = []
        for fut in futures:
            try:
                fut.result()
            except StorageError as exc:
                errors.append(exc)
    if errors:
        raise StorageError(f"{len(errors)} of {len(pairs)} copies failed; first: {errors[0]}")


class ObjectInfo(NamedTuple):
    """One file (object) found by a recursive listing.

    A named tuple, not a frozen dataclass: a listing builds one per file, and a
    commit's listing of 10,000 files is the floor it is measured against."""

    path: str
    size: int
    etag: str | None = None
    is_symlink: bool = False
    #: Hard links to the file (``st_nlink``); more than one means the bytes are
    #: shared with a path outside staging.  Object stores have exactly one.
    links: int = 1
    #: What changes whenever the content may have (locally device, inode, size,
    #: mtime and ctime in ns: a rewrite, even one that restores the mtime, moves
    #: the ctime); None where the store has none (an ETag serves instead).
    fingerprint: str | None = None


class StatusDigest(NamedTuple):
    """What :meth:`Storage.status_digest` found below a prefix."""

    digest: str
    #: Every folder below the prefix, relative to it ("a", "a/b"), in walk order.
    folders: tuple[str, ...]
    #: How many files, and bytes, have no part of their path starting with "_" or "."
    #: (what Hadoop-convention readers see).
    visible_files: int
    visible_bytes: int


class Storage(ABC):
    """A store holding one target: ledger records, staging and published files."""

    scheme: str = ""
    #: True when a directory can be renamed/swapped atomically (promotion by rename).
    atomic_dir_rename: bool = False
    #: True when the store copies objects server-side (promotion by copy).
    server_side_copy: bool = False
    #: The checksum a listing gives for free ("etag" on S3), or None: staged files
    #: are then hashed where the bytes are.
    native_checksum: str | None = None
    #: True when a single-part object's ETag is the MD5 of its bytes (S3): an ``md5:``
    #: checksum measured by the writer can then be checked, and guard a copy, by ETag.
    #: Azure's ETags are opaque version tokens: never taken for an MD5 (fails closed).
    etag_is_md5: bool = False
    #: False only for stores that cannot hold symbolic or hard links (object stores).
    #: A store that can must implement :meth:`check_real_dirs`; the default refuses.
    has_links: bool = True
    #: True when the store needs credentials (storage options, a connection, the
    #: environment) to be reached; a local disk needs none.
    takes_credentials: bool = False
    #: True when Spark as shipped (no extra connector jars) reads and writes the
    #: store natively; otherwise the ``tpc`` data source or pyarrow reaches it.
    spark_native: bool = True
    #: The environment variables a job finds this store's credentials in (variable ->
    #: storage option); a credentials file shipped with the job holds the same names.
    credential_env: dict[str, str] = {}  # noqa: RUF012 - read only, per class
    #: The storage options that are no secret and that executors need to reach the store
    #: (a distributed reader's data source options: they show in the query plan); the
    #: credentials reach executors by :attr:`credential_env` only.
    public_option_names: tuple[str, ...] = ()

    @classmethod
    def fsspec_options(cls, options: dict[str, Any]) -> dict[str, Any]:
        """The storage options spelled the way this store's fsspec file system takes them
        (the job's ``tpc`` data source and readers); a local disk takes none."""
        return {}

    # -- naming (class methods: asked of a URI before any store is built) ------
    @classmethod
    def spark_uri(cls, uri: str) -> str:
        """``uri`` spelled the way Spark's (Hadoop's) file systems name this store."""
        return uri

    @classmethod
    def lineage_name(cls, uri: str) -> tuple[str, str]:
        """OpenLineage (namespace, name) of a dataset at ``uri``, per its naming spec."""
        raise NotImplementedError(f"{cls.__name__} has no OpenLineage naming")

    @classmethod
    def browser_url(cls, uri: str) -> str | None:
        """An http(s) URL a person can open for ``uri``, or None if the store has none."""
        return None

    # -- naming ---------------------------------------------------------------
    @abstractmethod
    def uri(self, path: str) -> str:
        """The URI of a store path (for people, manifests and Spark)."""

    @staticmethod
    def join(*parts: str) -> str:
        head, *rest = parts
        out = head.rstrip("/")
        for part in rest:
            out = f"{out}/{part.strip('/')}"
        return out

    # -- reading --------------------------------------------------------------
    @abstractmethod
    def read_bytes(self, path: str) -> bytes | None:
        """The whole content of ``path``, or None when it does not exist."""

    @abstractmethod
    def list(self, prefix: str) -> list[ObjectInfo]:
        """Every file below ``prefix``, recursively (never served from a cache)."""

    @abstractmethod
    def list_dirs(self, prefix: str) -> list[str]:
        """Names of the immediate sub-directories of ``prefix``."""

    def status_digest(self, prefix: str, skip: Container[str] = ()) -> StatusDigest | None:
        """A digest of the status of every file below ``prefix`` (names, inodes, sizes,
        times, links) in one pass that keeps nothing per file, and the folders the pass
        walked; None where the store has none (the default: callers then check file by
        file).  Files named in ``skip`` directly below ``prefix`` are left out.  Equal
        digests mean nothing below changed; a digest of :meth:`list`'s own result
        (:meth:`status_digest_of`) equals this one while the tree is unchanged."""
        return None

    def status_digest_of(self, prefix: str, listing: Iterable[ObjectInfo],
                         skip: Container[str] = ()) -> str | None:
        """:meth:`status_digest` of the tree ``listing`` (a result of :meth:`list`)
        showed; None where the store has none."""
        return None

    def exists(self, path: str) -> bool:
        return self.read_bytes(path) is not None

    def checksum(self, path: str, algo: str) -> str:
        """Hex digest of the content of ``path`` with hashlib ``algo`` (streamed)."""
        h = hashlib.new(algo)
        for chunk in self.iter_chunks(path):
            h.update(chunk)
        return h.hexdigest()

    @abstractmethod
    def iter_chunks(self, path: str) -> Iterable[bytes]:
        """Stream the content of ``path``."""

    def open_input(self, path: str) -> Any:
        """A seekable binary file of ``path`` for ranged reads (a Parquet footer: the
        tail, not the whole object).  The caller closes it.  A store that cannot says
        so (what it would cost a reader is then unknown, never guessed)."""
        raise UnsupportedStorage(f"{type(self).__name__} has no ranged reads")

    # -- writing --------------------------------------------------------------
    @abstractmethod
    def put(self, path: str, data: bytes) -> None:
        """Write ``data`` at ``path`` (replacing it), atomically for readers."""

    @abstractmethod
    def put_if_absent(self, path: str, data: bytes) -> bool:
        """Create ``path`` with ``data`` only if nothing is there: the commit point.

        Returns True when this call created it, False when it already existed
        (the caller compares contents: a retried request may have created it).
        """

    @abstractmethod
    def delete_prefix(self, prefix: str) -> None:
        """Remove everything below ``prefix``; a missing prefix is not an error."""

    @abstractmethod
    def delete_files(self, paths: Iterable[str]) -> None:
        """Remove the given files; missing ones are not an error."""

    def read_versioned(self, path: str) -> tuple[bytes | None, str | None]:
        """Content and a version token (ETag) for :meth:`put_if_version`."""
        return self.read_bytes(path), None

    def put_if_version(self, path: str, data: bytes, version: str | None) -> bool:
        """Replace ``path`` only if it is still at ``version`` (None: only if absent).

        The published marker's compare-and-swap.  Fails closed: a store must say
        how it does this (natively, or as a plain write made safe because every
        caller holds :meth:`promotion_lock`), or promotion is refused.
        """
        raise UnsupportedStorage(f"{type(self).__name__} has no compare-and-swap "
                                 "(put_if_version); refusing to publish without one")

    @contextmanager
    def promotion_lock(self, root: str) -> Iterator[None]:
        """Serialise promotions of one target (or declare, by overriding with a no-op,
        that the store's compare-and-swap makes a lock unnecessary).  Fails closed."""
        raise UnsupportedStorage(f"{type(self).__name__} declares no promotion lock; "
                                 "refusing to publish without one")
        yield  # pragma: no cover

    def check_real_dirs(self, base: str, path: str, *, links_only: bool = False) -> None:
        """Refuse (:class:`StorageError`) unless every folder below ``base`` down to
        ``path`` is a real directory, not a link (``links_only``: refuse only links; a
        part that is a file ends the check).

        Staging must lie inside the target for real: a symlinked attempt or epoch
        folder would be published (or deleted) somewhere else.  Parts of ``path``
        that do not exist yet pass.  Fails closed: a store with links must say how
        to check them.
        """
        if self.has_links:
            raise StorageError(f"{type(self).__name__} can hold links but cannot check for "
                               "them; refusing to act on staging it cannot vouch for")

    def staging_home(self, root: str) -> str | None:
        """Where a new target's staging goes: ``<parent>/_tpc_staging/<name>``, beside the
        target on the same store, so no recursive reader of the target sees it.

        None when the target has no parent to hold it (a bucket root, a filesystem
        root): the caller then stages inside the target (``<target>/_tpc/staging``).
        A pure name; :meth:`staging_home_problem` says whether it can really be used.
        """
        parent, _, name = root.rstrip("/").rpartition("/")
        if not parent or not name:
            return None
        return self.join(parent, STAGING_HOME_DIR, name)

    def staging_home_problem(self, root: str, home: str) -> str | None:
        """Why staging at ``home`` cannot serve the target at ``root`` (None: it can).

        Asked once, when a target is claimed.  Object stores: any prefix of the
        bucket serves (server-side copies need no more).
        """
        return None

    def folder_names(self, root: str) -> list[str]:
        """The names of the folders ``root`` is made of, top down (what a placement rule
        may judge; an object store's bucket is not a folder, see S3's override)."""
        return [part for part in root.strip("/").split("/") if part]

    def check_target(self, root: str) -> None:  # noqa: B027 - a no-op where keys are names
        """Refuse a target root that cannot be a folder (e.g. an existing regular file)."""

    def prune_empty_parent(self, path: str) -> None:
        """Remove the now-empty parent folder of ``path`` (object stores have none)."""
        return None

    # -- promotion primitives (a store implements the one its kind allows) ----
    def replace_dir(self, src: str, dst: str) -> bool:
        """Move directory ``src`` to ``dst`` atomically.

        If ``dst`` exists, the two are exchanged (the old ``dst`` ends up at
        ``src``) and True is returned.  Only for ``atomic_dir_rename`` stores.
        """
        raise NotImplementedError(f"{type(self).__name__} cannot rename directories")

    def copy_many(self, pairs: list[tuple[str, str]], sizes: dict[str, int] | None = None,
                  etags: dict[str, str] | None = None) -> None:
        """Server-side copy of (src, dst) pairs, in parallel, with retries; a copy whose
        source no longer has the ETag in ``etags`` is refused (StorageError)."""
        raise NotImplementedError(f"{type(self).__name__} cannot copy server-side")
