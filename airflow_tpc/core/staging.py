"""What counts as an attempt's output inside its staging prefix, and checking it.

Spark's committers leave bookkeeping next to the data (``_temporary/``,
``_SUCCESS``, ``.crc`` files); names starting with ``_`` or ``.`` are hidden from
every Hadoop/Spark reader, so they are never part of a manifest.  Everything
else in staging must be listed in the manifest, byte for byte, or the commit is
refused — with directory-rename promotion an unlisted file would be published.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from ..errors import ManifestError
from ..storage import ObjectInfo, StatusDigest, Storage
from .manifest import (
    MANIFEST_NAME,
    PLAIN_PATH_RE,
    FileEntry,
    Manifest,
    canonical_json,
    check_relative_path,
)

_T = TypeVar("_T")
_R = TypeVar("_R")
#: Sealed beside the manifest on stores without native checksums (its digest is in
#: the manifest): each staged file's status at pre-commit, for cheap verification.
FINGERPRINTS_NAME = "_tpc_fingerprints.json"
#: A table target's per-file statistics, sealed by the manifest's ``table_stats`` digest
#: (or, written after it by the sensor's check, naming the manifest's digest).
TABLE_STATS_NAME = "_tpc_table_stats.json"
#: A table target's staged footers as the job read them (:mod:`airflow_tpc.core.footer`),
#: written after the manifest, naming its digest: the table's check reads no file again.
FOOTERS_NAME = "_tpc_footers.json"
#: What a seal may put into staging itself (when it is the seal's folder): left out of
#: the status digest that pre-commit seals and a commit compares (the status before the
#: seal was written and after must agree).
SEAL_NAMES = frozenset({MANIFEST_NAME, FINGERPRINTS_NAME, TABLE_STATS_NAME, FOOTERS_NAME})
#: Threads that hash staged files.  hashlib and file reads release the GIL, so a
#: few threads overlap I/O and hashing of the large files Spark writes.
HASH_THREADS = 8


def on_threads(fn: Callable[[_T], _R], items: Iterable[_T],
               workers: int = HASH_THREADS) -> list[_R]:
    """``[fn(i) for i in items]`` on up to ``workers`` threads, results in order.

    Each thread takes every n-th item (one task per thread, not per item: 100k tiny
    files must not cost 100k futures).  The first exception, in thread order, is
    raised.
    """
    items = list(items)
    n = min(workers, len(items))
    if n < 2:
        return [fn(i) for i in items]
    with ThreadPoolExecutor(max_workers=n, thread_name_prefix="tpc-hash") as pool:
        parts = list(pool.map(lambda k: [fn(i) for i in items[k::n]], range(n)))
    out: list[_R] = [None] * len(items)  # type: ignore[list-item]
    for k, part in enumerate(parts):
        out[k::n] = part
    return out


def in_background(fn: Callable[[], _R]) -> Callable[[], _R]:
    """Start ``fn()`` on a thread; the function returned waits for it and returns its
    result or raises its exception.  For I/O and hashing (which release the GIL) beside
    Python work on the calling thread: a commit reads and hashes its manifest while it
    walks staging."""
    box: list[tuple[bool, object]] = []

    def run() -> None:
        try:
            box.append((True, fn()))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller as it is
            box.append((False, exc))

    thread = threading.Thread(target=run, name="tpc-beside", daemon=True)
    thread.start()

    def result() -> _R:
        thread.join()
        ok, value = box[0]
        if not ok:
            raise value  # type: ignore[misc]
        return value  # type: ignore[return-value]
    return result


def is_hidden(relpath: str) -> bool:
    """Hidden from readers (Spark, Hive, pyarrow): a part starting with "_" or ".", or a
    Hadoop ``.crc`` side file.  Substring tests only: it runs once per staged file."""
    return (relpath[:1] in ("_", ".") or "/_" in relpath or "/." in relpath
            or relpath.endswith(".crc"))


def list_staged(storage: Storage, staging: str,
                listing: list[ObjectInfo] | None = None) -> dict[str, ObjectInfo]:
    """Visible files in staging, by path relative to it (``listing``: a recursive
    listing of ``staging`` the caller made moments ago, instead of listing again).

    Refused, hidden or not (a local promotion moves the whole folder): symlinks
    and hard-linked files, whose bytes live outside staging too.  Refused when
    visible: names that are not valid UTF-8 (Spark can write them; no manifest can
    name them) or that no manifest may list (a backslash, say) — at pre-commit,
    not first at commit.  The caller checks that ``staging`` itself is a real
    folder (:meth:`Layout.check_staging`).
    """
    out: dict[str, ObjectInfo] = {}
    prefix = staging.rstrip("/") + "/"
    cut, plain = len(prefix), PLAIN_PATH_RE.fullmatch
    for info in storage.list(staging) if listing is None else listing:
        rel = info.path[cut:] if info.path.startswith(prefix) else None
        # The common case in one C call: a plain visible path (every check below passes).
        if rel is not None and info.links == 1 and not info.is_symlink and rel.isascii() \
                and plain(rel) and not rel.endswith(".crc"):
            out[rel] = info
            continue
        if rel is None or rel == MANIFEST_NAME:
            continue
        if info.is_symlink:
            raise ManifestError(f"staging holds a symlink {_shown(rel)}; symlinks could lead "
                                "outside staging and are never promoted")
        if info.links > 1:
            raise ManifestError(f"staging holds {_shown(rel)} with {info.links} hard links; "
                                "its bytes are shared with a file outside staging, so it is "
                                "never promoted (write a copy instead)")
        if is_hidden(rel):
            continue
        try:
            rel.encode("utf-8")
        except UnicodeEncodeError:
            raise ManifestError(f"staging holds a file whose name is not valid UTF-8: "
                                f"{_shown(rel)}; rename it (manifests and readers need UTF-8 "
                                "names)") from None
        check_relative_path(rel)
        out[rel] = info
    return out


def _shown(rel: str) -> str:
    """A file name safe to print: undecodable bytes escaped, never a crash in a message."""
    return repr(rel)


def checksum_for(storage: Storage, info: ObjectInfo, algo: str = "sha256") -> str:
    """A checksum string for a staged file: the ETag where the store has one."""
    if info.etag and (algo == "etag" or storage.native_checksum == "etag"):
        return f"etag:{info.etag}"
    return f"{algo}:{storage.checksum(info.path, algo)}"


def fingerprints_doc(staged: dict[str, ObjectInfo]) -> bytes | None:
    """The ``_tpc_fingerprints.json`` sealed beside a manifest: each staged file's status
    at pre-commit (None where the store has none: it lists ETags instead)."""
    prints = {rel: info.fingerprint for rel, info in staged.items()}
    if not prints or any(p is None for p in prints.values()):
        return None
    return canonical_json({"format": "airflow-tpc-fingerprints", "version": 1,
                           "files": prints})


def fingerprints_digest(staged: dict[str, ObjectInfo]) -> str | None:
    """``digest_bytes(fingerprints_doc(staged))``, hashed a few thousand files at a time:
    the document itself is never built (10 MB at 100,000 files, at commit only to be
    compared).  The canonical form makes the pieces' concatenation the same bytes."""
    names = sorted(staged)
    if not names or any(staged[n].fingerprint is None for n in names):
        return None
    sha = hashlib.sha256(b'{"files":{')
    for i in range(0, len(names), 4096):
        part = json.dumps({n: staged[n].fingerprint for n in names[i:i + 4096]},
                          separators=(",", ":"), ensure_ascii=False)
        sha.update((("," if i else "") + part[1:-1]).encode())
    sha.update(b'},"format":"airflow-tpc-fingerprints","version":1}')
    return "sha256:" + sha.hexdigest()


