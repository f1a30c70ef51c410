"""The scaling view of `bench --nproc 1,2,4`: the same global problem split over each rank count,
every provider beside ours, as a table and a plot of time and memory per rank against ranks.

    ligerbench bench --kernel vp_flce --nproc 1,2,4 --sweep heads   # 4 GPUs: 1, 2 and 4 ranks
    ligerbench bench --kernel vp_ce --nproc 1,2 --smoke             # gloo on CPU, NOT a measurement

A point of the sweep (its label) is run once per rank count: the cases differ only in `world`.
One rank is the kernel on a world of one (no collective does any work); the `single_gpu` and
`gathered` yardsticks hold the whole problem on every rank, so their lines are what one GPU
costs. Perfect scaling halves a rank's time and its share of the memory at each doubling.

scaling.png   per sweep point: median time per rank and extra memory per rank (MiB, gradients
              included), both against ranks, one line per provider; memory is left out where no
              rank had an allocator to read (CPU)
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

import pandas as pd

from ligerbench.bench.spec import SweepPoint
from ligerbench.plotting import pyplot

FIGURES = (("time_ms", "time per rank, ms (median, the slowest rank)"),
           ("extra_mib", "extra memory per rank, MiB (the largest rank)"))  # fmt: skip
SHOWN = ("measured", "not_a_measurement")


def rank_counts(points: list[SweepPoint]) -> list[int]:
    """The run's rank counts, ascending; more than one makes it a scaling run."""
    return sorted({p.case.get("world", 0) for p in points if p.case.get("world", 0)})


def by_label(points: list[SweepPoint]) -> dict[str, dict[int, SweepPoint]]:
    """sweep label -> {ranks: that point split over them}, in sweep order."""
    out: dict[str, dict[int, SweepPoint]] = {}
    for p in points:
        out.setdefault(p.label, {})[p.case.get("world", 0)] = p
    return out


def largest(points: list[SweepPoint]) -> list[SweepPoint]:
    """The points at the most ranks: what the per-sweep plots of a scaling run show."""
    counts = rank_counts(points)
    return [p for p in points if p.case.get("world", 0) == counts[-1]] if counts else points


def _values(df: pd.DataFrame, metric: str, mode: str) -> dict[tuple[str, str], float]:
    """(provider, case id) -> the metric's value, measured rows only."""
    sel = df[(df["metric"] == metric) & df["verdict"].isin(SHOWN)]
    sel = sel[sel["quantity"] == (mode if metric == "time_ms" else "full")]
    return {(r.provider, r.case): float(r.value) for r in sel.itertuples(index=False)}


def _providers(df: pd.DataFrame, points: list[SweepPoint]) -> list[str]:
    ids = {p.case.id for p in points}
    rows = df[df["case"].isin(ids) & (df["provider"] != "ceiling")]
    return list(dict.fromkeys(rows["provider"]))


def _fmt(value: float) -> str:
    return f"{value:.4g}" if math.isfinite(value) else "-"


def ranks_text(n: int) -> str:
    return f"{n} rank" if n == 1 else f"{n} ranks"


def _verdicts(df: pd.DataFrame) -> dict[tuple[str, str], str]:
    """(provider, case id) -> "skip" or "error" where the step was not measured."""
    bad = df[df["verdict"].isin(["skip", "error"]) & (df["metric"] == "time_ms")]
    return {(r.provider, r.case): r.verdict for r in bad.itertuples(index=False)}


def table(df: pd.DataFrame, points: list[SweepPoint], *, sweep: str, mode: str) -> list[str]:
    """Markdown: per sweep point, a row per provider, a column per rank count, each cell
    `ms / MiB` per rank (`-` where a figure is missing: no allocator on CPU; `skip` or `error`
    where the step did not run), and the loss at every count: one number where the counts agree
    to 6 digits, the same global problem seen through each split."""
    counts = rank_counts(points)
    if len(counts) < 2:
        return []
    times, memory = _values(df, "time_ms", mode), _values(df, "extra_mib", mode)
    losses, unmeasured = _values(df, "loss", mode), _verdicts(df)
    lines = [
        "## Scaling: time / extra memory per rank against ranks",
        "",
        f"The same global problem at every rank count; each cell is `{mode} ms / extra MiB` per rank (the slowest "
        "and the largest rank). Perfect scaling halves both at each doubling; `single_gpu` and `gathered` hold the "
        "whole problem on every rank (single_gpu's head is a rank's shard tiled: its loss differs by design).",
        "",
    ]
    for label, at in by_label(points).items():
        lines += [f"### {sweep} = {label}", "", "| provider | " + " | ".join(map(ranks_text, counts)) + " | loss |",
                  "|---|" + "---|" * (len(counts) + 1)]  # fmt: skip
        for provider in _providers(df, list(at.values())):
            cells, seen = [], []
            for n in counts:
                key = (provider, at[n].case.id) if n in at else ("", "")
                if key in unmeasured:
                    cells.append(unmeasured[key])
                    continue
                cells.append(f"{_fmt(times.get(key, math.nan))} / {_fmt(memory.get(key, math.nan))}")
                if math.isfinite(losses.get(key, math.nan)):
                    seen.append(f"{losses[key]:.6g}")
            loss = seen[0] if len(set(seen)) == 1 else " / ".join(seen) or "-"
            lines.append(f"| {provider} | " + " | ".join(cells) + f" | {loss} |")
        lines.append("")
    return lines


def draw(df: pd.DataFrame, points: list[SweepPoint], *, mode: str, title: str, folder: Path) -> list[Path]:
    """scaling.png, or nothing when the run has one rank count."""
    counts = rank_counts(points)
    if len(counts) < 2:
        return []
    figures = [(metric, label, _values(df, metric, mode)) for metric, label in FIGURES]
    figures = [f for f in figures if any(math.isfinite(v) for v in f[2].values())]
    if not figures:
        return []
    labels = by_label(points)
    plt = pyplot()
    fig, axes = plt.subplots(len(labels), len(figures), figsize=(6 * len(figures), 4.5 * len(labels)), squeeze=False)
    for row, (label, at) in zip(axes, labels.items(), strict=True):
        for ax, (_metric, ylabel, values) in zip(row, figures, strict=True):
            for provider in _providers(df, list(at.values())):
                ys = [values.get((provider, at[n].case.id), math.nan) if n in at else math.nan for n in counts]
                if any(math.isfinite(y) for y in ys):
                    ax.plot(counts, ys, marker="o", label=provider)
            finite = [v for v in values.values() if math.isfinite(v) and v > 0]
            if finite and max(finite) > 10 * min(finite):  # peers 10x apart: a linear axis hides the fast ones
                ax.set_yscale("log")
            ax.set_xscale("log", base=2)
            ax.set_xticks(counts, [str(n) for n in counts])
            ax.minorticks_off()
            ax.set_xlabel("ranks")
            ax.set_ylabel(ylabel)
            ax.set_title(f"{label}", fontsize=9)
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=7)
    fig.suptitle(textwrap.fill(title, 90), fontsize=9)
    fig.tight_layout()
    path = folder / "scaling.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return [path]
