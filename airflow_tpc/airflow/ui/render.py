"""Server-rendered HTML of the airflow-tpc pages (run, target, manifest, index, errors).

Plain functions from already-authorized data to HTML: no Airflow, no storage access, so
what a page shows is decided in :mod:`airflow_tpc.airflow.ui.pages` and only drawn here.
Every value is escaped; a missing one is drawn as an em dash, never as ``None``.

The cards of transactions and groups are drawn here; the page around them and how one
value is drawn are :mod:`airflow_tpc.airflow.ui.frame`'s (re-exported here, so a page
draws everything as ``render.X``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from airflow_tpc.airflow.ui.frame import (
    _DASH,
    age,
    crumbs,
    error_page,
    esc,
    human_bytes,
    human_duration,
    iso,
    number,
    page,
    text,
    url,
)

__all__ = [
    "ABORTABLE", "VERSION_HEADERS", "GroupRow", "GroupSection", "MemberRow", "Row", "Section",
    "age", "crumbs", "error_page", "esc", "expiry", "group_section", "human_bytes",
    "human_duration", "iso", "number", "page", "section", "state_badge", "text", "url",
    "version_cell",
]

#: Transaction states an operator may still abort from the page.
ABORTABLE = frozenset({"OPEN", "PRECOMMITTED"})


@dataclass
class Row:
    """One transaction as a page row (what describe() says, plus where to act on it)."""

    info: dict[str, Any]
    #: seconds the attempt may live (its begin record's ``timeout_s``), for OPEN/PRECOMMITTED
    timeout_s: float | None = None
    manifest_href: str | None = None
    abort_url: str | None = None
    #: (label, href) of the run that began it (target view)
    owner: tuple[str, str | None] | None = None
    #: The transaction's full identity, posted by the Abort button as the request body
    #: (task_id or target + namespace, epoch, attempt, txn_id): never just epoch/attempt.
    identity: dict[str, Any] | None = None


@dataclass
class Section:
    """One TPC task of a run (or one target): a header and its transactions."""

    title: str
    target: str
    namespace: str
    rows: list[Row]
    links: list[tuple[str, str]] = field(default_factory=list)
    note: str | None = None
    #: A table target's own name (``iceberg://<catalog>/<ns>.<table>``, the Delta URI):
    #: shown as what the section writes, with ``target`` as its location.
    table: str | None = None
    #: A table's word for a commit in its history: ``snapshot_id`` (Iceberg) or
    #: ``version`` (Delta); the rows' info carries it (``tables.history.annotate``).
    version_key: str | None = None
    #: Why the table's history could not be read (the versions are unknown then).
    table_error: str | None = None

    @property
    def name(self) -> str:
        """What the section writes, as users name it: the table URI, else the folder."""
        return self.table or self.target


def state_badge(info: Mapping[str, Any]) -> str:
    state = str(info.get("state"))
    out = f'<span class="badge state-{esc(state)}" data-state="{esc(state)}">{esc(state)}</span>'
    if info.get("superseded"):
        out += '<span class="tag state-SUPERSEDED">superseded</span>'
    elif info.get("published"):
        out += '<span class="tag">published</span>'
    return out


def expiry(row: Row | GroupRow, now: float) -> str:
    """Time left before an undecided attempt expires (recover aborts it then)."""
    info = row.info
    if str(info.get("state")) not in ABORTABLE or row.timeout_s is None \
            or info.get("started_at") is None:
        return _DASH
    left = info["started_at"] + row.timeout_s - now
    if left < 0:
        return f'<span class="warn">expired {esc(human_duration(left))} ago</span>'
    return f"in {esc(human_duration(left))}"


def _abort_button(row: Row) -> str:
    info = row.info
    if row.abort_url is None or row.identity is None \
            or str(info.get("state")) not in ABORTABLE:
        return ""
    return (f'<button type="button" class="danger" onclick="tpcAskAbort(this)" '
            f'data-url="{esc(row.abort_url)}" data-txn="{esc(info["txn_id"])}" '
            f'data-target="{esc(row.identity.get("target"))}" '
            f"data-identity=\"{esc(json.dumps(row.identity, sort_keys=True))}\">"
            "Abort</button>")


_COLUMNS = ("State", "Epoch", "Attempt", "Files", "Rows", "Size", "Staged",
            "Started", "Decided", "Expires", "Reason", "")
#: A table section's extra column (before "Staged"): the commit's place in the table.
VERSION_HEADERS = {"snapshot_id": "Snapshot", "version": "Version"}


def _staged(info: Mapping[str, Any]) -> str:
    """What is really still staged.  A table's committed attempt keeps its files where
    they were staged: once its commit reached the table they *are* the table's data
    files (``in_table``), not leftovers, and are not counted here."""
    if info.get("in_table") and info.get("staging_files"):
        return (f'<span class="none" data-staged="in-table" title="'
                f'{esc(number(info.get("staging_files")))} file(s) the table took where they '
                'were staged: data files of the table, not leftovers">—</span>')
    if not info.get("staging_files"):
        return _DASH
    return f"{number(info.get('staging_files'))} / {human_bytes(info.get('staging_bytes'))}"


def version_cell(info: Mapping[str, Any], key: str) -> str:
    """The snapshot (Iceberg) or version (Delta) the attempt's commit made; a decided
    commit not yet carried into the table says so."""
    value = info.get(key)
    if value is not None:
        text = str(value)
        half = (len(text) + 1) // 2
        # A 19-digit snapshot id may fold once, in the middle (<wbr>: copying it still
        # gives the whole id), so the run page fits a 1280 px window.
        shown = f"{esc(text[:half])}<wbr>{esc(text[half:])}" if len(text) > 10 else esc(text)
        return (f'<code class="version" data-version="{esc(text)}" title="{esc(key)} '
                f'{esc(text)}">{shown}</code>')
    if str(info.get("state")) != "COMMITTED":
        return _DASH
    if not info.get("in_table"):
        return '<span class="tag" data-version="pending">not in the table yet</span>'
    why = info.get("table_error") or "no retained table version carries this commit " \
                                     "(expired from the table's history)"
    return f'<span class="none" title="{esc(why)}">—</span>'


def _table(rows: Sequence[Row], now: float, with_owner: bool,
           version_key: str | None = None) -> str:
    cols = list(_COLUMNS)
    if version_key:
        cols.insert(cols.index("Staged"), VERSION_HEADERS.get(version_key, version_key))
    if with_owner:
        cols.insert(-1, "Run")
    num = {"Attempt", "Files", "Rows", "Size"}
    head = "".join(f'<th class="num">{c}</th>' if c in num else f"<th>{c}</th>" for c in cols)
    body = []
    for row in rows:
        i = row.info
        cells = [
            f'<td class="state">{state_badge(i)}</td>',
            f'<td class="mono">{esc(i["epoch"])}</td>',
            f'<td class="num">{int(i["attempt"])}</td>',
            f'<td class="num" data-col="files">{number(i.get("files"))}</td>',
            f'<td class="num" data-col="rows">{number(i.get("rows"))}</td>',
            f'<td class="num" data-col="bytes">{human_bytes(i.get("bytes"))}</td>',
            *([f'<td class="version" data-col="version">{version_cell(i, version_key)}</td>']
              if version_key else []),
            f'<td class="wrap" data-col="staged">{_staged(i)}</td>',
            f'<td class="wrap">{age(i.get("started_at"), now)}</td>',
            f'<td class="wrap">{age(i.get("decided_at"), now)}</td>',
            f'<td class="wrap">{expiry(row, now)}</td>',
            f'<td class="reason">{text(i.get("reason"))}</td>',
        ]
        if with_owner:
            if row.owner is None:
                cells.append(f"<td>{_DASH}</td>")
            else:
                label, href = row.owner
                cells.append(f'<td><a href="{esc(href)}">{esc(label)}</a></td>' if href
                             else f"<td>{esc(label)}</td>")
        actions = []
        if row.manifest_href:
            actions.append(f'<a href="{esc(row.manifest_href)}">Manifest</a>')
        if button := _abort_button(row):
            actions.append(button)
        cells.append(f'<td class="act"><span class="actions">{"".join(actions)}</span></td>')
        body.append(f'<tr data-txn="{esc(i["txn_id"])}" data-state="{esc(i["state"])}" '
                    f'title="{esc(i["txn_id"])}">'
                    + "".join(cells) + "</tr>")
    return (f'<div class="table-wrap"><table><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(body)}</tbody></table></div>')


def section(sec: Section, now: float, *, with_owner: bool = False) -> str:
    links = " · ".join(f'<a href="{esc(h)}">{esc(label)}</a>' for label, h in sec.links)
    where = (f'<span class="meta">table <code data-table="{esc(sec.table)}">'
             f'{esc(sec.table)}</code></span>'
             f'<span class="meta">location <code data-location="{esc(sec.target)}">'
             f'{esc(sec.target)}</code></span>'
             if sec.table else f'<span class="meta">target <code>{esc(sec.target)}</code></span>')
    header = (f'<header><h2>{esc(sec.title)}</h2>{where}'
              f'<span class="meta">namespace <code>{esc(sec.namespace)}</code></span>'
              f'<span class="meta">{links}</span></header>')
    if sec.note:
        header += f'<div class="empty">{esc(sec.note)}</div>'
    if sec.table_error:
        header += (f'<div class="empty warn" data-table-error>The table\'s history could not '
                   f'be read: {esc(sec.table_error)}</div>')
    body = _table(sec.rows, now, with_owner, sec.version_key) if sec.rows else \
        '<div class="empty">No transaction yet.</div>'
    return f'<section class="card" data-target="{esc(sec.name)}">{header}{body}</section>'


@dataclass
class MemberRow:
    """One member's attempt in a group's card: what it writes and its own ledger's facts."""

    name: str
    #: What the member writes as users name it: a table's URI, else the folder.
    target: str
    #: A table member's location (None for a folder).
    location: str | None
    #: The member attempt's ``TxnInfo`` dict (annotated); None: it never began.
    info: dict[str, Any] | None
    version_key: str | None = None
    manifest_href: str | None = None


