"""Promotion: making a decided commit visible, restartable from the decision.

Promotion runs only after the decision record exists, so it may crash at any
step and be run again (roll-forward) any number of times, by several
committers at once; every step checks what is already done.  Readers switch
from the old epoch to the new one at a single atomic write or rename of the
epoch's ``_tpc_published.json`` marker, and the marker only ever moves to a
higher attempt:

- :class:`RenameSwap` (mode "move" where the store swaps directories, a local
  disk): under an flock of the target, the marker is written into staging, then
  one ``renameat2(RENAME_EXCHANGE)`` of staging with ``<target>/epoch=<E>``.
- :class:`CopyThenSwapMarker` (mode "move" on a store with server-side copy, S3):
  parallel copies to attempt-tagged keys, then a compare-and-swap of the marker
  (``IfMatch``/``IfNoneMatch``), then files of lower attempts are deleted.
- :class:`ManifestOnly` (mode "manifest", any store): the marker names the
  manifest in staging, whose files are read where they are.

All three share one skeleton (:func:`promote`); table formats plug in here
(``airflow_tpc.tables``: :func:`strategy_for` asks the layout's table target).
"""

from __future__ import annotations

import json
import logging
import posixpath
import re
from collections.abc import Callable
from typing import Any

from ..errors import (
    LedgerError,
    ManifestError,
    PlacementError,
    StorageError,
    UnsupportedStorage,
)
from .faults import crashpoint
from .ledger import ATTEMPT_DIR_RE, PUBLISHED_MARKER, TPC_DIR, Layout
from .manifest import Manifest
from .marker import (  # noqa: F401 - read_marker, marker_doc: re-exported for callers
    decode_marker,
    is_this,
    marker_doc,
    marker_files,
    marker_listing,
    read_marker,
    rel_to_root,
    swap_marker,
)
from .records import CommitDecision
from .staging import verify_against_storage

log = logging.getLogger("airflow_tpc")

_TAG_RE = re.compile(r"^a(\d{6,})-")


def tagged(relpath: str, attempt: int) -> str:
    """S3 published name: attempt-tagged so two attempts' files never share a key."""
    head, base = posixpath.split(relpath)
    name = f"a{attempt:06d}-{base}"
    return f"{head}/{name}" if head else name


def tag_of(relpath: str) -> int | None:
    m = _TAG_RE.match(posixpath.basename(relpath))
    return int(m.group(1)) if m else None


def promote(layout: Layout, epoch: str, attempt: int, decision: CommitDecision,
            load_manifest: Callable[[], Manifest], *, staging_verified: bool = False) -> bool:
    """Publish the files of ``decision`` (attempt ``attempt`` of ``epoch``); idempotent.

    One skeleton for every strategy: read the published state (the marker) →
    stop if a higher attempt is published, or skip to cleanup if this decision
    already is (judged by manifest digest) → require staging to be exactly the
    decided manifest → switch → clean what was displaced.  The manifest is loaded
    (``load_manifest``) only when there is something to publish.

    Returns False when a higher attempt is already published (nothing to do).
    Staging is re-verified under the decision's ``verify`` mode: between a
    decision and its roll-forward a straggling task of the attempt may have added
    or rewritten files, and those must never be published.  ``staging_verified``:
    the caller did exactly that moments ago (the commit that just decided).
    """
    with layout.storage.promotion_lock(layout.root):
        try:
            return _promote(layout, epoch, attempt, decision, load_manifest, staging_verified)
        except (StorageError, ManifestError):
            # A concurrent promoter may have published this decision under us (a store
            # without a promotion lock: its cleanup removes the staging our copies read),
            # or a write of ours failed after it took effect.  Then what is left is the
            # cleanup: run the skeleton once more (it finds the decision published and
            # only cleans, idempotently); a failure there is ours to report.
            current = read_marker(layout, epoch, files=False)
            if current is not None and is_this(current, epoch, attempt,
                                               decision.manifest_digest):
                return _promote(layout, epoch, attempt, decision, load_manifest,
                                staging_verified)
            # Another attempt published and nothing of ours left: nothing to do.
            if current is not None and current["attempt"] >= attempt \
                    and not layout.storage.list(layout.staging(epoch, attempt)):
                return False
            raise


