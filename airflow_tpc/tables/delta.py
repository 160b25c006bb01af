"""Delta Lake targets through delta-rs (``deltalake``): an epoch's commit is exactly one
Delta version.

Declaring a target::

    from airflow_tpc.tables import open_table_sink
    sink = open_table_sink("delta+file:///data/tables/daily_counts", "daily_counts")
    sink = open_table_sink("delta+s3://bucket/tables/daily_counts", "daily_counts",
                           storage_options={"endpoint_url": ..., "region_name": ...})

``delta+<location>`` names the table by its location (Delta has no catalog):
``delta+file:///abs/path`` or ``delta+s3://bucket/prefix``.  ``storage_options``
are airflow-tpc's (fsspec's names, as for a folder target); they are translated
once into delta-rs's object-store options (``AWS_ENDPOINT_URL``,
``AWS_ACCESS_KEY_ID`` ...) and into pyarrow's S3 filesystem for reading footers.
``catalog_properties``, for a Delta target, are extra delta-rs storage options
merged over the translated ones (e.g. ``AWS_S3_LOCKING_PROVIDER``).  None of them
is ever logged or put in an error.

Layout (the sink's root is the table location)::

    <table>/_delta_log/                         Delta's log: what readers read
    <table>/_tpc/                               ledger and namespace claim
    <table>/_tpc_staging/epoch=E/attempt=N/     staging: the job writes Parquet here
    <table>/epoch=E/_tpc_published.json         marker: what the last airflow-tpc
                                                commit of E put in the table

Delta readers read only the files the log names, so staged, aborted and displaced
files are invisible to them.  What one commit does, after the ledger decision
(:class:`DeltaCommit`): one Delta commit of ``remove`` actions for the epoch's
current files (partition ``epoch=E``) and ``add`` actions for the staged files where
they are (relative paths, ``partitionValues={"epoch": E}``, ``numRecords``
statistics), with an application transaction ``txn(appId="airflow-tpc/<namespace>/
<epoch>", version=<attempt>)`` and ``airflow-tpc.*`` keys (txn id, manifest digest,
epoch, attempt, namespace) in its ``commitInfo``.  The ``txn`` makes the commit
idempotent: a roll-forward that finds the epoch's ``txn`` version at this attempt
commits nothing again; one that finds a higher attempt is stale and never applied.
The first commit creates the table (version 0) from the staged files' schema,
partitioned by ``epoch``.

The staged files may or may not hold the ``epoch`` column: Delta takes a partition
column's value from the log's ``partitionValues``; if a file holds the column too,
every row must hold the epoch's name (checked from its statistics), and readers
(delta-rs, pyarrow over :meth:`DeltaTarget.pyarrow_dataset`, DuckDB over that) see
the same value either way.
"""

from __future__ import annotations

import json
import logging
import time
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote, urlparse

from ..errors import LedgerError, StorageError, TpcError
from ..faults import crashpoint
from ..ledger import Layout, epoch_sort_key
from ..manifest import Manifest
from ..promote import Strategy, _rel_to_root, _swap_marker
from ..storage import open_storage
from ..transaction import SinkConfig
from .base import (
    COMMIT_RETRIES,
    EPOCH_COLUMN,
    PROP_ATTEMPT,
    PROP_DIGEST,
    PROP_EPOCH,
    PROP_NAMESPACE,
    HandOver,
    TableSchemaError,
    TableSink,
    commit_properties,
    epoch_column_problems,
    norm_uri,
    read_footers,
    read_sealed_stats,
    schema_error,
)
from .delta_rewrite import scope_actions
from .delta_scope import DeltaScope
from .scope import Scope

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa
    import pyarrow.dataset as pads
    import pyarrow.fs as pafs
    from deltalake import DeltaTable

log = logging.getLogger("airflow_tpc")

__all__ = ["DeltaCommit", "DeltaSink", "DeltaTarget", "TableSchemaError", "app_id"]

#: Staging's folder below the table location: ``_``-prefixed, so Delta's vacuum (and
#: every Delta reader) leaves it alone.
STAGING_DIR = "_tpc_staging"
LOG_DIR = "_delta_log"
SCHEMES = {"delta+file": "file", "delta+s3": "s3"}


def app_id(namespace: str, epoch: str) -> str:
    """The Delta application id of one epoch of one pipeline: its ``txn`` version is the
    highest attempt of the epoch committed into the table."""
    return f"airflow-tpc/{namespace}/{epoch}"


def _need_deltalake() -> None:
    try:
        import deltalake  # noqa: F401
    except ImportError:  # pragma: no cover - the extra is installed in dev
        raise TpcError("Delta targets need deltalake: pip install 'airflow-tpc[tables]'") \
            from None


