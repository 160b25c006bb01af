"""Errors raised by airflow-tpc.

Every protocol refusal is a :class:`TpcError` with a message meant for the person
reading an Airflow task log: it names the target, epoch and attempt involved and
what to do next.  Library exceptions (botocore, OSError) are wrapped in
:class:`StorageError` so a traceback from deep inside a client is never the message.
"""

from __future__ import annotations


class TpcError(Exception):
    """Base class of every error airflow-tpc raises on purpose."""


class StorageError(TpcError):
    """The store refused or failed an operation (after retries).

    ``denied``: the store answered "access denied" (S3 403, a local permission error),
    which no retry changes."""

    def __init__(self, *args: object, denied: bool = False) -> None:
        super().__init__(*args)
        self.denied = denied


class LedgerError(TpcError):
    """A ledger record or published marker is damaged, or does not belong where it lies.

    Records are never rewritten by airflow-tpc, so this means a hand edit, a copy
    from another epoch or target, or a store that lost data.  Nothing is promoted
    or deleted on the strength of such a record.
    """


class UnsupportedStorage(TpcError):
    """The target's store has no tested exactly-once backend."""


class ManifestError(TpcError):
    """A manifest is malformed, tampered with, or does not match storage."""


class FencedError(TpcError):
    """A lower attempt tried to act after a higher attempt of the epoch began (zombie)."""


class CommitConflict(TpcError):
    """Another committer decided this transaction differently."""


class NamespaceConflict(TpcError):
    """The target is already owned by another pipeline's namespace."""


class TransactionExpired(TpcError):
    """The transaction is older than its timeout; committing it needs ``force=True``."""


class InvalidState(TpcError):
    """The requested verb is not allowed in the transaction's current state."""


class GroupMemberError(InvalidState):
    """A target's attempt belongs to a group transaction: only the group's decision
    decides it (commit or abort the group, :class:`airflow_tpc.group.Group`)."""


class PlacementError(TpcError):
    """The target would lie inside, contain, or be named like another target's machinery
    (see :mod:`airflow_tpc.core.placement`)."""