def _promote(layout: Layout, epoch: str, attempt: int, decision: CommitDecision,
             load_manifest: Callable[[], Manifest], staging_verified: bool) -> bool:
    strategy = strategy_for(layout.storage, decision.mode, getattr(layout, "table", None),
                            decision.scope)
    staging = layout.check_staging(epoch, attempt)
    dst = layout.check_published(epoch)
    raw, version = layout.storage.read_versioned(layout.marker(epoch))
    current = decode_marker(layout, epoch, raw, files=False)
    if current is not None and current["attempt"] > attempt:
        return False  # a later attempt of this epoch is already what readers see
    # "Already published" is decided by digest, never by attempt number alone.
    done = current is not None and is_this(current, epoch, attempt, decision.manifest_digest)
    manifest = None
    if not done:
        manifest = load_manifest()
        if not staging_verified:
            _verify_staging(layout, manifest, decision.verify)
        if getattr(layout, "table", None) is None:  # a folder's epoch folder is replaced
            check_displaced(layout, epoch, dst, current)
        if not strategy.switch(layout, manifest, staging, dst, version):
            return False
    strategy.clean(layout, epoch, attempt, manifest, current)
    return True


def check_displaced(layout: Layout, epoch: str, dst: str,
                    current: dict[str, Any] | None) -> None:
    """Before an epoch folder is replaced: refuse (nothing changed) if it holds another
    target's claim (a target nested there by an older version, or by hand: promotion
    never deletes it), and name in a WARNING the files a user put there by hand, which
    the commit replaces (an epoch is replaced whole).  One listing of the folder."""
    storage = layout.storage
    prefix = dst.rstrip("/") + "/"
    listed = [o.path[len(prefix):] for o in storage.list(dst)]
    claim = f"{TPC_DIR}/sink.json"
    nested = sorted({rel[: -len(claim)].rstrip("/") or "." for rel in listed
                     if rel == claim or rel.endswith("/" + claim)})
    if nested:
        raise PlacementError(
            f"cannot publish epoch {epoch} of {storage.uri(layout.root)}: its folder "
            f"{storage.uri(dst)} holds another target ({', '.join(nested[:3])}: a claim "
            f"{claim}), which replacing the folder would delete. Nothing was changed; move "
            "that target out of the epoch folder and run the commit (or recover) again.")
    own = f"epoch={epoch}/"
    if current is not None and current.get("mode") == "manifest":
        known: set[str] = set()  # its files stay in staging: nothing of it is in dst
    else:
        try:  # for a warning only: a lost or damaged published manifest is no reason
            known = {f["path"][len(own):] for f in marker_files(layout, epoch, current)
                     if str(f.get("path", "")).startswith(own)}
        except LedgerError as exc:
            log.warning("epoch %s of %s: the files it published are unknown (%s); the "
                        "commit replaces the epoch whole", epoch, storage.uri(layout.root),
                        exc)
            return
    by_hand = [rel for rel in listed if rel not in known and rel != PUBLISHED_MARKER
               and tag_of(rel) is None
               and not any(part[:1] in ("_", ".") for part in rel.split("/"))]
    if by_hand:
        log.warning("epoch %s of %s: %d file(s) in %s were not published by airflow-tpc "
                    "(put there by hand?) and are replaced by this commit, as the whole "
                    "epoch is: %s", epoch, storage.uri(layout.root), len(by_hand),
                    storage.uri(dst), ", ".join(sorted(by_hand)[:10])
                    + (", ..." if len(by_hand) > 10 else ""))


class Strategy:
    """One way of making a decided commit visible; :func:`promote` is the skeleton.

    ``switch`` publishes a verified manifest (the step readers see at once) and
    returns False if a higher attempt won meanwhile; ``clean`` removes what the
    switch displaced, given the manifest it published, or None when an earlier
    run already switched (then ``current`` is the marker it wrote).  Both are
    idempotent: either may be run again after a crash.
    """

    name = ""

    def switch(self, layout: Layout, manifest: Manifest, staging: str, dst: str,
               version: str | None) -> bool:
        raise NotImplementedError

    def clean(self, layout: Layout, epoch: str, attempt: int, manifest: Manifest | None,
              current: dict[str, Any] | None) -> None:
        raise NotImplementedError