def delta_storage_options(options: dict[str, Any] | None) -> dict[str, str]:
    """airflow-tpc's S3 options (fsspec's names) as delta-rs's object-store options.

    Only what is given is translated; what is not comes from the environment the way
    delta-rs reads it.  The result holds secrets: never log it."""
    opts = dict(options or {})
    client = dict(opts.get("client_kwargs") or {})
    out: dict[str, str] = {}
    endpoint = opts.get("endpoint_url") or client.get("endpoint_url")
    if endpoint:
        out["AWS_ENDPOINT_URL"] = str(endpoint)
        if str(endpoint).startswith("http://"):
            out["AWS_ALLOW_HTTP"] = "true"
    region = opts.get("region_name") or client.get("region_name")
    if region:
        out["AWS_REGION"] = str(region)
    for ours, theirs in (("key", "AWS_ACCESS_KEY_ID"), ("secret", "AWS_SECRET_ACCESS_KEY"),
                         ("token", "AWS_SESSION_TOKEN")):
        if opts.get(ours):
            out[theirs] = str(opts[ours])
    return out


class TableCreatedMeanwhile(Exception):
    """Our creating commit lost to another writer's: retried on the table it made."""


class DeltaTarget(HandOver):
    """One Delta table, named by its location: ``delta+file:///path`` or
    ``delta+s3://bucket/prefix``.

    ``storage_options``: airflow-tpc's store options (as for folder targets);
    ``delta_options``: extra delta-rs storage options merged over the translation.
    """

    format = "delta"

    def __init__(self, location: str, storage_options: dict[str, Any] | None = None,
                 delta_options: dict[str, str] | None = None) -> None:
        self._location = location.rstrip("/")
        scheme = urlparse(self._location).scheme
        if scheme not in ("file", "s3"):
            raise TpcError(f"invalid Delta table location {location!r}: use "
                           "delta+file:///<path> or delta+s3://<bucket>/<prefix>")
        # A store for the log and footers, opened the way the sink opens its own.
        self.storage, self._root = open_storage(self._location, storage_options)
        self._storage_options = dict(storage_options or {})
        #: Staged files' partitionValues found by the last check (a table of its own
        #: partitioning), sealed with their statistics.
        self._partitions: dict[str, dict[str, str | None]] = {}
        self._delta_options = {**(delta_storage_options(storage_options)
                                  if scheme == "s3" else {}), **(delta_options or {})}

    @classmethod
    def parse(cls, uri: str, storage_options: dict[str, Any] | None = None,
              delta_options: dict[str, str] | None = None) -> DeltaTarget:
        """``delta+file:///abs/path`` or ``delta+s3://bucket/prefix``."""
        parsed = urlparse(uri) if isinstance(uri, str) else None
        if parsed is None or parsed.scheme not in SCHEMES or parsed.query \
                or parsed.fragment or parsed.params or not parsed.path.strip("/") \
                or (parsed.scheme == "delta+file" and parsed.netloc not in ("", "localhost")) \
                or (parsed.scheme == "delta+s3" and not parsed.netloc):
            raise TpcError(f"{uri!r} is not a Delta target: use delta+file:///<absolute path> "
                           "or delta+s3://<bucket>/<prefix>")
        inner = uri[len("delta+"):]
        if parsed.scheme == "delta+file":
            inner = f"file://{parsed.path}"
        return cls(inner, storage_options, delta_options)

    @property
    def uri(self) -> str:
        return f"delta+{self._location}"

    def __repr__(self) -> str:  # never the options: they hold credentials
        return f"DeltaTarget({self.uri!r})"

    def location(self, *, placed: str | None = None) -> str:
        """The table's location: its URI (``placed`` cannot move it)."""
        return self._location

    def placement_is_stable(self) -> bool:
        return True  # a Delta table is where its URI says

    def _table_uri(self) -> str:
        """The location as delta-rs takes it (a plain path for local tables)."""
        return norm_uri(self._location)

    def strategy(self, scope: dict[str, Any] | None = None) -> DeltaCommit:
        """The switch of a decision that replaces ``scope`` (its record's)."""
        return DeltaCommit(self, Scope.from_doc(scope))

    # -- the table ----------------------------------------------------------------
    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """Run a delta-rs call, turning its error into one StorageError (no options in it)."""
        from deltalake.exceptions import CommitFailedError, TableNotFoundError

        try:
            return fn(*args, **kwargs)
        except (TableNotFoundError, CommitFailedError, TpcError):
            raise  # answers the caller acts on
        except Exception as exc:
            raise StorageError(f"Delta table {self.uri}: failed to {what}: "
                               f"{type(exc).__name__}: {_first_line(exc)}") from None

    def load_table(self, version: int | None = None) -> DeltaTable | None:
        """The table (at ``version``, default the latest), or None if it does not exist
        yet (it is created by the first commit)."""
        _need_deltalake()
        from deltalake import DeltaTable
        from deltalake.exceptions import TableNotFoundError

        try:
            return self._call("load", DeltaTable, self._table_uri(), version=version,
                              storage_options=self._delta_options or None)
        except TableNotFoundError:
            return None

    def arrow_filesystem(self) -> tuple[pafs.FileSystem, str]:
        """pyarrow's own filesystem for the table's store and the table's path in it.

        Reading through pyarrow's native filesystem (not delta-rs's Python file
        handler, which ``to_pyarrow_dataset()`` uses by default) also avoids a known
        abort at interpreter exit of that handler with pyarrow's I/O threads."""
        import pyarrow.fs as pafs

        if urlparse(self._location).scheme == "file":
            return pafs.LocalFileSystem(), norm_uri(self._location)
        opts = self._storage_options
        client = dict(opts.get("client_kwargs") or {})
        endpoint = opts.get("endpoint_url") or client.get("endpoint_url")
        kwargs: dict[str, Any] = {}
        if endpoint:
            parsed = urlparse(str(endpoint))
            kwargs.update(endpoint_override=parsed.netloc + parsed.path.rstrip("/"),
                          scheme=parsed.scheme or "https")
        region = opts.get("region_name") or client.get("region_name")
        if region:
            kwargs["region"] = region
        if opts.get("key"):
            kwargs.update(access_key=opts["key"], secret_key=opts.get("secret"),
                          session_token=opts.get("token"))
        return pafs.S3FileSystem(**kwargs), self._location[len("s3://"):]

    def pyarrow_dataset(self, version: int | None = None) -> pads.Dataset:
        """The table (at ``version``) as a pyarrow dataset of exactly the files its log
        names: what DuckDB, pandas and pyarrow read committed data through."""
        import pyarrow.fs as pafs

        table = self.load_table(version)
        if table is None:
            raise TpcError(f"Delta table {self.uri} does not exist yet")
        fs, root = self.arrow_filesystem()
        return table.to_pyarrow_dataset(filesystem=pafs.SubTreeFileSystem(root, fs))

    def create_table(self, schema: pa.Schema, adds: list[Any], props: Any,
                     layout: bool = True) -> None:
        """Create the table (version 0) holding the epoch's staged files: one commit;
        partitioned by ``epoch`` (``layout``), else unpartitioned (an append)."""
        from deltalake.schema import Schema
        from deltalake.transaction import create_table_with_add_actions

        try:
            create_table_with_add_actions(
                self._table_uri(),
                Schema.from_arrow(_relaxed(_with_epoch(schema) if layout else schema)), adds,
                mode="error", partition_by=[EPOCH_COLUMN] if layout else None,
                storage_options=self._delta_options or None, commit_properties=props)
        except Exception as exc:
            if "already exists" in str(exc):  # another writer created it meanwhile
                raise TableCreatedMeanwhile(str(exc)) from None
            raise StorageError(f"Delta table {self.uri}: failed to create: "
                               f"{type(exc).__name__}: {_first_line(exc)}") from None
        log.info("created Delta table %s, %s", self.uri,
                 f"partitioned by {EPOCH_COLUMN}" if layout else "unpartitioned")

    def highest_attempt(self, epoch: str, namespace: str) -> int:
        table = self.load_table()
        if table is None:
            return 0
        return int(self._call("read the txn of", table.transaction_version,
                              app_id(namespace, epoch)) or 0)

    def commit_infos(self) -> list[dict[str, Any]]:
        """The ``commitInfo`` of every commit still in ``_delta_log``, newest first, each
        with its ``version`` — read from the log files through airflow-tpc's store (as
        ``DeltaTable.history()`` would, which fails on some S3-compatible stores)."""
        log_dir = self.storage.join(self._root, LOG_DIR)
        out: list[dict[str, Any]] = []
        try:
            for obj in self.storage.list(log_dir):
                name = obj.path.rsplit("/", 1)[-1]
                stem = name[:-len(".json")]
                if not (name.endswith(".json") and stem.isdigit() and len(stem) == 20):
                    continue
                for line in (self.storage.read_bytes(obj.path) or b"").splitlines():
                    action = json.loads(line) if line.strip() else {}
                    if isinstance(action.get("commitInfo"), dict):
                        out.append({**action["commitInfo"], "version": int(stem)})
                        break
        except StorageError:
            raise
        except Exception as exc:
            raise StorageError(f"cannot read the log of Delta table {self.uri}: "
                               f"{type(exc).__name__}: {_first_line(exc)}") from None
        return sorted(out, key=lambda info: -info["version"])

    def commits_of(self, epoch: str, namespace: str) -> dict[str, int]:
        """``{manifest digest: version}`` of the epoch's airflow-tpc commits that the
        retained log's ``commitInfo`` records."""
        out: dict[str, int] = {}
        for info in self.commit_infos():
            if info.get(PROP_EPOCH) == epoch and info.get(PROP_NAMESPACE) == namespace \
                    and info.get(PROP_DIGEST):
                out.setdefault(str(info[PROP_DIGEST]), int(info["version"]))
        return out

    def table_version(self, epoch: str, namespace: str,
                      digest: str) -> dict[str, str] | None:
        """The Delta version whose ``commitInfo`` carries this manifest's digest."""
        version = self.commits_of(epoch, namespace).get(digest)
        if version is None:
            return None
        return {"table": self.uri, "format": "delta", "version": str(version)}

    def referenced_files(self) -> set[str]:
        """Every data file a retained version may reference (normalised URIs): the
        ``add`` and ``remove`` paths of every commit file still in ``_delta_log`` and the
        ``add`` paths of its checkpoints.  Read from the log itself: a superset of what
        any version that can still be loaded references, so time travel keeps working.
        Unreadable log: a StorageError (the sink's cleanup then deletes nothing)."""
        import io

        import pyarrow.parquet as pq

        log_dir = self.storage.join(self._root, LOG_DIR)
        paths: set[str] = set()
        try:
            entries = self.storage.list(log_dir)
            for obj in entries:
                name = obj.path.rsplit("/", 1)[-1]
                if name.endswith(".json") and not name.startswith("_"):
                    raw = self.storage.read_bytes(obj.path) or b""
                    for line in raw.splitlines():
                        if not line.strip():
                            continue
                        action = json.loads(line)
                        for kind in ("add", "remove"):
                            if isinstance(action.get(kind), dict):
                                paths.add(action[kind]["path"])
                elif name.endswith(".parquet"):  # checkpoints (classic, multi-part, v2)
                    raw = self.storage.read_bytes(obj.path) or b""
                    pf = pq.ParquetFile(io.BytesIO(raw))
                    if "add" not in pf.schema_arrow.names:
                        continue
                    for add in pf.read(columns=["add"]).column("add").to_pylist():
                        if add and add.get("path"):
                            paths.add(add["path"])
        except StorageError:
            raise
        except Exception as exc:
            raise StorageError(f"cannot read the log of Delta table {self.uri}: "
                               f"{type(exc).__name__}: {exc}") from None
        return {self._absolute(p) for p in paths}

    def _absolute(self, path: str) -> str:
        """A log path (relative and URL-encoded, or an absolute URI) as a normalised URI."""
        if "://" in path:
            return norm_uri(unquote(path))
        return norm_uri(f"{self._location}/{unquote(path)}")

    def file_uri(self, path: str) -> str:
        """A log path as the URI airflow-tpc names files by (``file:///…``, ``s3://…``)."""
        if "://" in path:
            return unquote(path)
        return f"{self._location}/{unquote(path)}"

    def relative(self, uri: str) -> str:
        """A staged file's URI as the add action's path: relative to the table, URL-encoded."""
        base = norm_uri(self._location).rstrip("/") + "/"
        own = norm_uri(uri)
        if not own.startswith(base):
            raise TpcError(f"{uri} is not inside Delta table {self.uri}")
        return quote(own[len(base):], safe="/=-_.~")

    # -- what the staged files must be ---------------------------------------------
    def read_footers(self, uris: list[str]) -> tuple[dict[str, Any], list[str]]:
        """Each staged file's Parquet footer (``{uri: FileMetaData}``), read once and in
        parallel, and the problems of those that cannot be read."""
        if not uris:
            return {}, []
        fs, _ = self.arrow_filesystem()
        return read_footers(lambda uri: fs.open_input_file(self.arrow_path(uri)), uris)

    @staticmethod
    def arrow_path(uri: str) -> str:
        """A file's URI (``file:///…``, ``s3://…``) as a path of :meth:`arrow_filesystem`."""
        return norm_uri(uri) if uri.startswith("file://") else uri[len("s3://"):]

    footers = read_footers

    def table_key(self, table: DeltaTable | None,
                  scope: Scope | None = None) -> dict[str, Any] | None:
        """What the check depends on: the table's id, schema and partition columns."""
        if table is None:
            return None
        meta = self._call("read the metadata of", table.metadata)
        key = {"id": str(meta.id), "partition_columns": list(meta.partition_columns),
               "schema": self._call("read the schema of", table.schema).to_json()}
        if scope is not None and scope.kind != "epoch":
            key["scope"] = scope.to_doc()
        return key

    def file_stats(self, footers: dict[str, Any], table: DeltaTable | None
                   ) -> dict[str, dict[str, Any]]:
        """Per file: its rows (the add action's ``numRecords``) and, for a table of its
        own partitioning, its ``partitionValues`` (found by the last check)."""
        return {uri: {"rows": md.num_rows,
                      **({"partition": self._partitions[uri]} if uri in self._partitions
                         else {})}
                for uri, md in footers.items()}

    def scope_for(self, table: DeltaTable, scope: Scope) -> DeltaScope:
        """``scope`` bound to the table's schema and partition columns."""
        import pyarrow as pa

        meta = self._call("read the metadata of", table.metadata)
        schema = pa.schema(self._call("read the schema of", table.schema).to_arrow())
        bound = DeltaScope(scope, schema, list(meta.partition_columns))
        mapping = (meta.configuration or {}).get("delta.columnMapping.mode", "none")
        if bound.data_columns and mapping != "none":
            bound.problems.append(
                f"replace_where {scope.where!r} names data columns "
                f"({', '.join(bound.data_columns)}) of a table with column mapping "
                f"({mapping!r}): its files name columns physically, and airflow-tpc reads "
                "them by name; use a predicate over partition columns")
        return bound

    def partitions(self, footers: dict[str, Any], uris: list[str], bound: DeltaScope
                   ) -> tuple[dict[str, dict[str, str | None]], list[str]]:
        """Each staged file's ``partitionValues`` under ``bound`` (files with rows)."""
        out: dict[str, dict[str, str | None]] = {}
        problems: list[str] = []
        for uri in uris:
            md = footers.get(uri)
            if md is None or md.num_rows == 0:
                continue
            values, problem = bound.partition_of(uri, md, md.schema.to_arrow_schema())
            if problem:
                problems.append(problem)
            elif values is not None:
                out[uri] = values
        return out, problems

    def check_staged(self, uris: list[str], epoch: str, table: DeltaTable | None, *,
                     decided: str | None = None,
                     footers: tuple[dict[str, Any], list[str]] | None = None,
                     scope: Scope | None = None) -> pa.Schema | None:
        """Refuse staged files the table cannot take, naming the files and columns.

        Every file: Parquet; if it holds an ``epoch`` column, a string whose every row
        is ``epoch``.  With a table: partitioned by exactly ``epoch``, and every file's
        columns known to the table with the table's types, no required column missing.
        Without one: every file has the same schema, one Delta can hold (the table is
        created from it).  Returns that schema (None if there are no files).
        """
        found, problems = footers if footers is not None else self.read_footers(uris)
        problems = list(problems)
        schemas = {uri: found[uri].schema.to_arrow_schema().remove_metadata()
                   for uri in uris if uri in found}
        layout = scope is None or scope.kind == "epoch"
        for uri, schema in schemas.items():
            if layout:
                problems += _epoch_problems(uri, found[uri], schema, epoch)
        self._partitions = {}
        if table is not None:
            if layout:
                problems += self._table_problems(table)
            else:
                assert scope is not None
                bound = self.scope_for(table, scope)
                problems += bound.problems
                if not bound.problems:
                    self._partitions, more = self.partitions(found, uris, bound)
                    problems += more
            want = self._table_schema(table)
            # Each distinct schema is checked once (a commit of 10k files has one or two).
            verdicts: dict[pa.Schema, list[str]] = {}
            for uri, schema in schemas.items():
                if schema not in verdicts:
                    verdicts[schema] = _schema_problems(schema, want)
                problems += [f"{uri}: {p}" for p in verdicts[schema]]
        else:
            first = next(iter(schemas.values()), None)
            if scope is not None and scope.kind == "where":
                problems.append(f"replace_where needs an existing table, and {self.uri} does "
                                "not exist: create it with the partitioning it should have "
                                "(the epoch layout, without replace_where, creates its own)")
            if first is not None:
                problems += _creatable_problems(first)
            for uri, schema in schemas.items():
                if first is not None and not _without_epoch(schema).equals(_without_epoch(first)):
                    cols = sorted({f.name for f in schema} ^ {f.name for f in first}
                                  | {f.name for f in schema if f.name in first.names
                                     and first.field(f.name).type != f.type})
                    problems.append(f"{uri} has another schema than the first staged file "
                                    f"(columns {', '.join(cols)}); a new table is created from "
                                    "one schema")
        if problems:
            raise schema_error("Delta", self.uri, epoch, problems, decided)
        return next(iter(schemas.values()), None)

    def _table_schema(self, table: DeltaTable) -> Any:
        return self._call("read the schema of", table.schema)

    def _table_problems(self, table: DeltaTable) -> list[str]:
        parts = list(self._call("read the metadata of", table.metadata).partition_columns)
        if parts != [EPOCH_COLUMN]:
            return [f"table {self.uri} is partitioned by {parts or 'nothing'}, not by "
                    f"[{EPOCH_COLUMN!r}]; airflow-tpc replaces an epoch by whole files, so "
                    "each file must hold one epoch"]
        return []


