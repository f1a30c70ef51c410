"""bench's figures on the terminal, readable at 80 columns: per sweep point, the providers timed
there with their headline figures; each skipped provider once, with its reason; errors one line
each. summary.md keeps the whole table (p20-p80, clone and host times, extra memory, the loss,
every note) and the run's facts.

    show(Console(), df, points, spec, sweep="vocab", mode="full", smoke=False)
"""

from __future__ import annotations

import math

import pandas as pd
from rich.console import Console

from ligerbench import skipped, tables
from ligerbench.bench import scaling
from ligerbench.bench.report import heading
from ligerbench.bench.spec import BenchSpec, SweepPoint
from ligerbench.records import TARGET_PREFIX

SMOKE_LINE = "NOT A MEASUREMENT: --smoke ran tiny shapes on CPU through Triton's interpreter."
REST = "summary.md: p20-p80, clone and host times, extra memory, the loss and the notes."
LEGEND = "x best: the time over the fastest provider's at the same point."


def _fmt(value, digits: int = 4) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value:.{digits}g}"


def point_rows(df: pd.DataFrame, point: SweepPoint, leave_out: set[str]) -> list[list[str]]:
    """One row per provider timed (or errored) at the point; skipped ones are said elsewhere."""
    rows = df[df["case"] == point.case.id]
    out = []
    for provider in dict.fromkeys(rows["provider"]):
        p = rows[rows["provider"] == provider]
        timed = p[p["metric"] == "time_ms"]
        if provider in leave_out or timed.empty or (timed["verdict"] == "skip").all():
            continue

        def get(metric: str, p=p) -> float:
            sel = p.loc[p["metric"] == metric, "value"]
            return float(sel.iloc[0]) if len(sel) else math.nan

        if (timed["verdict"] == "error").any():
            out.append([provider, "error", "-", "-", "-", "-"])
            continue
        out.append([provider, _fmt(get("time_ms")), _fmt(get("ratio_time_ms"), 3), _fmt(get("peak_mib"), 5),
                    _fmt(get("rate")), _fmt(get("pct_ceiling"), 3)])  # fmt: skip
    return out


def error_lines(df: pd.DataFrame) -> list[str]:
    """Each provider's error once (its first message, and at how many points it was raised)."""
    errors = df[(df["verdict"] == "error") & (df["metric"] == "time_ms")]
    outside = df[(df["verdict"] == "error") & (df["case"] == "")]  # the launcher's (ranks that died)
    out = []
    for provider, rows in pd.concat([errors, outside]).drop_duplicates().groupby("provider", sort=False):
        first = " ".join(str(rows["message"].iloc[0]).split())
        out.append(f"error: {provider} ({len(rows)}x): {first}")
    return out


def target_line(df: pd.DataFrame) -> list[str]:
    """The targets judged: how many met and missed (summary.md names each)."""
    targets = df[df["metric"].astype(str).str.startswith(TARGET_PREFIX) & df["verdict"].isin(["pass", "fail"])]
    if targets.empty:
        return []
    missed = int((targets["verdict"] == "fail").sum())
    return [f"targets: {len(targets) - missed} met, {missed} missed (summary.md names them)"]


def show(out: Console, df: pd.DataFrame, points: list[SweepPoint], spec: BenchSpec, *, sweep: str, mode: str,
         smoke: bool) -> None:  # fmt: skip
    if smoke:
        out.print(SMOKE_LINE, markup=False)
    timed = df[df["metric"] == "time_ms"]
    gone = skipped.everywhere(timed)
    several = len(scaling.rank_counts(points)) > 1
    columns = ["provider", f"{mode} ms", "x best", "peak MiB", spec.rate.unit, "% ceiling"]
    for point in points:
        body = point_rows(df, point, gone)
        if body:
            tables.show(out, heading(point, sweep, several), columns, body, right=columns[1:])
    for line in [*skipped.lines(timed, unit="points"), *error_lines(df), *target_line(df), LEGEND, REST]:
        out.print(skipped.wrapped(line, out.width), soft_wrap=True, markup=False)