class RenameSwap(Strategy):
    """A store that swaps directories atomically (a local disk): the marker goes into
    staging, then staging and ``T/epoch=E`` are exchanged in one ``renameat2``.
    Constant work whatever the file count; data and marker switch together."""

    name = "move"

    def switch(self, layout: Layout, manifest: Manifest, staging: str, dst: str,
               version: str | None) -> bool:
        # Serialised by the promotion lock: check-then-swap cannot interleave.
        storage = layout.storage
        _drop_hidden_folders(layout, staging, manifest.staging_folders)
        crashpoint("promote.before_marker")
        storage.put(storage.join(staging, PUBLISHED_MARKER), json.dumps(marker_doc(
            manifest, self.name, **marker_listing(layout, manifest, staging, dst))).encode())
        crashpoint("promote.before_swap")
        storage.replace_dir(staging, dst)
        crashpoint("promote.after_swap")
        return True

    def clean(self, layout: Layout, epoch: str, attempt: int, manifest: Manifest | None,
              current: dict[str, Any] | None) -> None:
        layout.remove_staging(epoch, attempt)  # now the displaced old epoch, if any


def _drop_hidden_folders(layout: Layout, staging: str,
                         folders: tuple[str, ...] | None = None) -> None:
    """Remove hidden folders (``_temporary/``, ``.spark-staging-*``...) from staging
    before it becomes the published epoch folder: a failed or straggling Spark task
    leaves its part files there, never in the manifest, and a reader that does not
    skip ``_`` folders (DuckDB's ``**/*.parquet``) would read them once published.
    Hidden files (``_SUCCESS``, ``.crc``, the manifest) stay: no glob of data files
    matches them, and some consumers wait for ``_SUCCESS``.

    ``folders``: staging's folders as the commit's verification walked them (relative),
    when it did; otherwise a walk of folders only (no file is stat'ed): the
    verification already made the one full listing of staging a commit needs."""
    storage = layout.storage
    doomed = [] if folders is None else [storage.join(staging, rel) for rel in folders
                                         if _hidden_at(rel) == "last"]
    pending = [staging] if folders is None else []  # walked already when known
    while pending:
        folder = pending.pop()
        for name in storage.list_dirs(folder):
            (doomed if name[:1] in ("_", ".") else pending).append(storage.join(folder, name))
    for folder in sorted(doomed):
        storage.delete_prefix(folder)


def _hidden_at(rel: str) -> str | None:
    """Where the first hidden part of a relative folder path is: "last" (the folder
    itself is hidden, nothing above it), "above", or None (not hidden)."""
    parts = rel.split("/")
    for i, part in enumerate(parts):
        if part[:1] in ("_", "."):
            return "last" if i == len(parts) - 1 else "above"
    return None


class CopyThenSwapMarker(Strategy):
    """An object store: parallel server-side copies to attempt-tagged keys (two
    attempts never share a key), then a compare-and-swap of the marker; the
    displaced attempt's files and this attempt's staging are deleted after."""

    name = "move"

    def switch(self, layout: Layout, manifest: Manifest, staging: str, dst: str,
               version: str | None) -> bool:
        storage = layout.storage
        attempt = manifest.attempt
        sizes = {storage.join(staging, f.path): f.size for f in manifest.files}
        # What the copies must reproduce: the verified ETag of a single-part object (its
        # MD5 on S3; a copy of a multipart upload gets a new ETag, so those are not
        # checked).  An MD5 is an ETag only where the store says so (etag_is_md5).
        kinds = ("etag:", "md5:") if storage.etag_is_md5 else ("etag:",)
        etags = {storage.join(staging, f.path): f.checksum.partition(":")[2]
                 for f in manifest.files
                 if f.checksum.startswith(kinds) and "-" not in f.checksum}
        pairs = [(storage.join(staging, f.path), storage.join(dst, tagged(f.path, attempt)))
                 for f in manifest.files]
        crashpoint("promote.before_copy")
        storage.copy_many(pairs, sizes, etags)
        paths = [f"epoch={manifest.epoch}/{tagged(f.path, attempt)}" for f in manifest.files]
        crashpoint("promote.before_marker")
        return swap_marker(layout, manifest, self.name, paths, version)

    def clean(self, layout: Layout, epoch: str, attempt: int, manifest: Manifest | None,
              current: dict[str, Any] | None) -> None:
        if manifest is not None:
            keep = {tagged(f.path, attempt) for f in manifest.files}
        else:  # switched by an earlier run: keep exactly what the marker lists
            prefix = f"epoch={epoch}/"
            keep = {f["path"][len(prefix):] for f in marker_files(layout, epoch, current)}
        crashpoint("promote.before_cleanup")
        _delete_displaced(layout, epoch, attempt, keep)
        layout.remove_staging(epoch, attempt)