def _with_epoch(schema: pa.Schema) -> pa.Schema:
    import pyarrow as pa

    if EPOCH_COLUMN in schema.names:
        return schema
    return schema.append(pa.field(EPOCH_COLUMN, pa.string()))


def _without_epoch(schema: pa.Schema) -> pa.Schema:
    """The data columns: files of one epoch may differ only in holding ``epoch`` or not."""
    if EPOCH_COLUMN in schema.names:
        return schema.remove(schema.get_field_index(EPOCH_COLUMN))
    return schema


def _relaxed(schema: pa.Schema) -> pa.Schema:
    """A new table's columns are all nullable: a later epoch's files (another task
    writing a column NULL-able) are then not refused for nullability alone."""
    import pyarrow as pa

    return pa.schema([f.with_nullable(True) for f in schema])


def _delta_types(schema: pa.Schema) -> dict[str, str]:
    """Each column's Delta type (as Delta names it), or raise for one Delta has none for."""
    from deltalake.schema import Schema

    delta = Schema.from_arrow(schema)
    return {f.name: _type_name(f.type) for f in delta.fields}


def _type_name(typ: Any) -> str:
    """A Delta type's name: primitive types by name, nested ones by their JSON."""
    name = getattr(typ, "type", None)
    if isinstance(name, str):  # PrimitiveType: "long", "string" ...
        return name
    return str(typ.to_json()) if hasattr(typ, "to_json") else str(typ)


