"""What pre-commit measures itself: checksums and Parquet row counts of the staged
files that no data-source write measured (Spark's native writers), on a few threads.

Apart from :mod:`.context`: :meth:`~.context.JobTransaction.precommit` says what is
sealed, these two helpers how the unmeasured files are measured.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from ..core.sink import Sink

if TYPE_CHECKING:  # pragma: no cover
    from ..core.manifest import Manifest

log = logging.getLogger("airflow_tpc.spark")


def _hash_parallel(sink: Sink, staging: str, infos: list[Any]) -> dict[str, str]:
    """Checksums of files no writer measured (native writers), on a few threads.

    S3 objects are not read at all (their ETag is used).
    """
    from ..core.staging import checksum_for, on_threads

    prefix = staging.rstrip("/") + "/"
    sums = on_threads(lambda i: checksum_for(sink.storage, i), infos)
    return {info.path[len(prefix):]: s for info, s in zip(infos, sums, strict=True)}


def _parquet_rows(sink: Sink, staging: str, infos: list[Any],
                  keep: dict[str, bytes] | None = None) -> dict[str, int]:
    """Row counts of Parquet files no writer counted (Spark's native writers), from
    their footers: a ranged read of each file's tail, on a few threads, never the
    data.  ``list`` then shows rows for native jobs as it does for the ``tpc`` source.
    A file that is not Parquet after all keeps its rows unknown (None), as before.
    ``keep``: a table target's footers go there (by relative path, as Parquet stores
    them), for :func:`_seal_footers`: the table's check then reads no file again."""
    from ..core import footer
    from ..core.staging import on_threads

    prefix = staging.rstrip("/") + "/"

    def rows_of(info: Any) -> int | None:
        if not info.path.endswith(".parquet"):
            return None
        try:
            with sink.storage.open_input(info.path) as fh:
                md = footer.read_footer(fh, sink.storage.uri(info.path))
            if keep is not None:
                keep[info.path[len(prefix):]] = footer.footer_bytes(md)
            return int(md.num_rows)
        except Exception as exc:  # noqa: BLE001 - unknown rows, never a failed seal
            log.warning("no row count for %s (%s); its rows stay unknown",
                        sink.storage.uri(info.path), type(exc).__name__)
            return None

    counted = on_threads(rows_of, infos)
    return {info.path[len(prefix):]: n for info, n in zip(infos, counted, strict=True)
            if n is not None}


def _seal_footers(sink: Sink, manifest: Manifest, kept: dict[str, bytes]) -> None:
    """Write a table target's footers the job read (``_tpc_footers.json`` beside the
    manifest, once, naming its digest: :mod:`airflow_tpc.core.footer`).  Best effort: a
    sidecar not written only costs the table's check a read of each footer."""
    from ..core.footer import footers_doc
    from ..core.staging import FOOTERS_NAME

    sizes = {f.path: f.size for f in manifest.files}
    files = {rel: (sizes[rel], raw) for rel, raw in kept.items() if rel in sizes}
    if not files:
        return
    path = sink.storage.join(sink.layout.sealed(manifest.epoch, manifest.attempt),
                             FOOTERS_NAME)
    try:
        sink.storage.put_if_absent(path, footers_doc(manifest.digest, files))
    except Exception as exc:  # noqa: BLE001 - the table's check reads the files instead
        log.warning("could not keep the footers of %s (%s); the table's check reads them",
                    manifest.txn_id, type(exc).__name__)
