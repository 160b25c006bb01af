"""Plots of the benchmark results (matplotlib, Agg backend, SVG in docs/img/).

The benchmarks call :func:`plot_core` and :func:`plot_spark` with the results
they just measured (the dicts they also save as ``bench/results/*.json``). Run
alone, this redraws every plot from those saved results without measuring again::

    .venv/bin/python bench/plotting.py

matplotlib is optional (the ``bench`` extra): without it :func:`unavailable`
says why and the benchmarks write their tables only.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
IMG_DIR = ROOT / "docs" / "img"
RESULTS_DIR = ROOT / "bench" / "results"

# One colour per thing measured, the same in every plot.
COLORS = {"v1": "#7f7f7f", "v2": "#bcbd22", "default": "#9467bd", "size": "#1f77b4",
          "checksum": "#ff7f0e", "precommit": "#2ca02c", "manifest": "#2ca02c",
          "plain": "#7f7f7f", "native-eo": "#1f77b4", "native-eo-size": "#17becf",
          "tpc-source": "#ff7f0e", "seq": "#d62728", "par": "#1f77b4"}


def unavailable() -> str | None:
    """None if plots can be drawn, else the reason they cannot."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return ("matplotlib is not installed (`.venv/bin/python -m uv pip install -e "
                "\".[bench]\"`, or run `scripts/bench.sh`)")
    return None


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # Reproducible SVG: text as text, fixed ids, no date.
    plt.rcParams.update({"svg.fonttype": "none", "svg.hashsalt": "airflow-tpc-bench",
                         "font.size": 9, "axes.grid": True, "grid.alpha": 0.3,
                         "axes.spines.top": False, "axes.spines.right": False})
    return plt


def _save(fig: Any, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, format="svg", metadata={"Date": None})
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path


def _med(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def _paired(num: list[float], den: list[float]) -> float:
    return _med([a / b for a, b in zip(num, den, strict=True) if b > 0])


def _errbar(ax: Any, xs: list[float], series: list[list[float]], label: str, color: str,
            **kw: Any) -> None:
    """Median line with min-max whiskers."""
    meds = [_med(v) for v in series]
    lo = [m - min(v) for m, v in zip(meds, series, strict=True)]
    hi = [max(v) - m for m, v in zip(meds, series, strict=True)]
    ax.errorbar(xs, meds, yerr=[lo, hi], label=label, color=color, marker="o", ms=4,
                capsize=3, lw=1.5, **kw)


def _files_axis(ax: Any, ns: list[int]) -> None:
    ax.set_xscale("log")
    ax.set_xticks(ns)
    ax.set_xticklabels([f"{n:,}" for n in ns])
    ax.minorticks_off()
    ax.set_xlabel("files in the epoch")


def _log_axis(ax: Any, fmt: Any, base: int = 10, subs: tuple[float, ...] = (1.0, 2.0, 5.0)
              ) -> None:
    """Log y axis with plain-number tick labels (``fmt``: value -> text)."""
    from matplotlib.ticker import FuncFormatter, LogLocator

    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(base=base, subs=subs))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: fmt(v)))
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda _v, _pos: ""))


def _ratio_axis(ax: Any, values: list[float]) -> None:
    """Log y axis for ratios, ticked at round values around 1x and the data."""
    from matplotlib.ticker import FixedLocator, NullLocator

    lo, hi = min([*values, 1.0]) / 1.25, max([*values, 1.0]) * 1.25
    ticks = [t for t in (0.1, 0.2, 0.3, 0.5, 0.75, 1, 1.5, 2, 3, 5, 7.5, 10, 15, 20, 30, 50,
                         100) if lo <= t <= hi]
    ax.set_yscale("log")
    ax.set_ylim(lo, hi)
    ax.yaxis.set_major_locator(FixedLocator(ticks))
    ax.yaxis.set_minor_locator(NullLocator())
    ax.yaxis.set_major_formatter(lambda v, _pos: f"{v:g}x")


def _sec_label(s: float) -> str:
    if s >= 1:
        return f"{s:g} s"
    return f"{s * 1000:g} ms" if s >= 0.001 else f"{s * 1e6:g} µs"


def _bytes_label(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.3g} {unit}"
        n /= 1024
    return f"{n:.3g} GiB"  # pragma: no cover


