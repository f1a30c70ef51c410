"""Plots of a bench run, drawn from its records (matplotlib, Agg backend: no display needed).

time_vs_<sweep>.png     median time against the sweep variable, one line per provider
memory_vs_<sweep>.png   extra memory (MiB) against the sweep variable, one line per provider
ratios.png              bars: time and extra memory over the best provider's, per point

A plot or panel with no finite value to show is left out (a CPU smoke run has no allocator
figures: no memory plot, and ratios.png has only its time panel), never drawn empty.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ligerbench.bench.spec import SweepPoint
from ligerbench.plotting import pyplot


def _series(df: pd.DataFrame, points: list[SweepPoint], metric: str, quantity: str | None) -> dict[str, list[float]]:
    """provider -> values in point order (NaN where absent)."""
    sel = df[(df["metric"] == metric) & df["verdict"].isin(["measured", "not_a_measurement"])]
    if quantity is not None:
        sel = sel[sel["quantity"] == quantity]
    out: dict[str, list[float]] = {}
    for provider in dict.fromkeys(sel["provider"]):
        p = sel[sel["provider"] == provider]
        by_case = dict(zip(p["case"], p["value"].astype(float), strict=True))
        out[provider] = [by_case.get(pt.case.id, float("nan")) for pt in points]
    return out


def _has_data(series: dict[str, list[float]]) -> bool:
    return any(y == y for ys in series.values() for y in ys)


def _line_plot(series, points, sweep: str, ylabel: str, title: str, path: Path) -> Path | None:
    if not _has_data(series):
        return None
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 5))
    xs = [pt.x for pt in points]
    for provider, ys in series.items():
        ax.plot(xs, ys, marker="o", label=provider)
    ax.set_xticks(xs, [pt.label for pt in points], rotation=30 if sweep == "heads" else 0)
    if sweep != "heads" and len(xs) > 1 and min(xs) > 0:
        ax.set_xscale("log", base=2)
        ax.set_xticks(xs, [pt.label for pt in points])
        ax.minorticks_off()
    ax.set_xlabel(sweep)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    finite = [y for ys in series.values() for y in ys if y == y and y > 0]
    if finite and max(finite) > 10 * min(finite):  # peers 10x apart: a linear axis hides the fast ones
        ax.set_yscale("log")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _ratio_bars(df, points, mode: str, title: str, path: Path) -> Path | None:
    panels = (("ratio_time_ms", mode, f"{mode} time / best"), ("ratio_extra_mib", "full", "extra memory / best"))
    panels = [(m, q, label, _series(df, points, m, q)) for m, q, label in panels]
    panels = [p for p in panels if _has_data(p[3])]
    if not panels:
        return None
    plt = pyplot()
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 5), squeeze=False)
    for ax, (_metric, _quantity, label, series) in zip(axes[0], panels, strict=True):
        width = 0.8 / max(1, len(series))
        for i, (provider, ys) in enumerate(series.items()):
            ax.bar([j + i * width for j in range(len(points))], ys, width=width, label=provider)
        offset = (len(series) - 1) * width / 2  # ticks at the middle of each point's group of bars
        ax.set_xticks([j + offset for j in range(len(points))], [pt.label for pt in points])
        finite = [y for ys in series.values() for y in ys if y == y]
        if finite and max(finite) > 10:  # a slow peer (or the interpreter) would flatten the others
            ax.set_yscale("log")
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_ylabel(label)
        ax.grid(True, axis="y", alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def draw(df: pd.DataFrame, points: list[SweepPoint], *, sweep: str, mode: str, title: str, folder: Path) -> list[Path]:
    """The plots drawn (those with data), in order."""
    drawn = [
        _line_plot(
            _series(df, points, "time_ms", mode),
            points,
            sweep,
            f"{mode} time, ms (median)",
            title,
            folder / f"time_vs_{sweep}.png",
        ),
        _line_plot(
            _series(df, points, "extra_mib", "full"),
            points,
            sweep,
            "extra memory over inputs, MiB (gradients included)",
            title,
            folder / f"memory_vs_{sweep}.png",
        ),
        _ratio_bars(df, points, mode, title, folder / "ratios.png"),
    ]
    return [p for p in drawn if p is not None]
