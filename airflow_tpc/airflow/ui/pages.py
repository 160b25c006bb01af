"""What each page of the UI plugin shows: the run, target, manifest and index pages.

Apart from the app (:mod:`airflow_tpc.airflow.ui.app`), which authorizes a request and
picks the page, because a page is decided here from the ledger (through the hooks,
:mod:`~airflow_tpc.airflow.ui.runs` and :mod:`~airflow_tpc.airflow.ui.groups`) for an
already-authorized request, and drawn by :mod:`~airflow_tpc.airflow.ui.render`.
"""

# No ``from __future__ import annotations``, as in the app these pages were part of.
from typing import Any
from urllib.parse import quote

from airflow_tpc.airflow.ui import groups, runs
from airflow_tpc.airflow.ui import render as ui
from airflow_tpc.tables import history


def _owner_of(info: Any) -> tuple[str, str] | None:
    owner = info.owner or {}
    if owner.get("dag_id") and owner.get("run_id"):
        return str(owner["dag_id"]), str(owner["run_id"])
    return None


def _airflow_run_href(dag_id: str, run_id: str) -> str:
    return f"/dags/{quote(dag_id, safe='')}/runs/{quote(run_id, safe='')}"


def _section(sink: Any, title: str, rows: list[Any], **kwargs: Any) -> Any:
    """A card of one target: a table named by its URI, its location beside it, and the
    column of the snapshot / version each commit made."""
    errors = {r.info.get("table_error") for r in rows} - {None}
    return ui.Section(title=title, target=sink.target, namespace=sink.namespace, rows=rows,
                      table=history.table_uri(sink), version_key=history.version_key(sink),
                      table_error=next(iter(errors), None), **kwargs)


def _run_page(base: str, dag_id: str, run_id: str, csrf: str, now: float) -> str:
    abort_url = ui.url(f"{base}/api/abort", dag_id=dag_id, run_id=run_id)
    sections = []
    for task_id, doc in runs.run_docs(dag_id, run_id):
        hook = runs.hook_for(doc)
        sink = hook.get_sink()
        infos = sorted(hook.run_attempts(doc, dag_id, run_id),
                       key=lambda i: (i.epoch, i.attempt), reverse=True)
        rows = [ui.Row(d, timeout_s=runs.timeout_of(sink, i), abort_url=abort_url,
                       identity=runs.Found(dag_id, run_id, task_id, sink, i).identity(),
                       manifest_href=ui.url(f"{base}/manifest", dag_id=dag_id, run_id=run_id,
                                            task_id=task_id, epoch=i.epoch, attempt=i.attempt))
                for i, d in zip(infos, runs.info_dicts(sink, infos), strict=True)]
        sections.append(_section(sink, task_id, rows, links=[
            ("All transactions of this target",
             ui.url(f"{base}/target", dag_id=dag_id, task_id=task_id))]))
    body = (ui.crumbs([("airflow-tpc", f"{base}/"), (dag_id, None), (run_id, None)])
            + f"<h1>Transactions of run <code>{ui.esc(run_id)}</code></h1>"
            + f'<p class="sub">DAG <code>{ui.esc(dag_id)}</code> · '
            + f'<a href="{ui.esc(_airflow_run_href(dag_id, run_id))}" target="_top">'
            + "open the run in Airflow</a></p>")
    group_sections = groups.run_sections(base, dag_id, run_id)  # one card per group
    if sections or group_sections:
        body += "".join(ui.section(s, now) for s in sections)
        body += "".join(ui.group_section(g, now) for g in group_sections)
    else:
        body += ('<section class="card"><div class="empty">This run began no airflow-tpc '
                 "transaction (yet).</div></section>")
    return ui.page(f"{dag_id} / {run_id}", body, csrf=csrf, now=now)


def _target_page(base: str, dag_id: str, task_id: str, doc: dict[str, Any],
                 can_read: Any, csrf: str, now: float) -> str:
    hook = runs.hook_for(doc)
    sink = hook.get_sink()
    rows, hidden = [], 0
    infos = sorted(sink.describe(), key=lambda i: (i.started_at or 0, i.epoch, i.attempt),
                   reverse=True)
    shown = []
    for info in infos:
        owner = _owner_of(info)
        if owner is not None and owner[0] != dag_id and not can_read(owner[0]):
            hidden += 1  # begun by a DAG this user may not read
            continue
        shown.append(info)
    for info, d in zip(shown, runs.info_dicts(sink, shown), strict=True):
        owner = _owner_of(info)
        row = ui.Row(d, timeout_s=runs.timeout_of(sink, info),
                     manifest_href=ui.url(f"{base}/manifest", dag_id=dag_id, task_id=task_id,
                                          epoch=info.epoch, attempt=info.attempt))
        if owner is not None:
            odag, orun = owner
            row.owner = (f"{odag} / {orun}", ui.url(f"{base}/run", dag_id=odag, run_id=orun))
            row.abort_url = ui.url(f"{base}/api/abort", dag_id=odag, run_id=orun)
            # The owning run's task may have another id: name the target instead.
            row.identity = {"target": history.shown_target(sink),
                            "namespace": sink.namespace,
                            "epoch": info.epoch, "attempt": int(info.attempt),
                            "txn_id": info.txn_id}
        rows.append(row)
    note = (f"{hidden} transaction(s) begun by DAGs you may not read are not shown."
            if hidden else None)
    sec = _section(sink, f"{dag_id}.{task_id}", rows, note=note)
    body = (ui.crumbs([("airflow-tpc", f"{base}/"), (dag_id, None), (task_id, None)])
            + f"<h1>Transactions of {'table' if sec.table else 'target'} "
            f"<code>{ui.esc(sec.name)}</code></h1>"
            + '<p class="sub">Every epoch and attempt in the ledger, newest first.</p>'
            + ui.section(sec, now, with_owner=True))
    return ui.page(f"{'table' if sec.table else 'target'} {sec.name}", body, csrf=csrf,
                   now=now)