def _first_line(exc: Exception) -> str:
    """delta-rs's message without the Rust backtrace it appends."""
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _epoch_problems(uri: str, md: Any, schema: pa.Schema, epoch: str) -> list[str]:
    """If the file holds an ``epoch`` column, every row must hold this epoch."""
    if EPOCH_COLUMN not in schema.names:
        return []  # Delta takes the value from the log's partitionValues
    return epoch_column_problems(uri, md, schema, epoch)


def _creatable_problems(schema: pa.Schema) -> list[str]:
    try:
        _delta_types(_with_epoch(schema))
    except Exception as exc:
        return [f"no Delta table can be created from the staged schema: {_first_line(exc)}"]
    return []


def _schema_problems(schema: pa.Schema, want: Any) -> list[str]:
    """Name the columns of a staged file that do not fit the table's schema."""
    fields = {f.name: f for f in want.fields}
    have = set(schema.names)
    unknown = sorted(have - set(fields))
    missing = sorted(n for n, f in fields.items()
                     if not f.nullable and n not in have and n != EPOCH_COLUMN)
    mismatched = []
    for name in sorted(have & set(fields)):
        import pyarrow as pa

        try:
            got = _delta_types(pa.schema([schema.field(name)]))[name]
        except Exception:
            mismatched.append(f"{name} ({schema.field(name).type} in the file: no Delta type)")
            continue
        table_type = _type_name(fields[name].type)
        if got != table_type:
            mismatched.append(f"{name} ({got} in the file, {table_type} in the table)")
    parts = []
    if unknown:
        parts.append(f"columns not in the table: {', '.join(unknown)}")
    if missing:
        parts.append(f"required columns missing: {', '.join(missing)}")
    if mismatched:
        parts.append(f"columns of another type: {', '.join(mismatched)}")
    return ["; ".join(parts)] if parts else []