@dataclass
class GroupRow:
    """One attempt of a group: its state from the group's ledger, then its members."""

    #: txn_id, epoch, attempt, state, published, superseded, reason, started_at,
    #: decided_at and the members' totals (files, rows, bytes)
    info: dict[str, Any]
    members: list[MemberRow]
    timeout_s: float | None = None
    abort_url: str | None = None
    #: The group attempt's full identity (task_id, group, namespace, epoch, attempt,
    #: txn_id), posted by the Abort button: the group is aborted, every member with it.
    identity: dict[str, Any] | None = None


@dataclass
class GroupSection:
    """One group transaction of a run (the task that began it): one card, every member."""

    title: str
    group: str
    namespace: str
    rows: list[GroupRow]
    #: Why the group could not be opened (its card says so instead of its attempts).
    error: str | None = None
    #: The group's own page (members, decision, cut status), linked from its card.
    href: str | None = None


def _group_button(sec: GroupSection, row: GroupRow) -> str:
    if row.abort_url is None or row.identity is None \
            or str(row.info.get("state")) not in ABORTABLE:
        return ""
    members = ", ".join(m.name for m in row.members)
    return (f'<button type="button" class="danger" onclick="tpcAskAbort(this)" '
            f'data-url="{esc(row.abort_url)}" data-txn="{esc(row.info["txn_id"])}" '
            f'data-target="{esc(f"group {sec.group} (every member: {members})")}" '
            f"data-identity=\"{esc(json.dumps(row.identity, sort_keys=True))}\">"
            "Abort group</button>")


