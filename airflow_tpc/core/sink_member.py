"""The public surface a group uses of one member target's sink.

A group (:mod:`airflow_tpc.group`) drives each member's sink through the same steps a
single target's verbs take, but split differently: begin with the group's number,
check every member before the one decision, switch from the group's decision, abort
only by the group.  Those steps are the sink's own, behind underscores, because a
single target's caller must never take them one by one (a member attempt is decided
only with its group).  This object names them once, publicly, so the group code calls
no private method of a sink, and a table sink's overrides (``_prepare_begin``,
``_prepared_switch``, ``_release``, ...) are reached through it as through the verbs.
The group wraps a member's sink in it (``MemberSink(sink)``); the sink itself does not
know this module, so the import runs one way: group -> member surface -> sink.

Finishing goes through the sink's :class:`~airflow_tpc.core.finisher.Finisher`
(:attr:`MemberSink.finisher`), as every other finishing path does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .ledger import AttemptRecords
from .manifest import Manifest
from .records import Begin, CommitDecision, Decision
from .transaction import Transaction

if TYPE_CHECKING:  # the sink imports this module
    from .finisher import Finisher
    from .sink import Sink

__all__ = ["MemberSink"]


class MemberSink:
    """One member target's sink, as its group drives it (see the module docstring)."""

    def __init__(self, sink: Sink) -> None:
        self.sink = sink

    @property
    def root(self) -> str:
        """The target's path in its store (links resolved by the caller)."""
        return self.sink._root

    @property
    def finisher(self) -> Finisher:
        return self.sink.finisher

    # ---------------------------------------------------------------- begin
    def prepare_begin(self, epoch: str) -> int:
        """Everything a begin checks before it writes; the highest attempt seen."""
        return self.sink._prepare_begin(epoch)

    def begin_member(self, epoch: str, attempt: int, owner: dict[str, Any] | None,
                     group: dict[str, Any]) -> Transaction | None:
        """Write the member's ``begin.json`` naming its ``group``; None: number taken."""
        return self.sink._try_begin(epoch, attempt, owner, group)

    def check(self, txn: Transaction) -> Begin:
        """The member transaction's begin record, if ``txn`` is this target's."""
        return self.sink._check_own(txn)

    # ---------------------------------------------------------------- decide
    def decision(self, epoch: str, attempt: int, rec: AttemptRecords) -> Decision | None:
        """The attempt's own decision, read back checked."""
        return self.sink._decision(epoch, attempt, rec)

    def winner(self, epoch: str, attempts: dict[int, AttemptRecords]
               ) -> tuple[int, CommitDecision] | None:
        """The epoch's highest commit here (what readers of this target see)."""
        return self.sink._winner(epoch, attempts)

    def validate_commit(self, txn: Transaction, attempts: dict[int, AttemptRecords],
                        expected_digest: str | None, force: bool
                        ) -> tuple[Manifest, CommitDecision]:
        """Every check of a commit before its decision, and the decision it would be."""
        return self.sink._validate_commit(txn, attempts, expected_digest, force)

    def release(self) -> None:
        """Drop what one commit kept between its check and its switch (tables)."""
        self.sink._release()

    # ---------------------------------------------------------------- finish
    def switch_catalog(self) -> Any:
        """The catalog that could switch this target with others in one call; None."""
        return self.sink._switch_catalog()

    def prepared_switch(self, epoch: str, attempt: int, known: Manifest | None) -> Any:
        """The decided attempt's switch, built but not made (None: nothing to send)."""
        return self.sink._prepared_switch(epoch, attempt, known)

    def finish(self, epoch: str, attempts: dict[int, AttemptRecords],
               known: Manifest | None = None) -> int | None:
        """Finish the epoch here (the finisher's plan carried out); its winner."""
        return self.finisher.finish(epoch, attempts, known).winner

    def roll_forward_pending(self, epoch: str, attempts: dict[int, AttemptRecords]
                             ) -> list[tuple[str, int]]:
        """Finish the other epochs this target's pending index names."""
        return self.sink._roll_forward_pending(epoch, attempts)

    def abort_for_group(self, epoch: str, attempt: int, reason: str,
                        expired: bool = False) -> bool:
        """Carry the group's abort out on this member (its own record, its staging)."""
        return self.sink._abort(epoch, attempt, reason, expired, by_group=True)