class DeltaCommit(Strategy):
    """The switch is one Delta commit: ``remove`` the epoch's current files, ``add`` the
    staged ones where they are, with the epoch's ``txn`` at this attempt.

    Idempotent through the ``txn``: the epoch's ``txn`` version at this attempt means
    an earlier run committed it (a crash before the ledger recorded it) — only the
    marker is written then.  A higher version means this attempt is stale: never
    applied (returns False).  Another writer's commit meanwhile makes ours fail on
    its stale base (delta-rs's own retry is off): we reload, re-check and recompute.
    """

    name = "delta"

    def __init__(self, target: DeltaTarget, scope: Scope | None = None) -> None:
        self.target = target
        self.scope = scope or Scope()

    def switch(self, layout: Layout, manifest: Manifest, staging: str, dst: str,
               version: str | None) -> bool:
        from deltalake.exceptions import CommitFailedError

        storage = layout.storage
        uris = [storage.uri(storage.join(staging, f.path)) for f in manifest.files]
        appid = app_id(manifest.namespace, manifest.epoch)
        sealed = read_sealed_stats(storage, layout.sealed(manifest.epoch, manifest.attempt),
                                   manifest)
        footers: tuple[dict[str, Any], list[str]] | None = None
        for _ in range(COMMIT_RETRIES):
            table = self.target.take_table(manifest.txn_id)
            if table is not None:
                seen = int(self.target._call("read the txn of", table.transaction_version,
                                             appid) or 0)
                if seen > manifest.attempt:
                    log.warning("%s not applied: Delta table %s already holds attempt %d of "
                                "epoch %s", manifest.txn_id, self.target.uri, seen,
                                manifest.epoch)
                    return False
                if seen == manifest.attempt:
                    self._check_same(table, manifest)
                    log.info("%s is already in %s (a commit finished before the ledger "
                             "recorded it): no second version", manifest.txn_id,
                             self.target.uri)
                    break
            # The table as pre-commit checked it (same id, schema, partitioning): the
            # check holds, and a change from here on conflicts with our commit.  A new
            # table is made from the files' schema: read (once, in parallel) then.
            schema = None
            if table is None or sealed is None \
                    or sealed["table"] != self.target.table_key(table, self.scope):
                footers = footers or self.target.read_footers(uris)
                schema = self.target.check_staged(uris, manifest.epoch, table,
                                                  decided=manifest.txn_id, footers=footers,
                                                  scope=self.scope)
                if table is None and schema is None:
                    break  # nothing staged and no table: nothing to replace
            crashpoint("delta.before_table_commit")
            try:
                self._commit(table, manifest, uris, schema, sealed, footers)
            except (CommitFailedError, TableCreatedMeanwhile) as exc:
                log.info("Delta commit of %s lost a race (%s); retrying on the new version",
                         manifest.txn_id, exc)
                continue
            crashpoint("delta.after_table_commit")
            break
        else:
            raise StorageError(f"Delta table {self.target.uri} kept changing under "
                               f"{COMMIT_RETRIES} commits of {manifest.txn_id}; the decision is "
                               "kept and the next commit or recover tries again")
        paths = [_rel_to_root(layout, storage.join(staging, f.path)) for f in manifest.files]
        crashpoint("promote.before_marker")
        return _swap_marker(layout, manifest, self.name, paths, version)

    def _check_same(self, table: DeltaTable, manifest: Manifest) -> None:
        """The epoch's txn is at this attempt: it must be this manifest (a number reused
        after the ledger was lost, with other files, is refused and changes nothing)."""
        commits = self.target.commits_of(manifest.epoch, manifest.namespace)
        if manifest.digest in commits:
            return
        for info in self.target.commit_infos():
            if info.get(PROP_EPOCH) == manifest.epoch \
                    and info.get(PROP_NAMESPACE) == manifest.namespace \
                    and info.get(PROP_ATTEMPT) == str(manifest.attempt):
                raise LedgerError(
                    f"Delta table {self.target.uri} holds attempt {manifest.attempt} of epoch "
                    f"{manifest.epoch} with another manifest than {manifest.digest}; the "
                    "attempt number was reused after the ledger was lost. Nothing was changed.")
        # The commitInfo was dropped with old log files; the txn alone says it is done.

    def _commit(self, table: DeltaTable | None, manifest: Manifest, uris: list[str],
                schema: pa.Schema | None, sealed: dict[str, Any] | None = None,
                footers: tuple[dict[str, Any], list[str]] | None = None) -> None:
        """One Delta commit: remove the epoch's files, add the staged ones (no copy).

        Each add's ``numRecords`` comes from the sealed statistics (checked by the
        manifest's digest), else the footers already read, else one parallel read."""
        from deltalake import CommitProperties, Transaction
        from deltalake.transaction import AddAction

        rows: dict[str, int] = {}
        if sealed is not None:
            rows = {u: int(sealed["files"][f.path]["rows"])
                    for u, f in zip(uris, manifest.files, strict=True)
                    if "rows" in sealed["files"][f.path]}
        missing = [u for u in uris if u not in rows]
        if missing:
            found, problems = footers if footers is not None else ({}, [])
            if any(u not in found for u in missing):
                found, problems = self.target.read_footers(missing)
            if problems:
                raise StorageError("; ".join(problems[:5]))
            rows.update({u: found[u].num_rows for u in missing})
        now = int(time.time() * 1000)
        sizes = {u: f.size for u, f in zip(uris, manifest.files, strict=True)}
        layout = self.scope.kind == "epoch"
        parts = {u: {EPOCH_COLUMN: manifest.epoch} for u in uris} if layout \
            else self._partitions(table, manifest, uris, sealed, footers)
        # A file without rows (Spark writes one for an empty task) adds nothing.
        adds = [AddAction(self.target.relative(u), sizes[u], parts[u],
                          now, True, json.dumps({"numRecords": rows[u]}))
                for u in uris if rows[u] > 0]
        props = CommitProperties(
            custom_metadata=commit_properties(manifest), max_commit_retries=0,
            app_transactions=[Transaction(app_id(manifest.namespace, manifest.epoch),
                                          manifest.attempt)])
        if table is None:
            assert schema is not None
            self.target.create_table(schema, adds, props, layout=layout)
        elif layout:
            removes = self._epoch_removes(table, manifest.epoch, now)
            self.target._call("commit to", table.create_write_transaction,
                              [*removes, *adds], "append", table.schema(),
                              partition_by=[EPOCH_COLUMN], commit_properties=props)
        else:
            bound = self.target.scope_for(table, self.scope)
            removes, rewritten = scope_actions(self.target, table, bound, now,
                                               manifest.txn_id)
            self.target._call("commit to", table.create_write_transaction,
                              [*removes, *rewritten, *adds], "append", table.schema(),
                              partition_by=bound.partition_columns or None,
                              commit_properties=props)
        log.info("Delta %s: epoch %s is attempt %d (%d files)", self.target.uri,
                 manifest.epoch, manifest.attempt, len(adds))

    def _partitions(self, table: DeltaTable | None, manifest: Manifest, uris: list[str],
                    sealed: dict[str, Any] | None,
                    footers: tuple[dict[str, Any], list[str]] | None
                    ) -> dict[str, dict[str, str | None]]:
        """Each staged file's ``partitionValues`` for a table of its own partitioning:
        sealed at pre-commit, else from the footers (read once)."""
        if table is None:  # an append creating the table: unpartitioned
            return {u: {} for u in uris}
        if sealed is not None and all("partition" in sealed["files"][f.path]
                                      for f in manifest.files if sealed["files"][f.path]
                                      .get("rows", 1)):
            return {u: sealed["files"][f.path].get("partition", {})
                    for u, f in zip(uris, manifest.files, strict=True)}
        found, problems = footers if footers is not None else self.target.read_footers(uris)
        out, more = self.target.partitions(found, uris, self.target.scope_for(table,
                                                                               self.scope))
        if problems or more:
            raise StorageError("; ".join([*problems, *more][:5]))
        return {u: out.get(u, {}) for u in uris}

    def _epoch_removes(self, table: DeltaTable, epoch: str, now: int) -> list[Any]:
        """``remove`` actions for the data files of partition ``epoch`` now in the table."""
        import pyarrow as pa
        from deltalake.transaction import RemoveAction

        actions = pa.table(self.target._call("list the files of", table.get_add_actions,
                                             flatten=True))
        col = f"partition.{EPOCH_COLUMN}"
        out = []
        for row in actions.select(["path", "size_bytes", col]).to_pylist():
            if row[col] == epoch:
                out.append(RemoveAction(row["path"], True, now, row["size_bytes"],
                                        {EPOCH_COLUMN: epoch}))
        return out

    def clean(self, layout: Layout, epoch: str, attempt: int, manifest: Manifest | None,
              current: dict[str, Any] | None) -> None:
        # Nothing to delete here: the displaced attempt's files are referenced by the
        # table's earlier versions (time travel).  Its staging is removed by the sink
        # through TableLayout.remove_staging, which keeps every referenced file.
        crashpoint("promote.before_cleanup")


