"""How sizes are shown to people: one rule for the CLI's tables and the run page."""

from __future__ import annotations


def human_bytes(n: int) -> str:
    """1536 -> '1.5 KiB'; below 1 KiB the exact count ('512 B'); binary units to TiB."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024:
            return f"{n} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"
