"""One Delta table at its location, as the table skeleton asks of it (through delta-rs).

:class:`DeltaLakeTable` is everything :class:`~airflow_tpc.tables.target.TableTarget`
asks of a table but its switch: the table loaded and created through delta-rs (every
error one StorageError, no option in it), its store (:mod:`.delta_store`), the files
its log references, the epoch's commits (its application transaction, its
``commitInfo``), and the format's side of the staged-file check (:mod:`.delta_files`).
The target users name, :class:`~airflow_tpc.tables.delta.DeltaTarget`, adds the switch
(:class:`~airflow_tpc.tables.delta_commit.DeltaCommit`).
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import quote, unquote, urlparse

from ..errors import StorageError, TpcError
from ..storage import open_storage
from ..storage.azure_options import AZURE_SCHEMES
from .delta_files import creatable_problems, new_table_schema, schema_problems, without_epoch
from .delta_scope import DeltaScope
from .delta_store import (
    arrow_filesystem,
    commit_infos,
    delta_azure_options,
    delta_storage_options,
    first_line,
    log_paths,
)
from .scope import Scope
from .staged import EPOCH_COLUMN, norm_uri
from .target import (
    EPOCH_SCOPE,
    PROP_DIGEST,
    PROP_EPOCH,
    PROP_NAMESPACE,
    Footers,
    TableTarget,
)

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa
    import pyarrow.dataset as pads
    import pyarrow.fs as pafs
    from deltalake import DeltaTable

log = logging.getLogger("airflow_tpc")

T = TypeVar("T", bound="DeltaLakeTable")

LOG_DIR = "_delta_log"
SCHEMES = {"delta+file": "file", "delta+s3": "s3", "delta+az": "az", "delta+abfs": "abfs",
           "delta+abfss": "abfss"}
#: What a bad Delta target is told to write instead.
DELTA_SPELLINGS = ("delta+file:///<path>, delta+s3://<bucket>/<prefix>, "
                   "delta+az://<container>/<path> or delta+abfss://<container>@<account>."
                   "dfs.core.windows.net/<path>")


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


class TableCreatedMeanwhile(Exception):
    """Our creating commit lost to another writer's: retried on the table it made."""


