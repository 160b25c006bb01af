"""Group transactions as JSON, a group's own page, and the undecided listing across
targets: the views of the UI plugin beside the run and target pages.

Apart from :mod:`~airflow_tpc.airflow.ui.groups` (which finds, shows and aborts a run's
group attempts on the run page) because these are read-only summaries over it: the
``groups`` of ``/api/transactions`` (:func:`group_transactions`), the page of one group
(:func:`group_page`) and, for monitoring, every attempt not decided yet of every target
and group the user's DAGs write (:func:`undecided`).  Nothing here writes; authorization
is the app's (every row here is of a DAG the caller may read).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from typing import Any

from airflow_tpc import TpcError
from airflow_tpc.airflow.ui import groups, runs
from airflow_tpc.airflow.ui import render as ui
from airflow_tpc.tables import history

#: The keys of a group attempt's facts in JSON (``airflow-tpc group status``'s).
_GROUP_KEYS = ("txn_id", "epoch", "attempt", "state", "published", "superseded", "closed",
               "stable", "started_at", "age_s", "timeout_s", "decided_at", "reason")


def _moved_on(group: Any, epoch: str) -> dict[int, list[dict[str, Any]]]:
    """group attempt -> the members that keep it out of the consistent cut (another group
    or a single-target commit won the epoch there): :meth:`Group.moved_on`."""
    out: dict[int, list[dict[str, Any]]] = {}
    for moved in group.moved_on():
        if moved.epoch == epoch:
            out.setdefault(moved.group_attempt, []).append(asdict(moved))
    return out


def _group_json(task_id: str, group: Any, described: dict[str, Any],
                infos: dict[str, dict[int, Any]], moved: list[dict[str, Any]]
                ) -> dict[str, Any]:
    """One group attempt: its identity, decision and cut status, each member's attempt."""
    attempt = described["attempt"]
    members = {}
    for name, sink in group.sinks.items():
        state = described["members"][name]["state"]
        info = infos.get(name, {}).get(attempt) if state is not None else None
        members[name] = {
            **history.where(sink), "namespace": sink.namespace, "attempt": attempt,
            "txn_id": None if info is None else info.txn_id, "state": state,
            "published": described["members"][name]["published"],
            "files": None if info is None else info.files,
            "rows": None if info is None else info.rows}
    return {"kind": "group", "task_id": task_id, "group": group.uri,
            "namespace": group.namespace, **{k: described[k] for k in _GROUP_KEYS},
            "note": described.get("note") or None, "moved_on": moved, "members": members}


def group_transactions(dag_id: str, run_id: str) -> list[dict[str, Any]]:
    """The ``groups`` of ``/api/transactions``: every group attempt this run began (all
    tries), newest first per task; a group that cannot be opened is a row saying why."""
    from airflow_tpc.cli.group import describe_group

    out = []
    for task_id, doc in groups.group_docs(dag_id, run_id):
        try:
            group = groups.open_group(doc)
            epoch = str(doc["epoch"])
            attempts, infos = groups._owned(group, doc, dag_id, run_id)
            described = {d["attempt"]: d for d in describe_group(group, epoch)}
            moved = _moved_on(group, epoch)
        except TpcError as exc:
            out.append({"kind": "group", "task_id": task_id,
                        "group": doc.get("group") or doc.get("group_uri"),
                        "namespace": doc.get("namespace"), "epoch": doc.get("epoch"),
                        "attempt": doc.get("attempt"), "error": str(exc)})
            continue
        out += [_group_json(task_id, group, described[a], infos, moved.get(a, []))
                for a in attempts if a in described]
    return out


def group_page(base: str, dag_id: str, run_id: str, task_id: str, csrf: str,
               now: float) -> str | None:
    """The page of one group transaction (the task that began it in the run): its card
    (each attempt, its members, **Abort group** by the group's full identity) and its
    cut status — whether each attempt is the epoch's in the group's consistent cut, and
    which members moved on (:meth:`Group.moved_on`).  None: the task began no group."""
    docs = dict(groups.group_docs(dag_id, run_id))
    if task_id not in docs:
        return None
    rows = {r["attempt"]: r for r in group_transactions(dag_id, run_id)
            if r["task_id"] == task_id and "error" not in r}
    [section] = [s for s in groups.run_sections(base, dag_id, run_id) if s.title == task_id]
    cut = []
    for attempt, row in sorted(rows.items(), reverse=True):
        if row["stable"]:
            status = "in the consistent cut: readers of the group see this attempt"
        elif row["moved_on"]:
            status = "out of the cut: " + "; ".join(
                f"member {m['member']} moved on to attempt {m['attempt']} "
                f"({'group ' + m['group'] if m['by'] == 'group' else m['by'] + ' commit'})"
                for m in row["moved_on"])
        else:
            status = "not in the cut (not committed and published on every member)"
        cut.append(f'<tr data-cut-attempt="{attempt}" data-stable="{str(row["stable"]).lower()}"'
                   f' data-moved-on="{len(row["moved_on"])}"><td class="num">{attempt}</td>'
                   f"<td>{ui.state_badge(row)}</td><td>{ui.esc(status)}</td></tr>")
    cut_card = ('<section class="card" data-cut><header><h2>Cut status</h2></header>'
                '<div class="table-wrap"><table><thead><tr><th class="num">Attempt</th>'
                f'<th>State</th><th>Cut</th></tr></thead><tbody>{"".join(cut)}</tbody>'
                "</table></div></section>") if cut else ""
    run_href = ui.url(f"{base}/run", dag_id=dag_id, run_id=run_id)
    body = (ui.crumbs([("airflow-tpc", f"{base}/"), (dag_id, None), (run_id, run_href),
                       (task_id, None)])
            + f"<h1>Group transaction <code>{ui.esc(section.group)}</code></h1>"
            + f'<p class="sub">Begun by task <code>{ui.esc(task_id)}</code> of run '
            + f'<a href="{ui.esc(run_href)}">{ui.esc(run_id)}</a>; decided as a whole.</p>'
            + ui.group_section(section, now) + cut_card)
    return ui.page(f"group {section.group}", body, csrf=csrf, now=now)


