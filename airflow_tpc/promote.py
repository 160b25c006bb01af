"""Promotion: making a decided commit visible, restartable from the decision.

Promotion runs only after the decision record exists, so it may crash at any
step and be run again (roll-forward) any number of times; every step checks
what is already done.  Readers switch from the old epoch to the new one at a
single atomic write or rename of the epoch's ``_tpc_published.json``:

- local, mode "move":   marker written into staging, then one directory swap
  (``renameat2(RENAME_EXCHANGE)``) of staging with ``<target>/epoch=<E>``.
- S3, mode "move":      parallel server-side copies to attempt-tagged keys,
  then the marker is overwritten (the switch), then the old files are deleted.
- any store, "manifest": the marker lists the staged files where they are.
"""

from __future__ import annotations

import json
import posixpath
from typing import Any

from .errors import StorageError
from .faults import crashpoint
from .ledger import PUBLISHED_MARKER, Layout, attempt_name
from .manifest import Manifest


def tagged(relpath: str, attempt: int) -> str:
    """S3 published name: attempt-tagged so two attempts' files never share a key."""
    head, base = posixpath.split(relpath)
    name = f"a{attempt:06d}-{base}"
    return f"{head}/{name}" if head else name


def marker_doc(manifest: Manifest, mode: str, paths: list[str]) -> dict[str, Any]:
    """The published marker: files relative to the target root, for readers."""
    return {
        "format": "airflow-tpc-published", "version": 1,
        "epoch": manifest.epoch, "attempt": manifest.attempt, "txn_id": manifest.txn_id,
        "manifest_digest": manifest.digest, "mode": mode,
        "files": [{"path": p, "size": f.size, "checksum": f.checksum, "rows": f.rows}
                  for p, f in zip(paths, manifest.files, strict=True)],
        "totals": {"files": manifest.total_files, "bytes": manifest.total_bytes,
                   "rows": manifest.total_rows},
    }


def read_marker(layout: Layout, epoch: str) -> dict[str, Any] | None:
    data = layout.storage.read_bytes(layout.marker(epoch))
    if data is None:
        return None
    try:
        doc = json.loads(data)
        if not isinstance(doc, dict) or not isinstance(doc.get("files"), list):
            raise ValueError
    except ValueError:
        raise StorageError(f"published marker {layout.storage.uri(layout.marker(epoch))} is "
                           "corrupt") from None
    return doc


def _rel_to_root(layout: Layout, path: str) -> str:
    root = layout.root.rstrip("/") + "/"
    return path[len(root):] if path.startswith(root) else layout.storage.uri(path)


def promote(layout: Layout, manifest: Manifest, mode: str) -> None:
    """Publish ``manifest``'s files as epoch ``manifest.epoch``; idempotent."""
    storage = layout.storage
    epoch, attempt = manifest.epoch, manifest.attempt
    staging = layout.staging(epoch, attempt)
    dst = layout.published_dir(epoch)
    current = read_marker(layout, epoch)
    done = current is not None and current.get("attempt") == attempt \
        and current.get("manifest_digest") == manifest.digest

    if mode == "manifest":
        if not done:
            paths = [_rel_to_root(layout, storage.join(staging, f.path)) for f in manifest.files]
            crashpoint("promote.before_marker")
            storage.put(layout.marker(epoch),
                        json.dumps(marker_doc(manifest, mode, paths)).encode())
        crashpoint("promote.before_cleanup")
        _delete_unlisted(layout, epoch, keep=set())
        return

    if storage.atomic_dir_rename:
        if not done:
            _require_staging(layout, manifest)
            paths = [f"epoch={epoch}/{f.path}" for f in manifest.files]
            crashpoint("promote.before_marker")
            storage.put(storage.join(staging, PUBLISHED_MARKER),
                        json.dumps(marker_doc(manifest, mode, paths)).encode())
            crashpoint("promote.before_swap")
            storage.replace_dir(staging, dst)
            crashpoint("promote.after_swap")
        # Whatever is left at the staging path now is the displaced old epoch.
        layout.remove_staging(epoch, attempt)
        return

    # Object store: copy, switch marker, delete the displaced files.
    names = [tagged(f.path, attempt) for f in manifest.files]
    if not done:
        _require_staging(layout, manifest)
        sizes = {storage.join(staging, f.path): f.size for f in manifest.files}
        pairs = [(storage.join(staging, f.path), storage.join(dst, n))
                 for f, n in zip(manifest.files, names, strict=True)]
        crashpoint("promote.before_copy")
        storage.copy_many(pairs, sizes)  # type: ignore[call-arg]
        crashpoint("promote.before_marker")
        storage.put(layout.marker(epoch), json.dumps(
            marker_doc(manifest, mode, [f"epoch={epoch}/{n}" for n in names])).encode())
    crashpoint("promote.before_cleanup")
    _delete_unlisted(layout, epoch, keep=set(names))
    layout.remove_staging(epoch, attempt)


def _require_staging(layout: Layout, manifest: Manifest) -> None:
    staging = layout.staging(manifest.epoch, manifest.attempt)
    storage = layout.storage
    present = {o.path for o in storage.list(staging)}
    missing = [f.path for f in manifest.files if storage.join(staging, f.path) not in present]
    if missing:
        raise StorageError(
            f"cannot promote epoch {manifest.epoch} attempt {manifest.attempt}: {len(missing)} "
            f"staged file(s) are gone (e.g. {missing[0]!r}) although the commit was decided. "
            f"Staging {storage.uri(staging)} was changed outside airflow-tpc; the decision "
            "record keeps the manifest, restore the files and run recover again.")


def _delete_unlisted(layout: Layout, epoch: str, keep: set[str]) -> None:
    """Remove files in the epoch's published folder that the marker does not list."""
    storage = layout.storage
    dst = layout.published_dir(epoch)
    prefix = dst.rstrip("/") + "/"
    doomed = [o.path for o in storage.list(dst)
              if o.path[len(prefix):] not in keep and not o.path.endswith("/" + PUBLISHED_MARKER)]
    storage.delete_files(doomed)


def staging_dirs(layout: Layout) -> dict[str, list[int]]:
    """Staging folders that exist: epoch -> attempts."""
    out: dict[str, list[int]] = {}
    for ep_dir in layout.storage.list_dirs(layout.staging_root):
        if not ep_dir.startswith("epoch="):
            continue
        epoch = ep_dir[len("epoch="):]
        attempts = []
        for name in layout.storage.list_dirs(layout.storage.join(layout.staging_root, ep_dir)):
            if name.startswith("attempt=") and name[len("attempt="):].isdigit():
                attempts.append(int(name[len("attempt="):]))
        out[epoch] = sorted(attempts)
    return out


__all__ = ["promote", "read_marker", "tagged", "staging_dirs", "attempt_name"]