class DeltaLakeTable(TableTarget):
    """One Delta table, named by its location: ``delta+file:///path`` or
    ``delta+s3://bucket/prefix``.

    ``storage_options``: airflow-tpc's store options (as for folder targets);
    ``delta_options``: extra delta-rs storage options merged over the translation.
    """

    format = "delta"
    label = "Delta"

    def __init__(self, location: str, storage_options: dict[str, Any] | None = None,
                 delta_options: dict[str, str] | None = None) -> None:
        self._location = location.rstrip("/")
        scheme = urlparse(self._location).scheme
        if scheme not in SCHEMES.values():
            raise TpcError(f"invalid Delta table location {location!r}: use {DELTA_SPELLINGS}")
        # A store for the log and footers, opened the way the sink opens its own.
        self.storage, self._root = open_storage(self._location, storage_options)
        self._storage_options = dict(storage_options or {})
        #: Staged files' partitionValues found by the last check (a table of its own
        #: partitioning), sealed with their statistics.
        self._partitions: dict[str, dict[str, str | None]] = {}
        translated = delta_storage_options(storage_options) if scheme == "s3" else \
            delta_azure_options(self.storage) if scheme in AZURE_SCHEMES else {}
        self._delta_options = {**translated, **(delta_options or {})}

    @classmethod
    def for_sink(cls, uri: str, catalog_properties: dict[str, str] | None,
                 storage_options: dict[str, Any] | None) -> TableTarget:
        """``catalog_properties``: extra delta-rs storage options."""
        return cls.parse(uri, storage_options, catalog_properties)

    @classmethod
    def parse(cls: type[T], uri: str, storage_options: dict[str, Any] | None = None,
              delta_options: dict[str, str] | None = None) -> T:
        """``delta+file:///abs/path``, ``delta+s3://bucket/prefix``, ``delta+az://container/
        path`` or ``delta+abfs[s]://container@account.dfs.core.windows.net/path``."""
        parsed = urlparse(uri) if isinstance(uri, str) else None
        if parsed is None or parsed.scheme not in SCHEMES or parsed.query \
                or parsed.fragment or parsed.params or not parsed.path.strip("/") \
                or (parsed.scheme == "delta+file" and parsed.netloc not in ("", "localhost")) \
                or (parsed.scheme != "delta+file" and not parsed.netloc):
            raise TpcError(f"{uri!r} is not a Delta target: use {DELTA_SPELLINGS}")
        inner = uri[len("delta+"):]
        if parsed.scheme == "delta+file":
            inner = f"file://{parsed.path}"
        return cls(inner, storage_options, delta_options)

    @property
    def uri(self) -> str:
        return f"delta+{self._location}"

    def __repr__(self) -> str:  # never the options: they hold credentials
        return f"{type(self).__name__}({self.uri!r})"

    def location(self, *, placed: str | None = None) -> str:
        """The table's location: its URI (``placed`` cannot move it)."""
        return self._location

    def placement_is_stable(self) -> bool:
        return True  # a Delta table is where its URI says

    def _table_uri(self) -> str:
        """The location as delta-rs takes it (a plain path for local tables)."""
        return norm_uri(self._location)

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
                               f"{type(exc).__name__}: {first_line(exc)}") from None

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
        """pyarrow's own filesystem for the table's store and the table's path in it."""
        return arrow_filesystem(self._location, self._storage_options)

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
        from deltalake.transaction import create_table_with_add_actions

        try:
            create_table_with_add_actions(
                self._table_uri(), new_table_schema(schema, layout), adds,
                mode="error", partition_by=[EPOCH_COLUMN] if layout else None,
                storage_options=self._delta_options or None, commit_properties=props)
        except Exception as exc:
            if "already exists" in str(exc):  # another writer created it meanwhile
                raise TableCreatedMeanwhile(str(exc)) from None
            raise StorageError(f"Delta table {self.uri}: failed to create: "
                               f"{type(exc).__name__}: {first_line(exc)}") from None
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
        with its ``version`` (:func:`~airflow_tpc.tables.delta_store.commit_infos`)."""
        return commit_infos(self.storage, self.storage.join(self._root, LOG_DIR), self.uri)

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
        """Every data file a retained version may reference (normalised URIs), read
        from the log itself (:func:`~airflow_tpc.tables.delta_store.log_paths`).
        Unreadable log: a StorageError (the sink's cleanup then deletes nothing)."""
        return {self._absolute(p) for p in log_paths(
            self.storage, self.storage.join(self._root, LOG_DIR), self.uri)}

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
    def _opener(self) -> Callable[[str], Any]:
        """Staged files are read through pyarrow's filesystem for the table's store."""
        fs, _ = self.arrow_filesystem()
        return lambda uri: fs.open_input_file(self.arrow_path(uri))

    @staticmethod
    def arrow_path(uri: str) -> str:
        """A file's URI (``file:///…``, ``s3://…``) as a path of :meth:`arrow_filesystem`."""
        return norm_uri(uri) if uri.startswith("file://") else uri.split("://", 1)[1]

    def table_key(self, table: DeltaTable | None,
                  scope: Scope = EPOCH_SCOPE) -> dict[str, Any] | None:
        """What the check depends on: the table's id, schema and partition columns."""
        if table is None:
            return self.new_table_key(scope)
        meta = self._call("read the metadata of", table.metadata)
        key = {"id": str(meta.id), "partition_columns": list(meta.partition_columns),
               "schema": self._call("read the schema of", table.schema).to_json()}
        if scope.kind != "epoch":
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

    # -- the hooks of TableTarget.check_staged -----------------------------------------
    def check_staged(self, uris: list[str], epoch: str, table: DeltaTable | None, *,
                     decided: str | None = None, footers: Footers | None = None,
                     scope: Scope = EPOCH_SCOPE) -> pa.Schema | None:
        """:meth:`TableTarget.check_staged`, the Delta way: a staged file may hold the
        ``epoch`` column or not (Delta takes a partition's value from the log); with a
        table, it is partitioned by exactly ``epoch`` (the epoch layout) and every
        file's columns are known to it with its types, no required column missing;
        without one, the files' schema is one Delta can hold."""
        self._partitions = {}  # found again by this check (a table of its own layout)
        return super().check_staged(uris, epoch, table, decided=decided, footers=footers,
                                    scope=scope)

    def _table_problems(self, table: DeltaTable, scope: Scope, found: dict[str, Any],
                        uris: list[str], so_far: list[str]) -> list[str]:
        """The epoch layout: partitioned by exactly ``epoch``.  Another scope: bound to
        the table's partitioning (:meth:`scope_for`), each file's partition values."""
        if scope.kind == "epoch":
            parts = list(self._call("read the metadata of", table.metadata).partition_columns)
            if parts != [EPOCH_COLUMN]:
                return [f"table {self.uri} is partitioned by {parts or 'nothing'}, not by "
                        f"[{EPOCH_COLUMN!r}]; airflow-tpc replaces an epoch by whole files, "
                        "so each file must hold one epoch"]
            return []
        bound = self.scope_for(table, scope)
        if bound.problems:
            return list(bound.problems)
        self._partitions, more = self.partitions(found, uris, bound)
        return more

    def _schema_check(self, table: DeltaTable, scope: Scope) -> Callable[[pa.Schema], list[str]]:
        want = self._call("read the schema of", table.schema)
        return lambda schema: schema_problems(schema, want)

    def _creatable_problems(self, schema: pa.Schema) -> list[str]:
        return creatable_problems(schema)

    @contextmanager
    def _proposed_table(self, schema: pa.Schema, scope: Scope) -> Iterator[DeltaTable]:
        """The table :meth:`create_table` would make, made by delta-rs itself with the
        same schema and partitioning in a scratch folder (removed on exit): Delta has
        no create without a location, and nothing of it reaches the table's store."""
        from deltalake import DeltaTable
        from deltalake.transaction import create_table_with_add_actions

        layout = scope.kind == "epoch"
        try:
            with tempfile.TemporaryDirectory(prefix="tpc-delta-proof-") as scratch:
                create_table_with_add_actions(
                    scratch, new_table_schema(schema, layout), [], mode="error",
                    partition_by=[EPOCH_COLUMN] if layout else None)
                yield DeltaTable(scratch)
        finally:
            # Partition values found against the scratch table are not sealed: the
            # table's first commit takes them from the table it really meets.
            self._partitions = {}

    def _data_columns(self, schema: pa.Schema) -> pa.Schema:
        """Files of one epoch may differ only in holding ``epoch`` or not."""
        return without_epoch(schema)
