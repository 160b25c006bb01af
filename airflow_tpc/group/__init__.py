"""Group transactions: one decision over several targets (docs/PROTOCOL.md §14).

:class:`Group` (``group``) coordinates member sinks of the core; ``claim`` checks its
``group.json``; ``finish`` rolls a decided group forward; ``cut`` derives the consistent
cut readers see; ``maintenance`` reports and repairs.  The group's ledger records and a
member's guards live in the core (``airflow_tpc.core.group_records``,
``airflow_tpc.core.member_guard``): a member's own verbs read them.
"""

from .group import Group, GroupTransaction

__all__ = ["Group", "GroupTransaction"]
