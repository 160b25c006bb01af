"""The published marker, ``<target>/epoch=E/_tpc_published.json``: what readers read.

Two versions (docs/PROTOCOL.md §3.4.10).  Version 2 names the epoch's manifest where
the manifest travels with the files (a local exchange moves staging, manifest
included, into the epoch folder; manifest mode leaves both in staging); version 1
lists every file, where the manifest does not travel with them (S3 copies, table
formats).  Readers read both.  The marker only ever moves to a higher attempt: a
plain put before a local exchange, else a compare-and-swap (:func:`swap_marker`).
"""

from __future__ import annotations

import json
from typing import Any

from ..errors import LedgerError, ManifestError, StorageError
from .ledger import MAX_RECORD_BYTES, Layout
from .manifest import MANIFEST_NAME, MAX_MANIFEST_BYTES, Manifest


def marker_doc(manifest: Manifest, mode: str, paths: list[str] | None = None,
               manifest_path: str | None = None) -> dict[str, Any]:
    """The published marker, for readers; deterministic (no timestamps), so concurrent
    promoters write identical bytes.

    Version 2 (``manifest_path``): the marker names the manifest, which lies in the
    published folder (``move`` on a local disk) or in the staging it describes
    (``manifest`` mode); readers take the files from it.  A few hundred bytes
    whatever the file count, instead of every path again (1.8 MB at 10,000 files).
    Version 1 (``paths``): the files relative to the target root, where no manifest
    stays beside them (``move`` by copying, table formats).
    """
    doc: dict[str, Any] = {
        "format": "airflow-tpc-published", "version": 1 if manifest_path is None else 2,
        "epoch": manifest.epoch, "attempt": manifest.attempt, "txn_id": manifest.txn_id,
        "manifest_digest": manifest.digest, "mode": mode,
        "totals": {"files": manifest.total_files, "bytes": manifest.total_bytes,
                   "rows": manifest.total_rows}}
    if manifest_path is not None:
        doc["manifest"] = manifest_path
    else:
        doc["files"] = [{"path": p, "size": f.size, "checksum": f.checksum, "rows": f.rows}
                        for p, f in zip(paths or [], manifest.files, strict=True)]
    return doc


def decode_marker(layout: Layout, epoch: str, data: bytes | None, *,
                   files: bool = True) -> dict[str, Any] | None:
    """Parse a marker and check it belongs to ``epoch``: readers read exactly its files.

    A marker copied from another epoch (or edited to list files elsewhere) would make
    read-committed readers serve someone else's data as this epoch's, so every
    listed path must lie in this epoch's published folder or in the staging of the
    attempt the marker names, and a version-2 marker must name the manifest in one
    of those two places.  ``files``: give a version-2 marker its ``files`` from the
    manifest it names (False: the caller needs only attempt and digest).
    """
    if data is None:
        return None
    where = layout.storage.uri(layout.marker(epoch))
    if len(data) > MAX_MANIFEST_BYTES + MAX_RECORD_BYTES:
        raise LedgerError(f"published marker {where} is {len(data)} bytes, above the cap")
    try:
        doc = json.loads(data)
        if not isinstance(doc, dict) or not isinstance(doc.get("attempt"), int) \
                or isinstance(doc["attempt"], bool) or doc["attempt"] < 1 \
                or not isinstance(doc.get("manifest_digest"), str) \
                or not (isinstance(doc.get("files"), list)
                        or isinstance(doc.get("manifest"), str)):
            raise ValueError
    except ValueError:
        raise LedgerError(f"published marker {where} is corrupt") from None
    if doc.get("epoch") != epoch:
        raise LedgerError(f"published marker {where} is for epoch {doc.get('epoch')!r}, not "
                          f"{epoch!r}; it was copied or edited by hand")
    staging = layout.staging(epoch, doc["attempt"])
    if "files" not in doc:
        named = _v2_manifest(layout, epoch, doc, where)
        if files:
            doc["files"] = _files_of(layout, doc, named, where)
        return doc
    allowed = (f"epoch={epoch}/", rel_to_root(layout, staging).rstrip("/") + "/")
    for entry in doc["files"]:
        path = entry.get("path") if isinstance(entry, dict) else None
        if not isinstance(path, str) or not path.startswith(allowed) or "/../" in f"/{path}/":
            raise LedgerError(f"published marker {where} lists {path!r}, outside epoch "
                              f"{epoch}'s published folder and attempt {doc['attempt']}'s "
                              "staging; it was copied or edited by hand")
    return doc


def _v2_manifest(layout: Layout, epoch: str, doc: dict[str, Any], where: str) -> str:
    """The store path of the manifest a version-2 marker names, refused unless it is one
    of the only two it may be: in the published folder, or in its attempt's staging."""
    staging = layout.staging(epoch, doc["attempt"])
    for folder in (layout.published_dir(epoch), staging):
        path = layout.storage.join(folder, MANIFEST_NAME)
        if doc["manifest"] == rel_to_root(layout, path):
            return path
    raise LedgerError(f"published marker {where} names the manifest {doc['manifest']!r}, "
                      f"neither in epoch {epoch}'s published folder nor in attempt "
                      f"{doc['attempt']}'s staging; it was copied or edited by hand")