def _manifest_page(base: str, dag_id: str, back: tuple[str, str], sink: Any, info: Any,
                   now: float) -> str:
    view = runs.manifest_view(sink, info)
    files, (tf, tb, tr) = view["files"], view["totals"]
    [row] = runs.info_dicts(sink, [info])
    table = history.table_uri(sink)
    facts = [("Transaction", f"<code>{ui.esc(info.txn_id)}</code>"),
             ("State", ui.state_badge(row)),
             ("Table" if table else "Target", f"<code>{ui.esc(table or sink.target)}</code>")]
    if table:
        key = history.version_key(sink) or ""
        facts += [("Table location", f"<code>{ui.esc(sink.target)}</code>"),
                  (ui.VERSION_HEADERS.get(key, key), ui.version_cell(row, key))]
    facts += [("Source", ui.esc(view["source"])),
              ("Location", ui.text(view["uri"])),
              ("Digest", f'<code>{ui.text(view["digest"])}</code>'),
              ("Files", ui.number(tf)), ("Rows", ui.number(tr)),
              ("Size", ui.human_bytes(tb)),
              ("Started", ui.age(info.started_at, now)),
              ("Decided", ui.age(info.decided_at, now)),
              ("Reason", ui.text(info.reason))]
    dl = "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in facts)
    table = ""
    if files is not None:
        trs = "".join(
            f'<tr class="manifest-file"><td class="mono">{ui.esc(f["path"])}</td>'
            f'<td class="num" title="{int(f["size"])} bytes">{ui.human_bytes(f["size"])}</td>'
            f'<td class="num">{ui.number(f.get("rows"))}</td>'
            f'<td class="mono">{ui.text(f.get("checksum"))}</td></tr>' for f in files)
        table = ('<div class="table-wrap"><table id="manifest-files"><thead><tr><th>File</th>'
                 '<th class="num">Size</th><th class="num">Rows</th><th>Checksum</th></tr>'
                 f"</thead><tbody>{trs}</tbody></table></div>")
    body = (ui.crumbs([("airflow-tpc", f"{base}/"), back, (f"{info.epoch}/{info.attempt}", None)])
            + f"<h1>Manifest of <code>{ui.esc(info.txn_id)}</code></h1>"
            + f'<section class="card"><dl class="facts">{dl}</dl>{table}</section>')
    return ui.page(f"manifest {info.txn_id}", body, now=now)


def _index_page(base: str, docs: list[dict[str, Any]], now: float) -> str:
    trs = []
    for d in docs:
        doc = d["doc"]
        ts = d["timestamp"].timestamp() if d["timestamp"] is not None else None
        run_href = ui.url(f"{base}/run", dag_id=d["dag_id"], run_id=d["run_id"])
        if d.get("group"):  # a group transaction: its own page (members, decision, cut)
            href = ui.url(f"{base}/group", dag_id=d["dag_id"], run_id=d["run_id"],
                          task_id=d["task_id"])
            what = (f'<span class="tag">group</span> '
                    f'<code>{ui.esc(doc.get("group") or doc.get("group_uri"))}</code>')
        else:
            href = ui.url(f"{base}/target", dag_id=d["dag_id"], task_id=d["task_id"])
            what = f'<code>{ui.esc(doc.get("table") or doc.get("target"))}</code>'
        kind = "group" if d.get("group") else "single"
        trs.append(
            f'<tr data-kind="{kind}"><td><a href="{ui.esc(run_href)}">'
            f'{ui.esc(d["dag_id"])} / {ui.esc(d["run_id"])}</a></td>'
            f'<td class="mono">{ui.esc(d["task_id"])}</td>'
            f'<td><a href="{ui.esc(href)}">{what}</a></td>'
            f'<td class="mono">{ui.esc(doc.get("epoch"))}</td>'
            f'<td class="num">{ui.esc(doc.get("attempt"))}</td>'
            f"<td>{ui.age(ts, now)}</td></tr>")
    table = ('<div class="table-wrap"><table><thead><tr><th>Run</th><th>Task</th>'
             '<th>Target or group</th><th>Epoch</th><th class="num">Attempt</th>'
             '<th>Begun</th></tr></thead>'
             f'<tbody>{"".join(trs)}</tbody></table></div>') if trs else \
        '<div class="empty">No airflow-tpc transaction in DAGs you may read.</div>'
    body = ("<h1>airflow-tpc transactions</h1>"
            '<p class="sub">The newest transactions (single targets and groups) begun by DAG '
            "runs you may read; open a run, a target or a group for states from the ledger; "
            f'<a href="{ui.esc(base)}/undecided" data-undecided>every undecided '
            "transaction</a>.</p>"
            f'<section class="card">{table}</section>')
    return ui.page("transactions", body, now=now)