class ManifestOnly(Strategy):
    """Zero copy on any store: the marker names the manifest in staging, whose files are
    read where they are, so staging *is* the published data until a later attempt
    supersedes it."""

    name = "manifest"

    def switch(self, layout: Layout, manifest: Manifest, staging: str, dst: str,
               version: str | None) -> bool:
        crashpoint("promote.before_marker")
        return swap_marker(layout, manifest, self.name, None, version,
                            **marker_listing(layout, manifest, staging, staging))

    def clean(self, layout: Layout, epoch: str, attempt: int, manifest: Manifest | None,
              current: dict[str, Any] | None) -> None:
        crashpoint("promote.before_cleanup")
        _delete_displaced(layout, epoch, attempt, keep=set())


def strategy_for(storage: Any, mode: str, table: Any = None,
                 scope: dict[str, Any] | None = None) -> Strategy:
    """The strategy a store's capabilities allow for a promotion mode (asked, not
    sniffed from the URI); a store that can do neither is refused.

    ``table``: the table target of a table sink (``airflow_tpc.tables``, carried on its
    layout); its switch is the table format's own atomic commit, whatever the store,
    replacing the rows the decision's ``scope`` names.
    """
    if table is not None:  # --- table targets (issue 11) ---
        strategy: Strategy = table.strategy(scope)
        return strategy
    if mode == "manifest":
        return ManifestOnly()
    if storage.atomic_dir_rename:
        return RenameSwap()
    if storage.server_side_copy:
        return CopyThenSwapMarker()
    raise UnsupportedStorage(f"{type(storage).__name__} can neither swap directories nor copy "
                             "server-side: use promotion='manifest'")


def _verify_staging(layout: Layout, manifest: Manifest, verify: str) -> None:
    """Staging must still be exactly the decided manifest: no file gone, none added,
    none rewritten (sizes, and checksums or ETags under ``verify="checksum"``)."""
    staging = layout.staging(manifest.epoch, manifest.attempt)
    try:
        verify_against_storage(layout.storage, staging, manifest, verify,
                               seal=layout.sealed(manifest.epoch, manifest.attempt))
    except ManifestError as exc:
        raise ManifestError(
            f"cannot promote epoch {manifest.epoch} attempt {manifest.attempt}: {exc}. Its "
            f"staging {layout.storage.uri(staging)} changed after the commit was decided (a "
            "straggling task, or a change outside airflow-tpc). Nothing was published or "
            "deleted: the decision keeps the manifest; restore staging to it and run recover "
            "again.") from None


def _delete_displaced(layout: Layout, epoch: str, attempt: int, keep: set[str]) -> None:
    """Remove files in the epoch's published folder left by lower attempts.

    Only files tagged with a lower attempt (or untagged ones, written by a local
    "move") are removed, so a slow promoter can never delete a higher attempt's files.
    """
    storage = layout.storage
    dst = layout.published_dir(epoch)
    prefix = dst.rstrip("/") + "/"
    doomed = []
    for o in storage.list(dst):
        rel = o.path[len(prefix):]
        if rel in keep or rel == PUBLISHED_MARKER:
            continue
        tag = tag_of(rel)
        if tag is None or tag < attempt:
            doomed.append(o.path)
    storage.delete_files(doomed)


def staging_dirs(layout: Layout, epoch: str | None = None) -> dict[str, list[int]]:
    """Staging folders that exist (of every epoch, or of one): epoch -> attempts."""
    out: dict[str, list[int]] = {}
    names = layout.storage.list_dirs(layout.staging_root) if epoch is None else [f"epoch={epoch}"]
    for ep_dir in names:
        if not ep_dir.startswith("epoch="):
            continue
        epoch = ep_dir[len("epoch="):]
        attempts = []
        for name in layout.storage.list_dirs(layout.storage.join(layout.staging_root, ep_dir)):
            m = ATTEMPT_DIR_RE.fullmatch(name)
            if m:
                attempts.append(int(m.group(1)))
        out[epoch] = sorted(attempts)
    return out


# Earlier names, kept for the table formats and tests that import them from here.
_rel_to_root = rel_to_root
_swap_marker = swap_marker
