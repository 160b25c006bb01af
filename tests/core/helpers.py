"""Helpers for protocol tests: write staged files, snapshot a target, check the invariant."""

from __future__ import annotations

from airflow_tpc import Sink, Transaction
from airflow_tpc.core.ledger import TPC_DIR


def write_staged(sink: Sink, txn: Transaction, files: dict[str, bytes]) -> None:
    """What a Spark job does: put data files into the attempt's staging."""
    staging = sink.layout.staging(txn.epoch, txn.attempt)
    for rel, data in files.items():
        sink.storage.put(sink.storage.join(staging, rel), data)


def stage(sink: Sink, epoch: str, files: dict[str, bytes], *, precommit: bool = True):
    txn = sink.begin(epoch)
    write_staged(sink, txn, files)
    manifest = sink.precommit(txn) if precommit else None
    return txn, manifest


def read_committed(sink: Sink) -> dict[str, dict[str, bytes]]:
    """epoch -> {file name: content} through the read-committed path."""
    out = {}
    for epoch, uris in sink.committed_files().items():
        files = {}
        for uri in uris:
            # an object store's URI is scheme://<bucket or container>/<key>
            path = uri[len("file://"):] if uri.startswith("file://") else uri.split("://", 1)[1]
            files[uri.rsplit("/", 1)[-1]] = sink.storage.read_bytes(path)
        out[epoch] = files
    return out


def committed_contents(sink: Sink) -> dict[str, list[bytes]]:
    """epoch -> sorted file contents (names differ by store: S3 tags them by attempt)."""
    return {e: sorted(f.values()) for e, f in read_committed(sink).items()}


def snapshot(sink: Sink, *, include_ledger: bool = False) -> dict[str, bytes]:
    """Every file of the target outside the _tpc area (optionally with the ledger)."""
    root = sink.layout.root.rstrip("/") + "/"
    out = {}
    for info in sink.storage.list(sink.layout.root):
        rel = info.path[len(root):]
        if rel.startswith(TPC_DIR + "/") and not (include_ledger and "/ledger/" in info.path):
            continue
        out[rel] = sink.storage.read_bytes(info.path)
    return out


def plain_listing(sink: Sink) -> dict[str, list[bytes]]:
    """What a plain lister (spark.read on the target) sees: visible data files per epoch."""
    root = sink.layout.root.rstrip("/") + "/"
    out: dict[str, list[bytes]] = {}
    for info in sink.storage.list(sink.layout.root):
        rel = info.path[len(root):]
        first, _, rest = rel.partition("/")
        if not first.startswith("epoch=") or any(p.startswith(("_", ".")) for p in rest.split("/")):
            continue
        out.setdefault(first[len("epoch="):], []).append(sink.storage.read_bytes(info.path))
    return {e: sorted(v) for e, v in out.items()}


def staging_files(sink: Sink) -> list[str]:
    return [o.path for o in sink.storage.list(sink.layout.staging_root)]


def assert_invariant(sink: Sink, expected: dict[str, list[bytes]], *,
                     open_staging_ok: bool = True) -> None:
    """Target == exactly the committed epochs' outputs; no staging of finished txns.

    Staging may hold only: undecided attempts (if ``open_staging_ok``), a decided
    commit not yet promoted, or the published attempt of "manifest" mode (whose
    staged files *are* the output).
    """
    expected = {e: sorted(v) for e, v in expected.items()}
    assert committed_contents(sink) == expected
    if sink.config.promotion == "move":
        # an epoch committed with no files is invisible to a plain lister
        assert plain_listing(sink) == {e: v for e, v in expected.items() if v}
    allowed = set()
    for info in sink.describe():
        undecided = info.state.value in ("OPEN", "PRECOMMITTED")
        live_manifest = (info.state.value == "COMMITTED" and not info.superseded
                         and info.staging_files and sink.config.promotion == "manifest")
        pending = info.state.value == "COMMITTED" and not info.published and not info.superseded
        if (undecided and open_staging_ok) or live_manifest or pending:
            allowed.add(info.staging_uri.split("://", 1)[1].rstrip("/") + "/")
    leftovers = [p for p in staging_files(sink)
                 if not any(p.startswith(prefix) for prefix in allowed)]
    assert leftovers == [], f"staging left behind by finished transactions: {leftovers[:3]}"


def full_tree(sink: Sink, *extra_dirs: str) -> dict[str, bytes | str]:
    """Every file under the target (ledger, staging, markers, data), byte for byte.

    Locally symlinks are recorded as ``"-> <destination>"`` and never followed; any
    ``extra_dirs`` (e.g. a folder outside the target a link points at) are included.
    "Changes nothing" is asserted on this, not on the published files alone.
    """
    out: dict[str, bytes | str] = {}
    # Staging lies beside the target for new targets (<parent>/_tpc_staging/<name>):
    # it is part of what "changes nothing" covers.
    tops = [sink.layout.root]
    staging = sink.layout.staging_root
    if not staging.startswith(sink.layout.root.rstrip("/") + "/"):
        tops.append(staging)
    if sink.storage.scheme != "file":
        for top in tops:
            for info in sink.storage.list(top):
                out[info.path] = sink.storage.read_bytes(info.path)
        return out
    for top in (*tops, *extra_dirs):
        out.update(local_tree(top))
    return out


def local_tree(top: str) -> dict[str, bytes | str]:
    """Every file below a local folder by content, symlinks as ``"-> <destination>"``."""
    import os

    out: dict[str, bytes | str] = {}
    for dirpath, dirnames, filenames in os.walk(top, followlinks=False):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            if os.path.islink(path):
                out[path] = "-> " + os.readlink(path)
            elif name in filenames:
                with open(path, "rb") as fh:
                    out[path] = fh.read()
    return out
