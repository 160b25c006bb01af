"""What is committed, file by file, and how one committed file is read.

Shared by the readers (:mod:`.readers`) and the ``tpc`` data source's reader
(:mod:`.datasource`), so neither imports the other's module for it.  Job-side:
stdlib, pyspark-free helpers over fsspec and pyarrow.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Any

from ..core.sink import Sink
from ..core.transaction import SinkConfig
from ..errors import TpcError
from ..storage import storage_class
from .credentials import _credentials_from_env

_ATTEMPT_BASE = re.compile(r"^(?P<base>.*/attempt=\d{6,})/")
_READER_NAMESPACE = "airflow-tpc-reader"  # reading never claims a target: any name works


def reader_sink(target: str, storage_options: dict[str, Any] | None,
                staging_root: str | None = None) -> Sink:
    """A core sink to read ``target``'s published markers with.

    A store that takes credentials (S3, Azure) also gets the job's environment
    credentials, by the store's own variable names (``credential_env``: ``AWS_*``,
    ``AZURE_STORAGE_*``; explicit ``storage_options`` win); whether it does is asked of
    the store class, never read off the URI.  An unsupported store is refused here
    (:class:`~airflow_tpc.errors.UnsupportedStorage`), as the sink would refuse it.
    ``staging_root``: where the target's staging lies when its claim does not say (a
    table member's ledger opened as a plain folder by a group's cut reader).
    """
    options = storage_options
    store = storage_class(target)
    if store.takes_credentials:
        options = {**_credentials_from_env(store.credential_env), **(storage_options or {})}
    config = SinkConfig(staging_root=staging_root) if staging_root else None
    return Sink(target, _READER_NAMESPACE, storage_options=options, config=config)


def _base_of(uri: str, epoch_dir: str) -> str:
    """The directory partition discovery starts from, for one published file."""
    if uri.startswith(epoch_dir.rstrip("/") + "/"):
        return epoch_dir.rstrip("/")
    m = _ATTEMPT_BASE.match(uri)  # "manifest" promotion: files stay in staging
    if not m:
        raise TpcError(f"cannot tell the partition base of published file {uri}")
    return m.group("base")


def group_by_base(uris: Iterable[str], epoch_dir: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for uri in uris:
        out.setdefault(_base_of(uri, epoch_dir), []).append(uri)
    return out


# --------------------------------------------------------------------------
# Distributed read-committed for stores Spark cannot read (S3 without s3a, Azure
# without hadoop-azure):
# the ``tpc`` data source's reader.  The driver lists the committed files (from
# the published markers) and reads their Parquet footers; executors read the
# files through fsspec and add the partition and ``epoch`` columns.


def _unescape(value: str) -> str | None:
    from urllib.parse import unquote

    from .context import HIVE_NULL

    return None if value == HIVE_NULL else unquote(value)


def _partition_values(uri: str, base: str) -> list[tuple[str, str | None]]:
    rel = uri[len(base):].strip("/").split("/")[:-1]
    out = []
    for part in rel:
        name, eq, value = part.partition("=")
        if eq:
            out.append((name, _unescape(value)))
    return out


def committed_parts(target: str, epochs: Iterable[str] | None,
                    storage_options: dict[str, Any] | None) -> list[tuple[str, str, str]]:
    """(epoch, partition base, file URI) of every committed file, oldest epoch first."""
    sink = reader_sink(target, storage_options)
    out = []
    for epoch, uris in sink.committed_files(epochs).items():
        for base, files in group_by_base(uris, sink.output_uri(epoch)).items():
            out += [(epoch, base, uri) for uri in sorted(files)]
    return out


def fsspec_options(uri: str, storage_options: dict[str, Any] | None) -> dict[str, Any]:
    """fsspec's options for ``uri`` on this process: ``storage_options`` completed with the
    environment's credentials (the store's ``credential_env``: on executors the only way
    credentials arrive), spelled the way the store's fsspec file system takes them (s3fs,
    adlfs: the store class says).  A store that takes no credentials gets none."""
    store = storage_class(uri)
    if not store.takes_credentials:
        return {}
    options = {**_credentials_from_env(store.credential_env), **(storage_options or {})}
    return store.fsspec_options({k: v for k, v in options.items() if v})


def arrow_schema_of(parts: list[tuple[str, str, str]],
                    storage_options: dict[str, Any] | None) -> Any:
    """Unified schema of the files' footers + string partition columns + ``epoch``."""
    from concurrent.futures import ThreadPoolExecutor

    import fsspec
    import pyarrow as pa
    import pyarrow.parquet as pq

    def footer(uri: str) -> Any:
        fs, path = fsspec.core.url_to_fs(uri, **fsspec_options(uri, storage_options))
        with fs.open(path, "rb") as fh:
            return pq.read_schema(fh)

    with ThreadPoolExecutor(max_workers=max(1, min(16, len(parts)))) as pool:
        schemas = list(pool.map(footer, [uri for _, _, uri in parts]))
    schema = pa.unify_schemas(schemas) if schemas else pa.schema([])
    names = set(schema.names)
    for _, base, uri in parts:
        for col, _ in _partition_values(uri, base):
            if col not in names:
                schema = schema.append(pa.field(col, pa.string()))
                names.add(col)
    if "epoch" not in names:
        schema = schema.append(pa.field("epoch", pa.string(), nullable=False))
    return schema


def read_part(part: tuple[str, str, str], arrow_schema: Any,
              storage_options: dict[str, Any] | None) -> Iterator[Any]:
    """Record batches of one committed file, shaped to ``arrow_schema``."""
    import fsspec
    import pyarrow as pa
    import pyarrow.parquet as pq

    epoch, base, uri = part
    fs, path = fsspec.core.url_to_fs(uri, **fsspec_options(uri, storage_options))
    with fs.open(path, "rb") as fh:
        table = pq.read_table(fh)
    constants = dict(_partition_values(uri, base))
    constants["epoch"] = epoch
    columns = []
    for f in arrow_schema:
        if f.name in table.column_names:
            columns.append(table[f.name].cast(f.type))
        elif f.name in constants:
            columns.append(pa.array([constants[f.name]] * table.num_rows, f.type))
        else:  # a column later epochs added: null here
            columns.append(pa.nulls(table.num_rows, f.type))
    yield from pa.Table.from_arrays(columns, schema=arrow_schema).to_batches()
