"""airflow-tpc: exactly-once output for Spark batch pipelines via a two-phase commit per epoch.

The package root is the pure protocol (no Airflow import): :class:`Sink` and its
verbs begin / precommit / commit / abort / recover.  Airflow operators live in
``airflow_tpc.airflow``; job-side Spark helpers in ``airflow_tpc.spark``.
"""

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
from .group import Group, GroupTransaction
from .manifest import FileEntry, Manifest
from .sink import Sink
from .transaction import (
    CommitResult,
    DeliveryGuarantee,
    RecoveryReport,
    SinkConfig,
    Transaction,
    TxnInfo,
    TxnState,
)

__version__ = "0.1.0"

__all__ = [
    "CommitConflict", "CommitResult", "DeliveryGuarantee", "FencedError", "FileEntry", "Group",
    "GroupMemberError", "GroupTransaction",
    "InvalidState", "LedgerError", "Manifest", "ManifestError", "NamespaceConflict",
    "PlacementError", "RecoveryReport", "Sink", "SinkConfig", "StorageError", "TpcError",
    "Transaction", "TransactionExpired", "TxnInfo", "TxnState", "UnsupportedStorage", "__version__",
]