# ------------------------------------------------------------------ core
def plot_core(data: dict[str, Any], img_dir: Path = IMG_DIR) -> dict[str, Path]:
    """Plots of ``bench_core.py``'s results; {section: file} for those drawn."""
    plt = _plt()
    out: dict[str, Path] = {}
    local = data.get("local") or []
    if local:
        ns = [r["n"] for r in local]
        tpc = list(local[0]["commit"])
        fig, (ax, ax2) = plt.subplots(1, 2, figsize=(10, 4),
                                      gridspec_kw={"width_ratios": [3, 2]})
        _errbar(ax, ns, [r["job_commit"]["v1"] for r in local],
                "Hadoop FileOutputCommitter v1 commitJob", COLORS["v1"])
        v2 = [r for r in local if "v2" in r["job_commit"]]
        if v2:
            _errbar(ax, [r["n"] for r in v2],
                    [[a + b for a, b in zip(r["task_commit"]["v2"], r["job_commit"]["v2"],
                                            strict=True)] for r in v2],
                    "v2 commitTask + commitJob", COLORS["v2"], ls=":")
        for v in tpc:
            _errbar(ax, ns, [r["commit"][v] for r in local], f"tpc commit ({v})",
                    COLORS.get(v, COLORS["size"]))
        _errbar(ax, ns, [r["precommit"]["default"] for r in local],
                "tpc precommit (default; in the job)", COLORS["precommit"], ls="--")
        _log_axis(ax, _sec_label)
        _files_axis(ax, ns)
        ax.set_ylabel("time (median, min–max; log scale)")
        ax.set_title("Local disk: one epoch's commit")
        ax.legend(fontsize=7)
        vals = []
        for v in tpc:
            ys = [_paired(r["commit"][v], r["job_commit"]["v1"]) for r in local]
            vals += ys
            ax2.plot(ns, ys, marker="o", ms=4, color=COLORS.get(v, COLORS["size"]),
                     label=f"tpc ({v}) / v1")
        ax2.axhline(1, color=COLORS["v1"], lw=1, ls=":")
        ax2.axhline(0.05, color="#d62728", lw=1, ls="--", label="goal 0.05x")
        _ratio_axis(ax2, [*vals, 0.05])
        _files_axis(ax2, ns)
        ax2.set_ylabel("tpc commit / v1 commitJob (paired; log)")
        ax2.set_title("Ratio in the same run (1 = as slow as v1)")
        ax2.legend(fontsize=8)
        out["local"] = _save(fig, img_dir / "core-local-commit.svg")

    for r in data.get("s3") or []:
        modes = list(r["commit"])
        fig, (ax, ax2) = plt.subplots(1, 2, figsize=(10, 3.8))
        meds = [_med(r["commit"][m]) for m in modes]
        colors = [COLORS["par"], COLORS["seq"], COLORS["manifest"], COLORS["v1"]][:len(modes)]
        ax.bar(modes, meds, color=colors,
               yerr=[[m - min(r["commit"][k]) for m, k in zip(meds, modes, strict=True)],
                     [max(r["commit"][k]) - m for m, k in zip(meds, modes, strict=True)]],
               capsize=3)
        for i, m in enumerate(meds):
            ax.text(i, m, f"{m:.2f} s", ha="center", va="bottom", fontsize=8)
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(lambda v, _pos: _sec_label(v))
        ax.set_ylabel("commit, seconds (median, min–max; log)")
        ax.set_title(f"{r['n']:,} files, {r['latency_ms'][0]:g}-{r['latency_ms'][1]:g} ms "
                     "a request")
        ax.grid(axis="x", visible=False)
        ax.tick_params(axis="x", labelsize=7, labelrotation=15)
        reqs = [sum(r["commit_requests"][m][-1].values()) for m in modes]
        ax2.bar(modes, reqs, color=colors)
        for i, q in enumerate(reqs):
            ax2.text(i, q, f"{q:,}", ha="center", va="bottom", fontsize=8)
        ax2.set_yscale("log")
        ax2.set_ylabel("requests per commit (log)")
        ax2.set_title("Requests one commit sends")
        ax2.grid(axis="x", visible=False)
        ax2.tick_params(axis="x", labelsize=7, labelrotation=15)
        fig.suptitle("S3 (moto behind a latency proxy): promotion of one epoch", fontsize=10)
        out["s3"] = _save(fig, img_dir / "core-s3-commit.svg")

    mem = data.get("memory") or []
    if mem:
        ns = [m["n"] for m in mem]
        fig, (ax, ax2) = plt.subplots(1, 2, figsize=(10, 4))
        series = [("manifest_bytes", "manifest (staging)", "#1f77b4", "-"),
                  ("decision_bytes", "decision record (commit point)", "#ff7f0e", "--"),
                  ("marker_bytes", "published marker", "#2ca02c", ":"),
                  ("xcom_bytes", "XCom pointer (PrecommitSensor)", "#d62728", "-")]
        for key, label, color, ls in series:
            pts = [(m["n"], m[key]) for m in mem if (m.get(key) or 0) > 0]
            if pts:
                ax.plot(*zip(*pts, strict=True), marker="o", ms=4, label=label, color=color,
                        ls=ls)
        last = mem[-1]
        if last.get("xcom_bytes"):
            ax.annotate(f"{last['xcom_bytes']} B at {last['n']:,} files",
                        (last["n"], last["xcom_bytes"]), textcoords="offset points",
                        xytext=(-10, 10), ha="right", fontsize=8, color="#d62728")
        _log_axis(ax, _bytes_label, base=4, subs=(1.0,))
        _files_axis(ax, ns)
        ax.set_ylabel("size (log scale)")
        ax.set_title("Record and XCom sizes")
        ax.legend(fontsize=8)
        ax2.plot(ns, [m["precommit_peak"] for m in mem], marker="o", ms=4,
                 label="precommit() peak", color=COLORS["precommit"])
        ax2.plot(ns, [m["commit_peak"] for m in mem], marker="o", ms=4,
                 label="commit() peak", color=COLORS["size"])
        ax2.annotate(f"{_bytes_label(last['commit_peak'])}", (last["n"], last["commit_peak"]),
                     textcoords="offset points", xytext=(-8, 4), ha="right", fontsize=8)
        _log_axis(ax2, _bytes_label, base=4, subs=(1.0,))
        _files_axis(ax2, ns)
        ax2.set_ylabel("tracemalloc peak (log scale)")
        ax2.set_title("Python heap peak, local store")
        ax2.legend(fontsize=8)
        out["memory"] = _save(fig, img_dir / "core-sizes-memory.svg")
    return out


