"""What pre-commit measures itself: checksums and Parquet row counts of the staged
files that no data-source write measured (Spark's native writers), on a few threads.

Apart from :mod:`.context`: :meth:`~.context.JobTransaction.precommit` says what is
sealed, these two helpers how the unmeasured files are measured.
"""

from __future__ import annotations

import logging
from typing import Any

from ..sink import Sink

log = logging.getLogger("airflow_tpc.spark")


def _hash_parallel(sink: Sink, staging: str, infos: list[Any]) -> dict[str, str]:
    """Checksums of files no writer measured (native writers), on a few threads.

    S3 objects are not read at all (their ETag is used).
    """
    from ..staging import checksum_for, on_threads

    prefix = staging.rstrip("/") + "/"
    sums = on_threads(lambda i: checksum_for(sink.storage, i), infos)
    return {info.path[len(prefix):]: s for info, s in zip(infos, sums, strict=True)}


def _parquet_rows(sink: Sink, staging: str, infos: list[Any]) -> dict[str, int]:
    """Row counts of Parquet files no writer counted (Spark's native writers), from
    their footers: a ranged read of each file's tail, on a few threads, never the
    data.  ``list`` then shows rows for native jobs as it does for the ``tpc`` source.
    A file that is not Parquet after all keeps its rows unknown (None), as before."""
    import pyarrow.parquet as pq

    from ..staging import on_threads

    def rows_of(info: Any) -> int | None:
        if not info.path.endswith(".parquet"):
            return None
        try:
            with sink.storage.open_input(info.path) as fh:
                return int(pq.read_metadata(fh).num_rows)
        except Exception as exc:  # noqa: BLE001 - unknown rows, never a failed seal
            log.warning("no row count for %s (%s); its rows stay unknown",
                        sink.storage.uri(info.path), type(exc).__name__)
            return None

    prefix = staging.rstrip("/") + "/"
    counted = on_threads(rows_of, infos)
    return {info.path[len(prefix):]: n for info, n in zip(infos, counted, strict=True)
            if n is not None}
