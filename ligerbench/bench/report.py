"""The markdown view of a bench run's records: one table per sweep point, one row per provider."""

from __future__ import annotations

import math

import pandas as pd

from ligerbench.bench import scaling
from ligerbench.bench.spec import BenchSpec, SweepPoint
from ligerbench.records import TARGET_PREFIX

FAIRNESS_NOTE = (
    "Only `--mode full` (forward + backward) compares fairly: several peers (Liger, ours_inplace) "
    "compute the gradient inside forward, so their forward carries backward's work and their "
    "backward is almost free."
)


SHAPE_AXES = ("n", "b", "t", "h", "v")  # the axes a point's heading names, those its case has


def _fmt(value, digits: int = 4) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return f"{value:.{digits}g}"


def point_table(df: pd.DataFrame, point: SweepPoint, spec: BenchSpec, mode: str) -> list[str]:
    rows = df[df["case"] == point.case.id]
    lines = [
        f"| provider | {mode} ms | p20-p80 ms | x best | + clone ms | host ms | extra MiB | x best | peak MiB | "
        f"{spec.rate.unit} | % ceiling | loss | note |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for provider in dict.fromkeys(rows["provider"]):
        p = rows[rows["provider"] == provider]

        def get(metric: str, quantity: str | None = None, p=p) -> float:
            sel = p[p["metric"] == metric]
            if quantity is not None:
                sel = sel[sel["quantity"] == quantity]
            return float(sel["value"].iloc[0]) if len(sel) else math.nan

        bad = p[p["verdict"].isin(["skip", "error"])]
        note = f"{bad['verdict'].iloc[0]}: {bad['message'].iloc[0]}" if len(bad) else ""
        lines.append(
            f"| {provider} | {_fmt(get('time_ms', mode))} | {_fmt(get('p20_ms'))}-{_fmt(get('p80_ms'))} "
            f"| {_fmt(get('ratio_time_ms'), 3)} | {_fmt(get('clone_ms'))} | {_fmt(get('host_ms'), 3)} "
            f"| {_fmt(get('extra_mib'), 5)} "
            f"| {_fmt(get('ratio_extra_mib'), 3)} | {_fmt(get('peak_mib'), 5)} | {_fmt(get('rate'))} "
            f"| {_fmt(get('pct_ceiling'), 3)} | {_fmt(get('loss'), 6)} | {note.replace('|', '/')[:160]} |"
        )
    return lines


def markdown(
    df: pd.DataFrame,
    points: list[SweepPoint],
    spec: BenchSpec,
    *,
    title: str,
    mode: str,
    sweep: str,
    ceilings: dict[str, float],
    env: dict,
    smoke: bool,
    interrupted: bool = False,
) -> str:
    lines = [f"# {title}", ""]
    if smoke:
        lines += [
            "**NOT A MEASUREMENT**: `--smoke` ran tiny shapes through Triton's interpreter on CPU, to "
            "exercise the harness. No figure below says anything about speed or memory.",
            "",
        ]
    if interrupted:
        m, by = env.get("run") or {}, f" ({env['stopped_by']})" if env.get("stopped_by") else ""
        lines += [
            f"**Interrupted**{by} after {m.get('completed', '?')} of {m.get('planned', '?')} steps (a step: one "
            "provider at one sweep point): the tables hold the steps finished before it.",
            "",
        ]
    nproc = env.get("nproc")
    counts = ", ".join(map(str, nproc)) if isinstance(nproc, list) else nproc  # a scaling run: several counts
    ranks_line = [
        f"- {counts} ranks ({env.get('backend') or '?'}), each timing its shard at once: time and "
        "memory are per rank, the slowest (largest) of the ranks"
    ]
    ranks_line = ranks_line if nproc else []
    lines += [
        f"- device: {env.get('device_name')} ({env.get('device_type')}); torch {env.get('torch')}, "
        f"triton {env.get('triton')}; liger-kernel {env.get('liger_kernel')}, "
        f"cut-cross-entropy {env.get('cut_cross_entropy')}; commit {env.get('git_commit')}",
        f"- kernel `{spec.kernel}`, sweep `{sweep}`, mode `{mode}`, dtype {points[0].case.dtype if points else '-'}, "
        f"seed {env.get('seed')}; inputs: {spec.inputs}",
        f"- {FAIRNESS_NOTE}",
        *ranks_line,
        "- time: median of many runs (p20-p80 beside), "
        + (
            "CUDA events, L2 flushed before each run, the host kept ahead by a sleeping kernel queued "
            "before each run: GPU work only, as in a training loop whose host runs ahead (a host sync "
            "inside a call still shows)"
            if env.get("device_type") == "cuda"
            else "host clock"
        )
        + "; inputs a "
        "provider destroys are restored outside the timed region, and the clone that would keep them is "
        "the `+ clone ms` column, not part of the time. `host ms`: the host's time to issue one call "
        "(GPU idle at its start); a loop issuing faster than the GPU runs hides it.",
        "- memory: of a full step; extra = peak allocated during the call minus allocated before it "
        "(gradients included); peak = inputs + extra.",
        f"- {spec.rate.unit}: {spec.work_formula}. % ceiling is of the "
        + ", ".join(f"{k} = {_fmt(v)}" for k, v in ceilings.items())
        + " measured at the start of this run.",
        "- x best: the figure over the best provider's at the same point (lowest time or memory).",
        "",
    ]
    outside = df[(df["verdict"] == "error") & (df["case"] == "")]  # e.g. ranks that died (--nproc)
    if len(outside):
        lines += ["## Errors", ""]
        lines += [f"- **{r['provider']}**: {' '.join(str(r['message']).split())}" for _, r in outside.iterrows()]
        lines.append("")
    targets = df[df["metric"].str.startswith(TARGET_PREFIX)]
    if len(targets):
        lines += [
            "## Targets",
            "",
            "| provider | figure | measured | limit | verdict | source |",
            "|---|---|---|---|---|---|",
        ]
        for _, t in targets.iterrows():
            lines.append(
                f"| {t['provider']} | {t['metric'][len(TARGET_PREFIX) :]} | {_fmt(float(t['value']))} | "
                f"{_fmt(float(t['limit']))} | {t['verdict']} | {t['message']} |"
            )
        lines.append("")
    lines += scaling.table(df, points, sweep=sweep, mode=mode)
    several = len(scaling.rank_counts(points)) > 1
    for point in points:
        lines += [f"## {heading(point, sweep, several)}", "", *point_table(df, point, spec, mode), ""]
    return "\n".join(lines)


def heading(point: SweepPoint, sweep: str, several: bool) -> str:
    """A point as its tables are titled: `vocab = 32000 (N=8192, V=32000)`, its ranks when a run
    has several counts."""
    c = point.case
    shape = ", ".join(f"{k.upper()}={c.get(k)}" for k in SHAPE_AXES if c.get(k))
    on = f", {scaling.ranks_text(c.get('world'))}" if several else ""
    return f"{sweep} = {point.label} ({shape}){on}"