# ----------------------------------------------------------------- spark
def _total(phases: dict[str, float]) -> float:
    return sum(phases.values())


def _spark_cases(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """label -> case ({"times": ...}) of a spark.json: schema 2 ``cases``, or schema 1
    ``rows`` (one per row count, 2 files each)."""
    if "cases" in data:
        return {f"{c['rows']:,} rows\n{c['files']:,} files": c for c in data["cases"]}
    return {f"{int(k):,} rows\n2 files": v for k, v in data.get("rows", {}).items()}


def plot_spark(data: dict[str, Any], img_dir: Path = IMG_DIR) -> dict[str, Path]:
    """Plot of ``bench_spark.py``'s results; {"spark": file}."""
    plt = _plt()
    rows = _spark_cases(data)
    if not rows:
        return {}
    variants = list(next(iter(rows.values()))["times"])
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(max(11, 2.8 * len(rows) + 2), 4.8))
    width = 0.8 / len(variants)
    groups = list(rows)
    for i, v in enumerate(variants):
        xs = [g + (i - (len(variants) - 1) / 2) * width for g in range(len(groups))]
        vals = [[_total(p) for p in rows[r]["times"][v]] for r in groups]
        meds = [_med(x) for x in vals]
        ax.bar(xs, meds, width, color=COLORS.get(v), label=v,
               yerr=[[m - min(x) for m, x in zip(meds, vals, strict=True)],
                     [max(x) - m for m, x in zip(meds, vals, strict=True)]],
               capsize=2, error_kw={"lw": 0.8})
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels(groups)
    ax.set_ylabel("seconds per write (median, min–max)")
    ax.set_title("End to end: Spark write + begin, pre-commit, commit")
    ax.grid(axis="x", visible=False)
    ax.legend(fontsize=8)

    eo = [v for v in variants if v != "plain"]
    width = 0.8 / (2 * len(eo))
    k = 0
    for v in eo:
        for kind, hatch in (("protocol", None), ("job-side", "//")):
            xs = [g + (k - (2 * len(eo) - 1) / 2) * width for g in range(len(groups))]
            pct = []
            for r in groups:
                base = _med([_total(p) for p in rows[r]["times"]["plain"]])
                times = rows[r]["times"][v]
                val = _med([_total(p) - p["write"] for p in times]) if kind == "protocol" \
                    else _med([p.get("precommit", 0.0) for p in times])
                pct.append(100 * val / base)
            ax2.bar(xs, pct, width, color=COLORS.get(v), hatch=hatch, edgecolor="white",
                    label=f"{v}: {kind}")
            k += 1
    ax2.axhline(3, color="#d62728", lw=1, ls="--", label="3 % (issue 10, goal 4)")
    ax2.set_xticks(range(len(groups)))
    ax2.set_xticklabels(groups)
    ax2.set_ylabel("% of the plain write's median")
    ax2.set_title("Overhead, timed directly: protocol = begin + pre-commit + commit;\n"
                  "job-side = pre-commit (hatched)", fontsize=9)
    ax2.grid(axis="x", visible=False)
    ax2.legend(fontsize=7, ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.1),
               frameon=False)
    return {"spark": _save(fig, img_dir / "spark-variants.svg")}


def main() -> int:
    """Redraw every plot from ``bench/results/*.json``."""
    reason = unavailable()
    if reason:
        print(f"plots skipped: {reason}", file=sys.stderr)
        return 1
    for name, fn in (("core", plot_core), ("spark", plot_spark)):
        path = RESULTS_DIR / f"{name}.json"
        if path.exists():
            for f in fn(json.loads(path.read_text())).values():
                print(f"wrote {f.relative_to(ROOT)}")
        else:
            print(f"no {path.relative_to(ROOT)}: run the benchmark first", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
