"""The one place a staged Parquet file's footer is read, and the footers a job seals.

Every footer read of a staged file goes through :func:`read_footer` — the job's row
count (:mod:`airflow_tpc.spark.sealing`) and a table's check and commit
(:func:`airflow_tpc.tables.staged.read_footers`) — so what footers cost is counted in
one place: docs/tables.md promises each staged footer of a table target is read once
from the job's seal to the table commit, and a test holds it to that by counting the
calls of this function.

The job of a table target reads each footer it counts rows from anyway; it keeps them
(``_tpc_footers.json``, :func:`footers_doc`, written once after the manifest and naming
its digest), so the table's check on the Airflow side — which needs the whole footer,
and has the catalog the job has not — parses them instead of reading the files again
(:func:`sealed_footers`).  A sidecar that is not the manifest's, or not its own (its
``seal``), is never used: the files are read.
"""

from __future__ import annotations

import base64
import hashlib
import json
import zlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from .manifest import Manifest

FOOTERS_FORMAT = "airflow-tpc-footers"
FOOTERS_VERSION = 1


def read_footer(stream: Any, uri: str) -> Any:
    """The Parquet footer (``pyarrow.parquet.FileMetaData``) of the open file ``stream``,
    whose URI is ``uri`` (named for whoever counts the reads; the stream is read)."""
    import pyarrow.parquet as pq

    del uri  # only a counter wrapping this function reads it
    return pq.read_metadata(stream)


def footer_bytes(md: Any) -> bytes:
    """A footer as Parquet stores it (``PAR1``, the Thrift metadata, its length,
    ``PAR1``): :func:`sealed_footers` parses it back to the very same metadata."""
    import pyarrow as pa

    out = pa.BufferOutputStream()
    md.write_metadata_file(out)
    return bytes(out.getvalue().to_pybytes())


def canonical(doc: dict[str, Any]) -> bytes:
    """A sidecar's bytes: sorted keys, no spaces (its ``seal`` is computed on them)."""
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def seal_of(doc: dict[str, Any]) -> str:
    """The ``seal`` of a sidecar written after its manifest (which cannot name its
    sha256): the sha256 of the rest of it, so an edited or torn copy is not its own."""
    rest = {k: v for k, v in doc.items() if k != "seal"}
    return "sha256:" + hashlib.sha256(canonical(rest)).hexdigest()


def footers_doc(manifest_digest: str, files: dict[str, tuple[int, bytes]]) -> bytes:
    """``_tpc_footers.json``: per staged file (relative path) its size and footer
    (:func:`footer_bytes`, zlib-compressed — 2.5-5x smaller: column names and types
    repeat in every row group —, base64), the digest of the manifest they were read
    for, and ``seal``, the sha256 of the rest (an edited or torn sidecar is not its
    own)."""
    doc: dict[str, Any] = {
        "format": FOOTERS_FORMAT, "version": FOOTERS_VERSION, "manifest": manifest_digest,
        "files": {rel: {"size": size,
                        "footer": base64.b64encode(zlib.compress(raw, 6)).decode()}
                  for rel, (size, raw) in sorted(files.items())}}
    doc["seal"] = seal_of(doc)
    return canonical(doc)


def sealed_footers(raw: bytes | None, manifest: Manifest) -> dict[str, Any]:
    """The footers (``{relative path: FileMetaData}``) a job sealed for ``manifest``:
    those of its files with the manifest's size; none unless the sidecar names the
    manifest's digest and its ``seal`` is its own."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not raw:
        return {}
    try:
        doc = json.loads(raw)
        if doc.get("format") != FOOTERS_FORMAT or doc.get("version") != FOOTERS_VERSION \
                or doc.get("manifest") != manifest.digest or doc.get("seal") != seal_of(doc):
            return {}
        sizes = {f.path: f.size for f in manifest.files}
        return {rel: pq.read_metadata(pa.BufferReader(
                    zlib.decompress(base64.b64decode(e["footer"]))))
                for rel, e in doc["files"].items() if sizes.get(rel) == e["size"]}
    except Exception:  # noqa: BLE001 - not a sidecar of ours: the files are read instead
        return {}