def _member_target(m: MemberRow) -> str:
    """A member's name, and under it what it writes: a table by its URI (its location
    beside it), else the folder."""
    name = f'<span class="member-name">{esc(m.name)}</span>'
    if m.location:
        return (f'{name}<div><code data-table="{esc(m.target)}">{esc(m.target)}</code></div>'
                f'<div class="meta">location <code data-location="{esc(m.location)}">'
                f"{esc(m.location)}</code></div>")
    return f'{name}<div><code data-target="{esc(m.target)}">{esc(m.target)}</code></div>'


def group_section(sec: GroupSection, now: float) -> str:
    """A group's card: per attempt (newest first) the group's own row — its state from
    the group's ledger, the members' totals, **Abort group** — then one row per member
    (name, target, that member attempt's state and files, its manifest).  The epoch is
    the card's (a run's group attempts are of one epoch), in its header."""
    epochs = sorted({str(r.info["epoch"]) for r in sec.rows})
    epoch = "".join(f'<span class="meta">epoch <code data-epoch>{esc(e)}</code></span>'
                    for e in epochs)
    title = (f'<a href="{esc(sec.href)}" data-group-page>{esc(sec.title)}</a>' if sec.href
             else esc(sec.title))
    header = (f'<header><h2>{title}</h2><span class="tag">group transaction</span>'
              f'<span class="meta">group <code data-group-uri="{esc(sec.group)}">'
              f'{esc(sec.group)}</code></span>'
              f'<span class="meta">namespace <code>{esc(sec.namespace)}</code></span>{epoch}'
              "</header>")
    attrs = f'class="card group-card" data-group="{esc(sec.group)}"'
    if sec.error:
        return (f'<section {attrs} data-error>{header}<div class="empty warn">The group could '
                f"not be opened: {esc(sec.error)}</div></section>")
    if not sec.rows:
        return f'<section {attrs}>{header}<div class="empty">No transaction yet.</div></section>'
    keys = {m.version_key for r in sec.rows for m in r.members} - {None}
    cols = ["State", "Member", "Attempt", "Files", "Rows", "Size",
            *(["Version"] if keys else []), "Started", "Decided", "Expires", "Reason", ""]
    num = {"Attempt", "Files", "Rows", "Size"}
    head = "".join(f'<th class="num">{c}</th>' if c in num else f"<th>{c}</th>" for c in cols)

    def cells(i: Mapping[str, Any], expires: str, version: str | None) -> str:
        return "".join([
            f'<td class="num">{int(i["attempt"])}</td>',
            f'<td class="num" data-col="files">{number(i.get("files"))}</td>',
            f'<td class="num" data-col="rows">{number(i.get("rows"))}</td>',
            f'<td class="num" data-col="bytes">{human_bytes(i.get("bytes"))}</td>',
            *([f'<td class="version" data-col="version">{version}</td>'] if keys else []),
            f'<td class="wrap">{age(i.get("started_at"), now)}</td>',
            f'<td class="wrap">{age(i.get("decided_at"), now)}</td>',
            f'<td class="wrap">{expires}</td>',
            f'<td class="reason">{text(i.get("reason"))}</td>'])

    bodies = []
    for row in sec.rows:
        g = row.info
        state = esc(g["state"])
        trs = [f'<tr class="group-row" data-group-txn="{esc(g["txn_id"])}" data-state="{state}" '
               f'title="{esc(g["txn_id"])}"><td class="state">{state_badge(g)}</td>'
               f'<td class="target"><strong>whole group</strong><div class="meta">'
               f'{esc(", ".join(m.name for m in row.members))}</div></td>'
               + cells(g, expiry(row, now), _DASH)
               + f'<td class="act"><span class="actions">{_group_button(sec, row)}'
               "</span></td></tr>"]
        for m in row.members:
            i = m.info or {"epoch": g["epoch"], "attempt": g["attempt"], "state": "—",
                           "reason": "this member's attempt never began"}
            version = version_cell(i, m.version_key) if m.version_key and m.info else _DASH
            link = f'<a href="{esc(m.manifest_href)}">Manifest</a>' \
                if m.manifest_href and m.info else ""
            trs.append(
                f'<tr class="member-row" data-member="{esc(m.name)}" '
                f'data-txn="{esc(g["txn_id"])}" data-state="{esc(i["state"])}">'
                f'<td class="state">{state_badge(i) if m.info else _DASH}</td>'
                f'<td class="target member">{_member_target(m)}</td>'
                + cells(i, _DASH, version)
                + f'<td class="act"><span class="actions">{link}</span></td></tr>')
        bodies.append(f'<tbody data-group-txn="{esc(g["txn_id"])}" data-state="{state}">'
                      + "".join(trs) + "</tbody>")
    table = (f'<div class="table-wrap"><table><thead><tr>{head}</tr></thead>'
             f'{"".join(bodies)}</table></div>')
    return f"<section {attrs}>{header}{table}</section>"
