"""The frame every airflow-tpc page shares: the whole page (CSS, JS, the Abort dialog), the
error page, breadcrumbs, and how one value is drawn (escaped; a missing one as a dash).

Apart from :mod:`~airflow_tpc.airflow.ui.render`, which draws the cards of transactions
and groups, because these know nothing of transactions: plain values to escaped HTML.
"""

from __future__ import annotations

import html
import time
from collections.abc import Iterable
from datetime import datetime, timezone
from functools import cache
from importlib.resources import files
from typing import Any
from urllib.parse import urlencode

from ...core import units

_DASH = '<span class="none">—</span>'


@cache
def _static(name: str) -> str:
    return files("airflow_tpc.airflow.ui").joinpath("static", name).read_text("utf-8")


def esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def human_bytes(n: int | None) -> str:
    """1536 -> '1.5 KiB'; None -> a dash."""
    return _DASH if n is None else units.human_bytes(n)


def human_duration(seconds: float) -> str:
    """A short duration: '45 s', '12 min', '3 h 5 min', '2 d 4 h'."""
    s = int(abs(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min"
    if s < 86400:
        h, m = divmod(s // 60, 60)
        return f"{h} h {m} min" if m else f"{h} h"
    d, h = divmod(s // 3600, 24)
    return f"{d} d {h} h" if h else f"{d} d"


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def age(ts: float | None, now: float) -> str:
    """'5 min ago', with the UTC time as the tooltip."""
    if ts is None:
        return _DASH
    return f'<time datetime="{esc(iso(ts))}" title="{esc(iso(ts))}">' \
           f"{esc(human_duration(now - ts))} ago</time>"


def number(n: int | None) -> str:
    return _DASH if n is None else f"{n:,}"


def text(value: Any) -> str:
    return _DASH if value is None or value == "" else esc(value)


def url(path: str, **query: Any) -> str:
    q = {k: v for k, v in query.items() if v is not None}
    return f"{path}?{urlencode(q)}" if q else path


def crumbs(parts: Iterable[tuple[str, str | None]]) -> str:
    items = []
    for label, href in parts:
        items.append(f'<a href="{esc(href)}">{esc(label)}</a>' if href else esc(label))
    return '<nav class="crumbs">' + '<span class="sep">›</span>'.join(items) + "</nav>"


_DIALOG = """
<dialog id="tpc-abort-dialog" aria-labelledby="tpc-abort-title">
  <h2 id="tpc-abort-title">Abort transaction?</h2>
  <p>Abort <code id="tpc-abort-txn"></code>? Its staged files are deleted and it can never
  commit. A later attempt of the epoch can still run. This cannot be undone.</p>
  <div class="actions">
    <button type="button" onclick="tpcCancelAbort()">Cancel</button>
    <button type="button" class="danger solid" id="tpc-abort-confirm"
            onclick="tpcConfirmAbort()">Abort transaction</button>
  </div>
</dialog>"""


def page(title: str, body: str, *, csrf: str = "", now: float | None = None) -> str:
    """A whole page: inline CSS and JS (one request, works inside Airflow's iframe)."""
    stamp = iso(time.time() if now is None else now)
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<meta name="tpc-csrf" content="{esc(csrf)}">'
        f"<title>{esc(title)} · airflow-tpc</title>"
        f"<style>{_static('tpc.css')}</style><script>{_static('tpc.js')}</script>"
        f'</head><body><p id="tpc-message" role="status"></p>{body}'
        f'<p class="sub">Read from the ledger at {esc(stamp)}.</p>{_DIALOG}</body></html>')


def error_page(status: int, title: str, detail: str, *, login_href: str | None = None) -> str:
    login = f' <a href="{esc(login_href)}" target="_top">Log in</a>' if login_href else ""
    body = (f'{crumbs([("airflow-tpc", "./")])}<h1>{esc(status)} · {esc(title)}</h1>'
            f'<p class="sub" data-error="{esc(status)}">{esc(detail)}{login}</p>')
    return page(title, body)