# -- undecided, across targets ----------------------------------------------------------

_UNDECIDED = ("OPEN", "PRECOMMITTED")


def _docs(dag_ids: set[str]) -> list[dict[str, Any]]:
    """Every transaction XCom (single and group) of these DAGs, newest first: which
    targets and groups they write (the metadata DB only; a task may have written
    another target in an earlier run, so not only each task's newest)."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    from airflow_tpc.airflow.hooks.tpc import TXN_XCOM_KEY

    if not dag_ids:
        return []
    with create_session() as session:
        rows = session.execute(select(
            XComModel.dag_id, XComModel.task_id, XComModel.key, XComModel.value)
            .where(XComModel.key.in_([TXN_XCOM_KEY, groups.GROUP_XCOM_KEY]),
                   XComModel.dag_id.in_(sorted(dag_ids)))
            .order_by(XComModel.timestamp.desc())).all()
    return [{"dag_id": dag_id, "task_id": task_id, "key": key, "doc": runs.loads(raw)}
            for dag_id, task_id, key, raw in rows]


def _owner(owner: Any, dag_id: str) -> tuple[str, str | None]:
    owner = owner if isinstance(owner, dict) else {}
    return str(owner.get("dag_id") or dag_id), owner.get("run_id")


def _timing(started: float | None, timeout: float | None, now: float) -> dict[str, Any]:
    age = None if started is None else round(now - started, 3)
    left = None if started is None or timeout is None else round(started + timeout - now, 3)
    return {"started_at": started, "age_s": age, "timeout_s": timeout, "expires_in_s": left}


def _single_rows(d: dict[str, Any], can_read: Any, now: float) -> list[dict[str, Any]]:
    from airflow_tpc.core.records import BEGIN, Begin

    sink = runs.hook_for(d["doc"]).get_sink()
    out = []
    for info in sink.describe(now=now):
        if str(info.state) not in _UNDECIDED:
            continue
        odag, orun = _owner(info.owner, d["dag_id"])
        if not can_read(odag):
            continue  # begun by a DAG this user may not read: not shown, not counted
        begin = sink.ledger.read(info.epoch, info.attempt, BEGIN)
        if isinstance(begin, Begin) and begin.group is not None:
            continue  # a group's member: its group's row stands for it
        out.append({"kind": "single", "dag_id": odag, "run_id": orun,
                    "task_id": d["task_id"] if odag == d["dag_id"] else None,
                    **history.where(sink), "namespace": sink.namespace,
                    "txn_id": info.txn_id, "epoch": info.epoch, "attempt": info.attempt,
                    "state": str(info.state), "files": info.files,
                    **_timing(info.started_at, runs.timeout_of(sink, info), now)})
    return out


def _group_rows(d: dict[str, Any], can_read: Any, now: float) -> list[dict[str, Any]]:
    from airflow_tpc.cli.group import describe_group
    from airflow_tpc.core.records import BEGIN

    group = groups.open_group(d["doc"])
    out = []
    for g in describe_group(group, now=now):
        if g["state"] not in _UNDECIDED:
            continue
        owners = [getattr(sink.ledger.read(g["epoch"], g["attempt"], BEGIN), "owner", None)
                  for sink in group.sinks.values()]
        odag, orun = _owner(next((o for o in owners if o), None), d["dag_id"])
        if not can_read(odag):
            continue
        out.append({"kind": "group", "dag_id": odag, "run_id": orun,
                    "task_id": d["task_id"] if odag == d["dag_id"] else None,
                    "group": group.uri, "namespace": group.namespace,
                    "txn_id": g["txn_id"], "epoch": g["epoch"], "attempt": g["attempt"],
                    "state": g["state"], "note": g.get("note") or None,
                    "members": {n: {"target": history.shown_target(s),
                                    "state": g["members"][n]["state"]}
                                for n, s in group.sinks.items()},
                    **_timing(g["started_at"], g["timeout_s"], now)})
    return out


def undecided(dag_ids: set[str], can_read: Any, now: float | None = None
              ) -> dict[str, Any]:
    """Every OPEN or PRECOMMITTED attempt (single targets and groups) of the targets and
    groups the DAGs in ``dag_ids`` write, oldest first, with its age and timeout; rows
    begun by a DAG ``can_read`` refuses are left out.  Each target and group is read
    once (the newest XCom naming it says which task writes it); one that cannot be
    read is listed under ``errors``, not a failed answer: a monitoring view must show
    every other target while one store or catalog is down."""
    now = time.time() if now is None else now
    rows: list[dict[str, Any]] = []
    errors: list[dict[str, Any]] = []
    seen: set[str] = set()
    for d in _docs(dag_ids):
        doc = d["doc"]
        if not isinstance(doc, dict):
            continue  # not a transaction XCom of ours
        is_group = d["key"] == groups.GROUP_XCOM_KEY
        ident = json.dumps(
            [doc.get("group_uri"), doc.get("namespace")] if is_group else
            [doc.get("table") or doc.get("target"), doc.get("namespace"),
             doc.get("storage_conn_id"), doc.get("catalog_conn_id")], sort_keys=True)
        if ident in seen:
            continue
        seen.add(ident)
        try:
            rows += (_group_rows if is_group else _single_rows)(d, can_read, now)
        except Exception as exc:  # one unreadable target, not a failed listing
            errors.append({"dag_id": d["dag_id"], "task_id": d["task_id"],
                           "error": str(exc) or type(exc).__name__})
    rows.sort(key=lambda r: (r["started_at"] is None, r["started_at"] or 0))
    return {"undecided": rows, "errors": errors}


def undecided_page(base: str, found: dict[str, Any], now: float) -> str:
    """The monitoring page: one row per undecided attempt, oldest first."""
    trs = []
    for r in found["undecided"]:
        run_href = ui.url(f"{base}/run", dag_id=r["dag_id"], run_id=r["run_id"]) \
            if r["run_id"] else None
        if r["kind"] == "group":
            what = (f'<span class="tag">group</span> <code>{ui.esc(r["group"])}</code>'
                    f'<div class="meta">{ui.esc(", ".join(r["members"]))}</div>')
            if r["task_id"] and r["run_id"]:
                href = ui.url(f"{base}/group", dag_id=r["dag_id"], run_id=r["run_id"],
                              task_id=r["task_id"])
                what = f'<a href="{ui.esc(href)}">{what}</a>'
        else:
            what = f'<code>{ui.esc(r["target"])}</code>'
        left = r["expires_in_s"]
        expires = ui.text(None) if left is None else (
            f'<span class="warn">expired {ui.esc(ui.human_duration(left))} ago</span>'
            if left < 0 else f"in {ui.esc(ui.human_duration(left))}")
        run = (f'<a href="{ui.esc(run_href)}">{ui.esc(r["dag_id"])} / {ui.esc(r["run_id"])}'
               "</a>") if run_href else ui.esc(r["dag_id"])
        trs.append(
            f'<tr data-txn="{ui.esc(r["txn_id"])}" data-kind="{ui.esc(r["kind"])}" '
            f'data-state="{ui.esc(r["state"])}"><td>{ui.state_badge(r)}</td>'
            f"<td>{what}</td><td>{run}</td>"
            f'<td class="mono">{ui.esc(r["epoch"])}</td>'
            f'<td class="num">{int(r["attempt"])}</td>'
            f'<td class="wrap" data-col="age">{ui.age(r["started_at"], now)}</td>'
            f'<td class="wrap" data-col="timeout">'
            f'{ui.text(None if r["timeout_s"] is None else ui.human_duration(r["timeout_s"]))}'
            f'</td><td class="wrap" data-col="expires">{expires}</td></tr>')
    table = ('<div class="table-wrap"><table><thead><tr><th>State</th><th>Target or group'
             '</th><th>Run</th><th>Epoch</th><th class="num">Attempt</th><th>Begun</th>'
             f'<th>Timeout</th><th>Expires</th></tr></thead><tbody>{"".join(trs)}</tbody>'
             "</table></div>") if trs else \
        '<div class="empty">Nothing undecided in DAGs you may read.</div>'
    errors = "".join(f'<div class="empty warn" data-error>{ui.esc(e["dag_id"])}.'
                     f'{ui.esc(e["task_id"])}: {ui.esc(e["error"])}</div>'
                     for e in found["errors"])
    body = (ui.crumbs([("airflow-tpc", f"{base}/"), ("undecided", None)])
            + "<h1>Undecided transactions</h1>"
            + '<p class="sub">Every attempt begun and not decided yet (open or pre-committed)'
            " of the targets and groups your DAGs write, oldest first.</p>"
            + f'<section class="card" data-undecided>{errors}{table}</section>')
    return ui.page("undecided", body, now=now)
