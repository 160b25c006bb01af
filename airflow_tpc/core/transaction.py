"""Value types of the protocol: configuration, transactions, states, results."""

from __future__ import annotations

import enum
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from ..errors import TpcError
from .layout import AttemptId
from .manifest import Manifest

DEFAULT_TIMEOUT_S = 7 * 24 * 3600.0


class TxnState(str, enum.Enum):
    """A transaction's state (derived in one place: :func:`~.records.derive_state`)."""

    OPEN = "OPEN"
    PRECOMMITTED = "PRECOMMITTED"
    COMMITTED = "COMMITTED"
    ABORTED = "ABORTED"
    EXPIRED = "EXPIRED"
    #: A commit decision that roll-forward gave up after its timeout
    #: (``ignore_failures_after_timeout``): decided, never published.
    ABANDONED = "ABANDONED"

    def __str__(self) -> str:
        return self.value


class DeliveryGuarantee(str, enum.Enum):
    """What a sink promises (as Flink's KafkaSink): exactly-once unless you opt out."""

    EXACTLY_ONCE = "EXACTLY_ONCE"
    AT_LEAST_ONCE = "AT_LEAST_ONCE"
    NONE = "NONE"

    def __str__(self) -> str:
        return self.value


PROMOTION_MODES = ("move", "manifest")
VERIFY_MODES = ("fingerprint", "checksum", "size")


@dataclass(frozen=True)
class SinkConfig:
    """Knobs of one sink.  Defaults are the safe ones.

    timeout_s: a transaction older than this is EXPIRED: recover aborts it and
        commit refuses it unless forced.  Must exceed the DAG's interval plus its
        longest restart, or pre-committed data is thrown away (loudly).
    warn_fraction: past this fraction of it, every pre-commit, commit and recover of
        the transaction logs a warning.
    promotion: "move" publishes files under ``<target>/epoch=<E>/`` (a directory
        swap locally, parallel server-side copies on S3); "manifest" publishes the
        list only and leaves files where they were staged (zero copy).
    verify: how commit (and every roll-forward) checks that staging is still what
        was sealed.  "fingerprint" (default): ETags where the store lists them (S3),
        else the file status recorded at pre-commit (device, inode, size, mtime,
        ctime) — catches a same-size rewrite without reading a byte; "checksum":
        re-hash every file (the explicit, slow option); "size": sizes only.
    allow_foreign_namespace: let this namespace write a target claimed by another.
    staging_root: staging somewhere else on the same store (default
        ``<target>/_tpc/staging``).
    """

    timeout_s: float = DEFAULT_TIMEOUT_S
    warn_fraction: float = 0.8
    promotion: str = "move"
    verify: str = "fingerprint"
    allow_foreign_namespace: bool = False
    copy_workers: int = 16
    staging_root: str | None = None

    def __post_init__(self) -> None:
        if self.promotion not in PROMOTION_MODES:
            raise TpcError(f"promotion must be one of {PROMOTION_MODES}, not {self.promotion!r}")
        if self.verify not in VERIFY_MODES:
            raise TpcError(f"verify must be one of {VERIFY_MODES}, not {self.verify!r}")
        if not self.timeout_s > 0:
            raise TpcError("timeout_s must be positive")
        if not 0 < self.warn_fraction <= 1:
            raise TpcError("warn_fraction must be in (0, 1]")


@dataclass(frozen=True)
class Transaction(AttemptId):
    """One attempt at one epoch of one target: (namespace, epoch, attempt).

    ``attempt`` is the fencing number: strictly higher for every new attempt of
    the epoch, allocated from the ledger, so a zombie attempt can always be told
    apart from the live one.
    """

    namespace: str
    target: str
    epoch: str
    attempt: int
    staging_uri: str
    started_at: float
    timeout_s: float

    def age(self, now: float | None = None) -> float:
        return (time.time() if now is None else now) - self.started_at

    def expired(self, now: float | None = None) -> bool:
        return self.age(now) > self.timeout_s

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> Transaction:
        try:
            return cls(str(doc["namespace"]), str(doc["target"]), str(doc["epoch"]),
                       int(doc["attempt"]), str(doc["staging_uri"]), float(doc["started_at"]),
                       float(doc["timeout_s"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise TpcError(f"not a transaction description: missing or bad {exc}") from None


@dataclass(frozen=True)
class CommitResult:
    txn: Transaction
    outcome: str  # "committed" | "already_committed" | "superseded"
    manifest: Manifest
    rolled_forward: list[tuple[str, int]] = field(default_factory=list)


@dataclass
class RecoveryReport:
    rolled_forward: list[tuple[str, int]] = field(default_factory=list)
    aborted: list[tuple[str, int, str]] = field(default_factory=list)
    abandoned: list[tuple[str, int, str]] = field(default_factory=list)
    errors: list[tuple[str, int, str]] = field(default_factory=list)
    cleaned: list[tuple[str, int]] = field(default_factory=list)
    #: The finishing steps (:class:`~airflow_tpc.core.finisher.FinishStep`) recover carried out
    #: on decided epochs, or in a dry run would carry out: the finisher's plan.
    finishing: list[Any] = field(default_factory=list)
    #: True when nothing was done: the lists say what recover *would* do.
    dry_run: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class AttemptStatus:
    """What :meth:`Sink.poll` answers: the attempt's state, the epoch's highest attempt
    (above this one: fenced), an abort's reason, and the manifest while it is staged."""

    state: TxnState
    highest_attempt: int
    reason: str | None
    manifest: Manifest | None
    #: Whether the attempt's ledger lists ``validated.json`` (PROTOCOL §3.4.11): a sensor
    #: that validated ``manifest`` records it only when not.
    validated: bool = False


@dataclass(frozen=True)
class TxnInfo:
    """What ``describe`` shows of one transaction."""

    epoch: str
    attempt: int
    txn_id: str
    state: TxnState
    published: bool
    superseded: bool
    files: int | None
    bytes: int | None
    rows: int | None
    started_at: float | None
    age_s: float | None
    decided_at: float | None
    reason: str | None
    staging_uri: str
    staging_files: int
    staging_bytes: int
    owner: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["state"] = str(self.state)
        return d
