"""How a table target is shown: by its own name, with the table version each commit made.

A table sink is rooted at a *location* — the table's folder, or a ledger kept apart
from it (``ledger_uri``) — which is an internal path: users know the table by its URI,
``iceberg://<catalog>/<namespace>.<table>`` or the Delta URI, and a commit by the Iceberg
snapshot or Delta version it became.  Everything that lists a target's transactions to
a person or a program (the CLI, the run and target pages, the admin DAG's XCom) goes
through here, so they all say the same.

A committed attempt's staged files are added to the table where they were written (no
copy): once the commit reached the table they *are* its data files, so they are not
shown as leftover staging (:func:`in_table`).

Query side only: nothing here writes.  The table's history is read once per call (one
table load, or one pass over the Delta log), not once per transaction.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from ..errors import TpcError
from .target import PROP_ATTEMPT, PROP_EPOCH, PROP_NAMESPACE, PROP_TXN_ID

log = logging.getLogger(__name__)

#: The key that names a commit in each format's history: the words the Asset event, the
#: commit XCom and OpenLineage's ``version`` facet already use.
VERSION_KEYS = {"iceberg": "snapshot_id", "delta": "version"}


def table_uri(sink: Any) -> str | None:
    """A table target's own name (``iceberg://…``, the Delta URI); None for a folder."""
    target = getattr(sink, "table_target", None)
    return str(target.uri) if target is not None else None


def shown_target(sink: Any) -> str:
    """What a target is called where people read it: the table URI, else the folder."""
    return table_uri(sink) or str(sink.target)


def table_format(sink: Any) -> str | None:
    """``iceberg`` or ``delta`` for a table target; None for a folder."""
    if getattr(sink, "table_target", None) is None:
        return None
    return str(getattr(sink, "format", "")).lower() or None


def version_key(sink: Any) -> str | None:
    """``snapshot_id`` (Iceberg), ``version`` (Delta) or None (a folder)."""
    return VERSION_KEYS.get(table_format(sink) or "")


def where(sink: Any) -> dict[str, Any]:
    """The target's identity for JSON output: ``{"target": <table URI or folder>}``, plus
    ``location`` (where its sink is rooted) and ``format`` for a table."""
    table = table_uri(sink)
    if table is None:
        return {"target": str(sink.target)}
    return {"target": table, "location": str(getattr(sink, "table_location", sink.target)),
            "format": table_format(sink)}


def _txn_id(props: Mapping[str, Any]) -> str | None:
    """The transaction a commit's properties name (its txn id, else built from its
    namespace, epoch and attempt)."""
    txn = props.get(PROP_TXN_ID)
    if txn:
        return str(txn)
    parts = [props.get(k) for k in (PROP_NAMESPACE, PROP_EPOCH, PROP_ATTEMPT)]
    return "/".join(str(p) for p in parts) if all(parts) else None


def table_commits(sink: Any) -> dict[str, str]:
    """``{txn_id: snapshot id / version}`` of every airflow-tpc commit the table's retained
    history still carries ({} for a folder, or a table not created yet).  A commit whose
    snapshot was expired (or whose Delta log entry was checkpointed away) is absent.
    The table unreadable: a StorageError, as the sink's other reads."""
    fmt = table_format(sink)
    target = getattr(sink, "table_target", None)
    out: dict[str, str] = {}
    if fmt == "iceberg":
        table = target.load_table()
        for snap in table.snapshots() if table is not None else ():
            txn = _txn_id(snap.summary) if snap.summary is not None else None
            if txn:
                out.setdefault(txn, str(snap.snapshot_id))  # oldest first: the commit's own
    elif fmt == "delta":
        for info in reversed(target.commit_infos()):  # newest first there
            txn = _txn_id(info)
            if txn:
                out.setdefault(txn, str(info["version"]))
    return out


def in_table(info: Mapping[str, Any], version: str | None) -> bool:
    """Whether a (table target's) attempt's staged files are the table's data files now:
    it is COMMITTED and its commit reached the table (published, or the table's history
    names it).  Such files are not leftover staging; a decided commit not yet rolled
    forward, an undecided attempt and an aborted one's remains are."""
    return str(info.get("state")) == "COMMITTED" and (bool(info.get("published"))
                                                        or version is not None)


def annotate(sink: Any, infos: Iterable[Mapping[str, Any]],
             commits: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """Transaction dicts (``TxnInfo.to_dict()``) with, for a table target, ``table``,
    ``format``, the commit's ``snapshot_id`` / ``version`` (None: no commit in the table)
    and ``in_table`` (:func:`in_table`).  A folder's come back unchanged.  ``commits``
    defaults to :func:`table_commits` (read once here); when the table cannot be read,
    the versions are None and ``table_error`` says why (the ledger's facts still show)."""
    rows = [dict(i) for i in infos]
    key = version_key(sink)
    if key is None:
        return rows
    error = None
    if commits is None:
        try:
            commits = table_commits(sink)
        except TpcError as exc:
            log.warning("cannot read the history of %s: %s", table_uri(sink), exc)
            commits, error = {}, str(exc)
    for row in rows:
        version = commits.get(str(row.get("txn_id")))
        row.update({"table": table_uri(sink), "format": table_format(sink), key: version,
                    "in_table": in_table(row, version)})
        if error:
            row["table_error"] = error
    return rows


def describe(sink: Any, epoch: str | None = None) -> list[dict[str, Any]]:
    """``sink.describe(epoch)`` as dicts, annotated (:func:`annotate`)."""
    return annotate(sink, (i.to_dict() for i in sink.describe(epoch)))
