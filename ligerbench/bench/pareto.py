"""Time against extra memory, as a user choosing a setting sees it: one panel per sweep point,
every provider a labelled dot; the providers whose records carry a `chunk_mib` setting (ours at
several memory budgets, `--sweep budget`) joined into a line, the speed/memory frontier, each
labelled by its budget. Drawn from the records, settings included, like every other plot.

pareto.png   x: extra memory over the inputs (MiB, gradients included), y: median fwd+bwd time (ms)
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from ligerbench.bench.spec import SweepPoint
from ligerbench.plotting import pyplot
from ligerbench.records import settings_of

FRONTIER_SETTING = "chunk_mib"  # providers with this setting are joined into the frontier line


def budgets(df: pd.DataFrame) -> dict[str, float]:
    """provider -> its `chunk_mib` setting, read from the records (providers without one left out)."""
    if "settings" not in df.columns:
        return {}
    out = {}
    for provider, text in df[["provider", "settings"]].drop_duplicates().itertuples(index=False):
        value = settings_of(text if isinstance(text, str) else "").get(FRONTIER_SETTING)
        if value is not None:
            out[provider] = float(value)
    return out


def _point_values(df: pd.DataFrame, case_id: str) -> dict[str, tuple[float, float]]:
    """provider -> (extra MiB, time ms) at one point, where both were measured."""
    rows = df[(df["case"] == case_id) & (df["quantity"] == "full") & df["verdict"].isin(["measured"])]
    time = rows[rows["metric"] == "time_ms"].set_index("provider")["value"].astype(float)
    memory = rows[rows["metric"] == "extra_mib"].set_index("provider")["value"].astype(float)
    both = {p: (float(memory[p]), float(time[p])) for p in time.index if p in memory.index}
    return {p: v for p, v in both.items() if all(math.isfinite(x) for x in v)}


def draw(df: pd.DataFrame, points: list[SweepPoint], *, title: str, folder: Path) -> list[Path]:
    """pareto.png, or nothing when no point has both figures (a CPU smoke run has no memory)."""
    panels = [(p, _point_values(df, p.case.id)) for p in points]
    panels = [(p, v) for p, v in panels if len(v) >= 2]
    if not panels:
        return []
    budget = budgets(df)
    plt = pyplot()
    fig, axes = plt.subplots(1, len(panels), figsize=(6.5 * len(panels), 5), squeeze=False)
    for ax, (point, values) in zip(axes[0], panels, strict=True):
        frontier = sorted((v for p, v in values.items() if p in budget), key=lambda mt: mt[0])
        if frontier:
            ax.plot(*zip(*frontier, strict=True), "-", color="tab:blue", alpha=0.5, label="ours over budgets")
        for provider, (mib, ms) in values.items():
            ours = provider.startswith("ours")
            ax.scatter([mib], [ms], color="tab:blue" if ours else "tab:orange", zorder=3)
            label = f"{budget[provider]:g} MiB" if provider in budget else provider
            ax.annotate(label, (mib, ms), fontsize=7, xytext=(3, 3), textcoords="offset points")
        ax.set_xlabel("extra memory, MiB (gradients included)")
        ax.set_ylabel("fwd+bwd time, ms (median)")
        ax.set_xlim(left=0)
        ax.set_ylim(bottom=0)
        ax.set_title(point.label)
        ax.grid(alpha=0.3)
        if frontier:
            ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    path = folder / "pareto.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return [path]
