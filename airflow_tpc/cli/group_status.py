"""``airflow-tpc group status`` (:mod:`airflow_tpc.cli.group`): every group attempt, each
member's state of it, the stable epochs, and what keeps an epoch out of the cut — a
member that moved on (:class:`~airflow_tpc.group.cut.MovedOn`) or a member attempt
whose group folder lost it (:mod:`airflow_tpc.core.group_orphans`: a non-zero exit).
``describe_group`` is also what the Airflow UI's group page reads.  Reads only.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from ..core.group_orphans import LostGroupAttempt
from ..core.layout import check_epoch, epoch_sort_key
from ..core.records import BEGIN, CLOSED, DECISION, PUBLISHED, Begin
from ..core.transaction import TxnState
from ..group.cut import MovedOn
from ..group.group import Group, GroupAbort, GroupCommit
from ..tables.history import shown_target
from .common import ShownProblem, _age


def _names(members: dict[str, str]) -> str:
    return ", ".join(f"{n} ({t})" for n, t in sorted(members.items())) or "none"


# ------------------------------------------------------------------ status
def describe_group(group: Group, epoch: str | None = None, *,
                   now: float | None = None) -> list[dict[str, Any]]:
    """Every group attempt (or one epoch's), oldest epoch first: its state from the
    group's ledger, whether every member switched (``published``) or had its abort
    carried out (``closed``), and each member's own attempt of it (state None: no
    attempt of this group on that member, e.g. its begin died before it).  Reads only."""
    now = time.time() if now is None else now
    scan = group.ledger.scan(epoch)
    member_infos = {name: {(i.epoch, i.attempt): i for i in sink.describe(epoch, now=now)}
                    for name, sink in group.sinks.items()}
    stable = group.stable_epochs()
    out = []
    for ep in sorted(scan, key=epoch_sort_key):
        attempts = scan[ep]
        top = max(attempts)
        won = max((a for a, rec in attempts.items() if DECISION in rec.kinds and isinstance(
            group.ledger.get(ep, a, rec, DECISION), GroupCommit)), default=None)
        for attempt in sorted(attempts):
            rec = attempts[attempt]
            begin = group.ledger.get(ep, attempt, rec, BEGIN)
            decision = group.ledger.get(ep, attempt, rec, DECISION)
            members = {name: _member_of(group, name, ep, attempt, member_infos[name])
                       for name in group.sinks}
            if isinstance(decision, GroupCommit):
                state = TxnState.COMMITTED
            elif isinstance(decision, GroupAbort):
                state = TxnState.EXPIRED if decision.expired else TxnState.ABORTED
            elif all(m["state"] == str(TxnState.PRECOMMITTED) for m in members.values()):
                state = TxnState.PRECOMMITTED
            else:
                state = TxnState.OPEN
            started = getattr(begin, "started_at", None)
            timeout = getattr(begin, "timeout_s", None)
            out.append({
                "epoch": ep, "attempt": attempt,
                "txn_id": f"{getattr(begin, 'namespace', group.namespace)}/{ep}/{attempt}",
                "state": str(state), "published": PUBLISHED in rec.kinds,
                "closed": CLOSED in rec.kinds, "stable": stable.get(ep) == attempt,
                "superseded": won is not None and attempt < won,
                "started_at": started, "age_s": None if started is None else now - started,
                "timeout_s": timeout,
                "decided_at": getattr(decision, "decided_at", None),
                "reason": decision.reason if isinstance(decision, GroupAbort) else None,
                "members": members,
                "note": _note(state, rec.kinds, attempt, top, won, started, timeout, now)})
    return out


def _member_of(group: Group, name: str, epoch: str, attempt: int,
               infos: dict[tuple[str, int], Any]) -> dict[str, Any]:
    info = infos.get((epoch, attempt))
    if info is not None:  # the number may be another writer's on that target
        begin = group.sinks[name].ledger.read(epoch, attempt, BEGIN)
        mine = isinstance(begin, Begin) and begin.group is not None \
            and str(begin.group.get("uri", "")).rstrip("/") == group.uri \
            and begin.group.get("member") == name
        info = info if mine else None
    return {"state": None if info is None else str(info.state),
            "published": bool(info is not None and info.published)}


def _note(state: TxnState, kinds: set[str], attempt: int, top: int, won: int | None,
          started: float | None, timeout: float | None, now: float) -> str:
    if state is TxnState.COMMITTED:
        if PUBLISHED not in kinds:
            return "decided, not yet switched on every member (group recover finishes it)"
        return "superseded" if won is not None and attempt < won else ""
    if state in (TxnState.ABORTED, TxnState.EXPIRED):
        return "" if CLOSED in kinds else \
            "abort not yet carried out on every member (group recover finishes it)"
    if attempt < top:
        return "superseded (group recover aborts it)"
    if started is None or (timeout is not None and now - started > timeout):
        return "expired (group recover aborts it)"
    return ""


def _stable(group: Group, epoch: str | None = None) -> dict[str, int]:
    """``Group.stable_epochs()`` (of one epoch), oldest epoch first."""
    return {e: a for e, a in sorted(group.stable_epochs().items(),
                                    key=lambda kv: epoch_sort_key(kv[0]))
            if epoch is None or e == epoch}


def _stable_line(stable: dict[str, int]) -> str:
    return ", ".join(f"{e} (attempt {a})" for e, a in stable.items()) or "none"


def cmd_status(group: Group, args: argparse.Namespace) -> Any:
    epoch = check_epoch(args.epoch) if args.epoch is not None else None
    rows = describe_group(group, epoch)
    stable = _stable(group, epoch)
    moved = [m for m in group.moved_on() if epoch is None or m.epoch == epoch]
    lost = [x for s in group.sinks.values() for x in s.lost_group_attempts(epoch)
            if x.group.rstrip("/") == group.uri]
    doc = {"group": group.uri, "namespace": group.namespace,
           "members": {n: shown_target(s) for n, s in group.sinks.items()},
           "stable_epochs": stable, "moved_on": [m.to_dict() for m in moved],
           "lost_group_attempts": [x.to_dict() for x in lost], "attempts": rows}
    shown = doc if args.json else _status_text(group, doc, rows, moved, lost)
    if lost:  # shown, and a non-zero exit: nobody will decide these member attempts
        raise ShownProblem(f"{len(lost)} member attempt(s) name a group attempt the group "
                           f"folder {group.uri} does not hold; first: {lost[0].problem}",
                           shown)
    return shown


def _status_text(group: Group, doc: dict[str, Any], rows: list[dict[str, Any]],
                 moved: list[MovedOn], lost: list[LostGroupAttempt]) -> str:
    header = (f"group {group.uri}  namespace {group.namespace}  members: "
              f"{_names(doc['members'])}\nstable epochs: {_stable_line(doc['stable_epochs'])}"
              + "".join(f"\nleft out of the cut: {m.describe()}" for m in moved)
              + "".join(f"\nLOST GROUP ATTEMPT: {x.problem}" for x in lost))
    if not rows:
        return f"{header}\nno group transactions"
    from tabulate import tabulate  # the CLI's only

    names = list(group.sinks)
    cells = [[r["epoch"], r["attempt"], r["state"], "yes" if r["published"] else "no",
              *[r["members"][n]["state"] for n in names], _age(r["age_s"]), r["note"]]
             for r in rows]
    # Member columns keep their names as given (lower case) beside the upper-case ones.
    body = tabulate(cells, headers=["EPOCH", "ATTEMPT", "STATE", "PUBLISHED", *names, "AGE",
                                    "NOTE"],
                    tablefmt="simple", missingval="-", disable_numparse=True,
                    colalign=["left", "right", *["left"] * (len(names) + 4)])
    return f"{header}\n{body}"