def _files_of(layout: Layout, marker: dict[str, Any], path: str,
              where: str) -> list[dict[str, Any]]:
    """A version-2 marker's files: the entries of the manifest it names, relative to the
    target root like a version-1 marker's, once the manifest proves to be the one the
    marker published (its digest)."""
    data = layout.storage.read_bytes(path)
    uri = layout.storage.uri(path)
    try:
        manifest = None if data is None else Manifest.parse(data, where=uri)
    except ManifestError as exc:  # damaged: read again, as after a switch, then refused
        raise MarkerMoved(f"published marker {where} publishes the manifest of digest "
                          f"{marker['manifest_digest']}, but the manifest it names is "
                          f"damaged: {exc}") from None
    if manifest is None or manifest.digest != marker["manifest_digest"]:
        found = "missing" if manifest is None else f"of digest {manifest.digest}"
        raise MarkerMoved(f"published marker {where} publishes the manifest of digest "
                          f"{marker['manifest_digest']}, but the manifest it names, {uri}, "
                          f"is {found}")
    base = rel_to_root(layout, path).rpartition("/")[0] + "/"
    return [{"path": base + f.path, "size": f.size, "checksum": f.checksum, "rows": f.rows}
            for f in manifest.files]


class MarkerMoved(LedgerError):
    """The manifest a version-2 marker names is not (or no longer) the one it published:
    a promotion switched the epoch between the reads of the two, or the files were
    damaged."""


def read_marker(layout: Layout, epoch: str, *, files: bool = True) -> dict[str, Any] | None:
    """The epoch's published marker (None: nothing published), checked; with ``files``
    (the default) a version-2 marker gets its file list from the manifest it names.

    The marker and the manifest are two reads: a promotion of the epoch may switch both
    in between, so on a mismatch the marker is read again (a few times, then the
    mismatch is an error: damage, not a race)."""
    for _ in range(4):
        try:
            return decode_marker(layout, epoch, layout.storage.read_bytes(layout.marker(epoch)),
                                  files=files)
        except MarkerMoved as exc:
            error = exc
    raise error


def rel_to_root(layout: Layout, path: str) -> str:
    root = layout.root.rstrip("/") + "/"
    return path[len(root):] if path.startswith(root) else layout.storage.uri(path)


def swap_marker(layout: Layout, manifest: Manifest, mode: str, paths: list[str] | None,
                 version: str | None, *, manifest_path: str | None = None) -> bool:
    """Compare-and-swap the marker to this attempt, never backwards to a lower one."""
    storage = layout.storage
    data = json.dumps(marker_doc(manifest, mode, paths, manifest_path)).encode()
    for _ in range(100):
        if storage.put_if_version(layout.marker(manifest.epoch), data, version):
            return True
        raw, version = storage.read_versioned(layout.marker(manifest.epoch))
        current = decode_marker(layout, manifest.epoch, raw, files=False)
        if current is not None and current["attempt"] >= manifest.attempt:
            return is_this(current, manifest.epoch, manifest.attempt, manifest.digest)
    raise StorageError(f"could not update the published marker of epoch {manifest.epoch}: "
                       "it keeps changing")  # pragma: no cover


def marker_listing(layout: Layout, manifest: Manifest, staging: str,
             folder: str) -> dict[str, Any]:
    """How a marker gives its files when the manifest ends up in ``folder`` with the
    staged files (a local exchange moves staging there; manifest mode leaves both in
    staging): it names the manifest (version 2).  Only a table's seal lies apart from
    its staging (a ledger apart), and tables write their own markers."""
    if layout.sealed(manifest.epoch, manifest.attempt) != staging:
        raise LedgerError(f"the seal of {manifest.txn_id} lies apart from its staging, "
                          "which only a table's may; its marker cannot name its manifest")
    return {"manifest_path": rel_to_root(layout, layout.storage.join(folder, MANIFEST_NAME))}


def marker_files(layout: Layout, epoch: str,
                 current: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The files of a marker :func:`decode_marker` read with or without them."""
    if current is None:
        return []
    if "files" not in current:
        where = layout.storage.uri(layout.marker(epoch))
        current["files"] = _files_of(layout, current, _v2_manifest(layout, epoch, current,
                                                                   where), where)
    files: list[dict[str, Any]] = current["files"]
    return files


def is_this(current: dict[str, Any], epoch: str, attempt: int, digest: str) -> bool:
    """Whether the marker (at or above ``attempt``) publishes the manifest ``digest``.

    False when a higher attempt is published.  The same attempt with another digest
    means the attempt number was handed out twice (a lost ledger): refused.
    """
    if current["attempt"] != attempt:
        return False
    if current["manifest_digest"] != digest:
        raise LedgerError(
            f"epoch {epoch}: readers see attempt {attempt} with manifest "
            f"{current['manifest_digest']}, but the decision of attempt {attempt} commits "
            f"{digest}; the attempt number was reused after the ledger was lost or damaged. "
            "Nothing was changed; begin a new attempt of the epoch.")
    return True