class DeltaSink(TableSink):
    """A :class:`~airflow_tpc.Sink` whose target is a Delta table: the shared table
    skeleton (:class:`~airflow_tpc.tables.base.TableSink`) with staging in
    ``<table>/_tpc_staging`` and :class:`DeltaCommit` as the switch."""

    format = "Delta"
    staging_dir = STAGING_DIR

    def __init__(self, target: DeltaTarget | str, namespace: str, *,
                 catalog_properties: dict[str, str] | None = None,
                 storage_options: dict[str, Any] | None = None,
                 config: SinkConfig | None = None,
                 ledger_uri: str | None = None,
                 replace_where: Any = None, mode: str = "replace",
                 add_columns: bool = False) -> None:
        scope = Scope.of(replace_where, mode, add_columns)
        if scope.add_columns:
            raise TpcError("add_columns is supported for Iceberg targets; a Delta target "
                           "refuses a column its table lacks")
        if isinstance(target, str):
            target = DeltaTarget.parse(target, storage_options, catalog_properties)
        super().__init__(target, namespace, storage_options=storage_options, config=config,
                         ledger_uri=ledger_uri, scope=scope)
        self.table_target: DeltaTarget = target

    def committed_files(self, epochs: Any = None) -> dict[str, list[str]]:
        """Read-committed view from the table's log (what Delta readers read): epoch ->
        URIs of its current data files, for the epochs this pipeline committed (its
        ``txn`` is in the table).  Not from the markers: Delta's full vacuum deletes
        files under ``epoch=E/`` that the log does not name, markers included (the
        next recover writes them again)."""
        import pyarrow as pa

        table = self.table_target.load_table()
        if table is None:
            return {}
        wanted = None if epochs is None else {str(e) for e in epochs}
        actions = pa.table(self.table_target._call("list the files of", table.get_add_actions,
                                                   flatten=True))
        col = f"partition.{EPOCH_COLUMN}"
        by_epoch: dict[str, list[str]] = {}
        for row in actions.select(["path", col]).to_pylist():
            epoch = row[col]
            if epoch is not None and (wanted is None or epoch in wanted):
                by_epoch.setdefault(epoch, []).append(self.table_target.file_uri(row["path"]))
        out = {e: sorted(files) for e, files in by_epoch.items()
               if table.transaction_version(app_id(self.namespace, e))}
        return dict(sorted(out.items(), key=lambda kv: epoch_sort_key(kv[0])))
