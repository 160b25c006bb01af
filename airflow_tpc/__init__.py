"""airflow-tpc: exactly-once output for Spark batch pipelines via a two-phase commit per epoch.

The protocol core (no Airflow import) is ``airflow_tpc.core``: :class:`Sink` and its verbs
begin / precommit / commit / abort / recover; group transactions are ``airflow_tpc.group``;
the command line ``airflow_tpc.cli``; stores and table formats ``airflow_tpc.storage`` and
``airflow_tpc.tables``; Airflow operators ``airflow_tpc.airflow``; job-side Spark helpers
``airflow_tpc.spark``.  docs/ARCHITECTURE.md draws the house.
"""

from . import _moved
from .core.manifest import FileEntry, Manifest
from .core.sink import Sink
from .core.transaction import (
    CommitResult,
    DeliveryGuarantee,
    RecoveryReport,
    SinkConfig,
    Transaction,
    TxnInfo,
    TxnState,
)
from .errors import (
    CommitConflict,
    FencedError,
    GroupMemberError,
    InvalidState,
    LedgerError,
    ManifestError,
    NamespaceConflict,
    PlacementError,
    StorageError,
    TpcError,
    TransactionExpired,
    UnsupportedStorage,
)
from .group.group import Group, GroupTransaction

_moved.install()  # 0.1's root module paths (sink, manifest, ...) import with a warning

__version__ = "0.1.0"

__all__ = [
    "CommitConflict", "CommitResult", "DeliveryGuarantee", "FencedError", "FileEntry", "Group",
    "GroupMemberError", "GroupTransaction",
    "InvalidState", "LedgerError", "Manifest", "ManifestError", "NamespaceConflict",
    "PlacementError", "RecoveryReport", "Sink", "SinkConfig", "StorageError", "TpcError",
    "Transaction", "TransactionExpired", "TxnInfo", "TxnState", "UnsupportedStorage", "__version__",
]