def digest_bytes(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def verify_against_storage(storage: Storage, staging: str, manifest: Manifest,
                           verify: str = "fingerprint", *, seal: str | None = None,
                           walked: StatusDigest | None = None) -> tuple[str, ...] | None:
    """Refuse a manifest whose files are not exactly what staging holds.

    The shortcut, where the store has a status digest (a local disk) and ``verify`` is
    not ``"checksum"``: staging's digest now equal to the one sealed in the manifest
    (``listing``), and its visible files adding up to the manifest's totals, mean no
    file came, went or moved since pre-commit made the entries from that very listing:
    nothing more to compare (the entries need not even be decoded, see
    :meth:`Manifest.parse`).  The folders that walk found are returned, so promotion
    need not walk staging again.

    Otherwise file by file (None returned): no file missing, none unlisted, sizes
    equal; then by ``verify``: ``"fingerprint"`` compares ETags where the listing has
    them (S3), else each file's status with the one sealed at pre-commit (a same-size
    rewrite moves the inode or the ctime), falling back to re-hashing if no
    fingerprints were sealed; ``"checksum"`` re-hashes every local file; ``"size"``
    stops here.  ``seal``: the folder of the sealed sidecars when not ``staging`` (a
    ledger apart).  ``walked``: ``storage.status_digest(staging, SEAL_NAMES)``, made by
    the caller moments ago (a commit walks beside reading the manifest).
    """
    if manifest.listing and verify != "checksum":
        now = walked or storage.status_digest(staging, SEAL_NAMES)
        if now is not None and now.digest == manifest.listing \
                and (now.visible_files, now.visible_bytes) == (manifest.total_files,
                                                               manifest.total_bytes):
            return now.folders
    staged = list_staged(storage, staging)
    # No copy of either side (sets of 100,000 paths are a commit's memory): membership
    # tests, and the unlisted files looked for only when the counts differ.
    missing = [f.path for f in manifest.files if f.path not in staged]
    if missing:
        raise ManifestError(f"{len(missing)} file(s) listed in the manifest are missing from "
                            f"staging, e.g. {min(missing)!r}")
    if len(staged) != len(manifest.files):
        listed = {f.path for f in manifest.files}
        extra = [rel for rel in staged if rel not in listed]
        if extra:
            raise ManifestError(f"staging holds {len(extra)} file(s) the manifest does not "
                                f"list, e.g. {min(extra)!r}; refusing to publish unlisted data")
    for entry in manifest.files:
        info = staged[entry.path]
        if info.size != entry.size:
            raise ManifestError(f"{entry.path!r} is {info.size} bytes in storage but the "
                                f"manifest says {entry.size}")
    if verify == "fingerprint" and storage.native_checksum is None:
        # The common case without reading the sealed file: staging's status now, sealed
        # the way pre-commit sealed it, has the digest the manifest names.
        if manifest.fingerprints and fingerprints_digest(staged) == manifest.fingerprints:
            return None
        prints = _sealed_fingerprints(storage, seal or staging, manifest)
        if prints is not None:
            # Only files whose status moved are read: a restored copy with the sealed
            # bytes passes, a rewrite does not.
            moved = [e for e in manifest.files if staged[e.path].fingerprint != prints.get(e.path)]
            on_threads(lambda e: _check_checksum(storage, staged[e.path], e), moved)
            return None
        verify = "checksum"  # nothing sealed to compare with: read the bytes
    if verify in ("checksum", "fingerprint"):
        on_threads(lambda e: _check_checksum(storage, staged[e.path], e), manifest.files)
    return None


def _sealed_fingerprints(storage: Storage, staging: str,
                         manifest: Manifest) -> dict[str, str] | None:
    """The fingerprints sealed with ``manifest``, if any and if they are its own."""
    if not manifest.fingerprints:
        return None
    raw = storage.read_bytes(storage.join(staging, FINGERPRINTS_NAME))
    if raw is None or digest_bytes(raw) != manifest.fingerprints:
        raise ManifestError(f"the file fingerprints sealed with the manifest "
                            f"({FINGERPRINTS_NAME}) are missing or changed after pre-commit")
    files = json.loads(raw).get("files")
    return files if isinstance(files, dict) else None


def _check_checksum(storage: Storage, info: ObjectInfo, entry: FileEntry) -> None:
    """One file against its manifest checksum: by ETag where the store's ETag is that
    checksum, else by reading the bytes."""
    algo, _, value = entry.checksum.partition(":")
    if algo == "etag":
        actual = info.etag
    elif algo == "md5" and storage.etag_is_md5 and info.etag and "-" not in info.etag:
        actual = info.etag  # a single-part S3 object's ETag is its MD5
    else:
        actual = storage.checksum(info.path, algo)
    if actual != value:
        raise ManifestError(f"{entry.path!r} does not match its manifest checksum ({algo}); "
                            "the file was altered after pre-commit")
