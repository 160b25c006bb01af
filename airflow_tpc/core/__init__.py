"""The protocol core: one target's two-phase commit, with no Airflow import.

Records and their ledger (``records``, ``ledger``, ``schemas``), the manifest that seals
an attempt (``manifest``, ``manifest_codec``), where things live on a store (``layout``,
``placement``, ``staging``), the published marker (``marker``), promotion (``promote``),
and :class:`~airflow_tpc.core.sink.Sink` with its five verbs — begin, pre-commit, commit,
abort, recover — spread over ``sink*`` modules.  A member's side of a group transaction
is here too (``group_records``, ``member_guard``, ``group_orphans``): a single target's
own verbs must read and honour its group's decision.  ``airflow_tpc.group`` coordinates
groups on top of this.  docs/ARCHITECTURE.md draws the house.
"""
