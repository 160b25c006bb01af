"""Where everything of one target lives, and the names on those paths.

The folders and record paths of a target (the tree drawn in :mod:`airflow_tpc.core.ledger`),
and the epoch and attempt names they are built from, kept apart from reading and
writing the records: the claim, staging, the promoter and the tables all need the
paths without needing the ledger's reads and writes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ..errors import TpcError
from ..storage import Storage

TPC_DIR = "_tpc"
PUBLISHED_MARKER = "_tpc_published.json"
#: Epoch names; always used with ``fullmatch`` (``$`` would accept a trailing newline).
EPOCH_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
ATTEMPT_DIR_RE = re.compile(r"attempt=([0-9]{6,})")
#: A pending-index entry; epochs never hold ',' so the split is unambiguous.
PENDING_ENTRY_RE = re.compile(r"epoch=([^,/]+),attempt=([0-9]{6,})")
PENDING_INDEX = "index.json"
_ATTEMPT_TEXT_RE = re.compile(r"[0-9]{1,12}")


class AttemptId:
    """``txn_id`` and ``fencing_number`` of anything naming one attempt of one epoch in a
    namespace (a transaction, a group transaction, its manifest, the job's view of it),
    spelt once: the id is the same string in the ledger, XComs, the UI and lineage."""

    namespace: str
    epoch: str
    attempt: int

    @property
    def txn_id(self) -> str:
        return f"{self.namespace}/{self.epoch}/{self.attempt}"

    @property
    def fencing_number(self) -> int:
        """The attempt number: higher for every new attempt of the epoch (PROTOCOL §3)."""
        return self.attempt


def check_epoch(epoch: Any) -> str:
    if not isinstance(epoch, str) or not EPOCH_RE.fullmatch(epoch):
        raise TpcError(f"invalid epoch {epoch!r}: use letters, digits, '.', '_' or '-' "
                       "(at most 128, e.g. '2026-11-20' or '42')")
    return epoch


def check_attempt(attempt: Any) -> int:
    """An attempt number from code or from text (CLI, XCom): an integer >= 1, nothing else.

    ``int()`` alone would take ``" 2\\n"``, ``True`` or ``0`` (which once meant
    "the latest attempt" to the CLI and aborted a live one).
    """
    if isinstance(attempt, str) and _ATTEMPT_TEXT_RE.fullmatch(attempt):
        attempt = int(attempt)
    if not isinstance(attempt, int) or isinstance(attempt, bool) or attempt < 1:
        raise TpcError(f"invalid attempt {attempt!r}: attempts are whole numbers from 1")
    return attempt


def epoch_sort_key(epoch: str) -> tuple[int, int | str]:
    return (0, int(epoch)) if epoch.isdigit() else (1, epoch)


def attempt_name(attempt: int) -> str:
    return f"attempt={attempt:06d}"


def legacy_staging_root(storage: Storage, root: str) -> str:
    """Staging inside the target, ``<target>/_tpc/staging``: the layout of targets
    claimed before staging moved beside the target, and of targets with no parent."""
    return storage.join(root, TPC_DIR, "staging")


def claim_path(storage: Storage, root: str) -> str:
    return storage.join(root, TPC_DIR, "sink.json")


def staging_root_problem(root: str, staging_root: str) -> str | None:
    """Why ``staging_root`` cannot hold the staging of the target at ``root`` (None: fine).

    Staging must not be the target, hold it, or lie inside a published epoch folder:
    cleaning staging would then delete published data."""
    root, staging_root = root.rstrip("/"), staging_root.rstrip("/")
    if staging_root == root or root.startswith(staging_root + "/"):
        return "it is the target or holds it"
    if staging_root.startswith(root + "/epoch="):
        return "it lies inside a published epoch folder"
    return None


@dataclass(frozen=True)
class Layout:
    """Where everything of one target lives in its store.

    ``staging_root`` "" means the earlier layout, inside the target (kept for callers
    that build a layout by hand); a :class:`~airflow_tpc.Sink` always passes the
    one its target's claim records.
    """

    storage: Storage
    root: str
    staging_root: str = ""
    #: Where attempts' seals (manifest and sidecars) lie when not in their staging: a
    #: table whose location takes only data files keeps them under its ledger.
    seal_root: str = ""

    def __post_init__(self) -> None:
        if not self.staging_root:
            object.__setattr__(self, "staging_root", legacy_staging_root(self.storage,
                                                                         self.root))

    @property
    def sink_record(self) -> str:
        return claim_path(self.storage, self.root)

    @property
    def staging_base(self) -> str:
        """The folder from which every folder down to an attempt's staging must be
        real (no link): the target for staging inside it, the target's parent for
        staging beside it, else the configured staging root itself."""
        root = self.root.rstrip("/")
        staging = self.staging_root.rstrip("/")
        parent = root.rpartition("/")[0]
        if staging.startswith(root + "/"):
            return root
        if parent and staging.startswith(parent + "/"):
            return parent
        return staging

    @property
    def ledger_root(self) -> str:
        return self.storage.join(self.root, TPC_DIR, "ledger")

    @property
    def pending_root(self) -> str:
        return self.storage.join(self.root, TPC_DIR, "pending")

    def pending_entry(self, epoch: str, attempt: int) -> str:
        return self.storage.join(self.pending_root, f"epoch={epoch},{attempt_name(attempt)}")

    def record(self, epoch: str, attempt: int, kind: str) -> str:
        return self.storage.join(self.ledger_root, f"epoch={epoch}", attempt_name(attempt),
                                 f"{kind}.json")

    def staging(self, epoch: str, attempt: int) -> str:
        return self.storage.join(self.staging_root, f"epoch={epoch}", attempt_name(attempt))

    def sealed(self, epoch: str, attempt: int) -> str:
        """The folder of an attempt's seal (``_tpc_manifest.json``, its sidecars): the
        attempt's staging, or its folder under :attr:`seal_root`."""
        if not self.seal_root:
            return self.staging(epoch, attempt)
        return self.storage.join(self.seal_root, f"epoch={epoch}", attempt_name(attempt))

    def remove_seal(self, epoch: str, attempt: int) -> None:
        """Delete a seal kept apart from staging, after the staging it describes (a crash
        in between leaves a seal of no files, removed again next time); nothing to do
        when the seal is in staging."""
        if self.seal_root:
            path = self.sealed(epoch, attempt)
            self.storage.delete_prefix(path)
            self.storage.prune_empty_parent(path)

    def check_staging(self, epoch: str, attempt: int) -> str:
        """The attempt's staging path, refused unless every folder of it is real.

        Checked from :attr:`staging_base` down (beside the target: ``_tpc_staging``,
        ``<name>``, ``epoch=E``, ``attempt=A``; inside it: ``_tpc``, ``staging``, ...):
        a link anywhere there would make airflow-tpc publish or delete files
        outside the target.
        """
        path = self.staging(epoch, attempt)
        self.storage.check_real_dirs(self.staging_base, path)
        return path

    def check_published(self, epoch: str) -> str:
        """The epoch's published folder, refused if it is a link (see :meth:`check_staging`)."""
        path = self.published_dir(epoch)
        self.storage.check_real_dirs(self.root, path)
        return path

    def remove_staging(self, epoch: str, attempt: int) -> None:
        """Delete an attempt's staging (idempotent) and its epoch folder once empty.

        Never through a link: a symlinked staging folder is refused, not followed.
        """
        path = self.check_staging(epoch, attempt)
        self.storage.delete_prefix(path)
        self.storage.prune_empty_parent(path)
        self.remove_seal(epoch, attempt)

    def published_dir(self, epoch: str) -> str:
        return self.storage.join(self.root, f"epoch={epoch}")

    def marker(self, epoch: str) -> str:
        return self.storage.join(self.published_dir(epoch), PUBLISHED_MARKER)
