"""Figures derived from a bench run's measured rows: throughput, share of the measured
ceilings, and ratios to the best peer at the same sweep point. They are records too, so the
CSV, the table and the plots read one source.

    rate          = work / time            (ce: bytes / ms / 1e6 = GB/s; flce: FLOPs / ms / 1e9 = TFLOP/s)
    pct_ceiling   = 100 * rate / ceiling   (copy GB/s for ce, bf16 matmul TFLOP/s for flce)
    ratio_to_best = value / best value among the providers measured at that point,
                    best = min for time and memory (ratios >= 1), max for rate (ratios <= 1)
Absolute times drift between runs and machines; the ratios are what carry over.
"""

from __future__ import annotations

import dataclasses
import math

from ligerbench.bench.ceilings import RATES
from ligerbench.bench.engine import NOT_A_MEASUREMENT, SMOKE_MESSAGE
from ligerbench.bench.spec import BenchSpec
from ligerbench.cases import Case
from ligerbench.records import TARGET_PREFIX, Record

LOWER_IS_BETTER = {"time_ms": True, "peak_mib": True, "extra_mib": True, "rate": False}
MEASURED_VERDICTS = ("measured", NOT_A_MEASUREMENT)


def ratio_to_best(values: dict[str, float], *, lower_is_better: bool) -> dict[str, float]:
    """provider -> value / best. NaN values (skipped, errored, or no allocator on CPU) get NaN
    and do not compete; a best of zero or below makes ratios meaningless, so they are NaN."""
    finite = [v for v in values.values() if math.isfinite(v)]
    if not finite:
        return {k: math.nan for k in values}
    best = min(finite) if lower_is_better else max(finite)
    if best <= 0:
        return {k: math.nan for k in values}
    return {k: (v / best if math.isfinite(v) else math.nan) for k, v in values.items()}


def rate(spec: BenchSpec, case: Case, mode: str, time_ms: float) -> float:
    if not (time_ms > 0):
        return math.nan
    return spec.work(case, mode) / time_ms / spec.rate.scale


def derive(rows: list[Record], spec: BenchSpec, cases: dict[str, Case], ceilings: dict[str, float]) -> list[Record]:
    """Rate, % of ceiling and ratio-to-best rows for every measured time and memory row."""
    measured = [r for r in rows if r.verdict in MEASURED_VERDICTS and r.kernel == spec.kernel]
    out: list[Record] = []
    ceiling = ceilings.get(spec.rate.ceiling, math.nan)
    rates: list[Record] = []
    for r in measured:
        if r.metric != "time_ms":
            continue
        value = rate(spec, cases[r.case], r.quantity, r.value)
        rate_row = dataclasses.replace(r, metric="rate", value=value, unit=spec.rate.unit, message=spec.work_formula)
        rates.append(rate_row)
        out.append(rate_row)
        out.append(
            dataclasses.replace(
                r,
                metric="pct_ceiling",
                value=100 * value / ceiling if ceiling > 0 else math.nan,
                unit="%",
                message=f"of {spec.rate.ceiling} = {ceiling:.4g} measured at the start of this run",
            )
        )
    for metric, lower in LOWER_IS_BETTER.items():
        pool = rates if metric == "rate" else [r for r in measured if r.metric == metric]
        by_point: dict[tuple[str, str], list[Record]] = {}
        for r in pool:
            by_point.setdefault((r.case, r.quantity), []).append(r)
        for group in by_point.values():
            ratios = ratio_to_best({r.provider: r.value for r in group}, lower_is_better=lower)
            for r in group:
                out.append(
                    dataclasses.replace(
                        r,
                        metric=f"ratio_{metric}",
                        value=ratios[r.provider],
                        unit="x best",
                        message=f"{metric} / {'lowest' if lower else 'highest'} among {len(group)} providers",
                    )
                )
    # a derived figure is no more a measurement than the rows it came from
    return [
        dataclasses.replace(r, message=f"{r.message}; {SMOKE_MESSAGE}") if r.verdict == NOT_A_MEASUREMENT else r
        for r in out
    ]


def target_records(rows: list[Record], spec: BenchSpec, cases: dict[str, Case]) -> list[Record]:
    """One row per (target, provider, point) this run measured: the figure, the limit, pass or
    fail (skip when a peer the limit needs was not measured there). Measured rows only (a smoke
    run has none); times count in mode full only."""
    out = []
    for t in spec.targets:
        for r in rows:
            c = cases.get(r.case)
            if (
                c is None
                or r.provider not in t.providers
                or r.metric != t.metric
                or r.verdict != "measured"
                or not t.applies(c)
                or (t.metric == "time_ms" and r.quantity != "full")
            ):
                continue
            limit, why = _target_limit(t, c, r, rows, spec)
            if not math.isfinite(limit):
                verdict, message = "skip", f"{t.source}; not judged: {why}"
            else:
                verdict = "pass" if r.value <= limit else "fail"
                message = f"{t.source}; limit {why}; {r.value / limit:.2f}x the limit" if limit > 0 else t.source
            out.append(
                dataclasses.replace(
                    r, metric=f"{TARGET_PREFIX}{t.metric}", limit=limit, verdict=verdict, message=message
                )
            )
    return out


def _target_limit(t, case: Case, row: Record, rows: list[Record], spec: BenchSpec) -> tuple[float, str]:
    """(limit, how it was formed) at the row's point."""
    fixed = t.limit(case) if callable(t.limit) else t.limit
    parts = [f"{fixed:.4g}"] if math.isfinite(fixed) else []
    if t.of_floor is not None:
        ceiling = [p.value for p in rows if p.provider == "ceiling" and p.quantity == spec.rate.ceiling]
        if not ceiling or not math.isfinite(ceiling[0]) or ceiling[0] <= 0:
            return math.nan, f"no {spec.rate.ceiling} ceiling measured in this run"
        floor_ms = spec.work(case, row.quantity) / (ceiling[0] * spec.rate.scale)
        fixed = min(fixed, t.of_floor * floor_ms)
        parts.append(f"{t.of_floor:g} x the floor {floor_ms:.4g} ms at {ceiling[0]:.4g} {spec.rate.unit}")
    if not t.peers:
        return fixed, " and ".join(parts) or "none"
    peer_values = [
        p.value
        for p in rows
        if p.provider in t.peers
        and p.case == row.case
        and p.quantity == row.quantity
        and p.metric == row.metric
        and p.verdict == "measured"
        and math.isfinite(p.value)
    ]
    if not peer_values:
        return math.nan, f"none of {', '.join(t.peers)} measured here"
    best = t.factor * min(peer_values)
    parts.append(f"{t.factor:g} x best of {', '.join(t.peers)} = {best:.4g}")
    return min(fixed, best), " and ".join(parts)


def ceiling_records(
    ceilings: dict[str, float], *, run_id: str, kernel: str, verdict: str, message: str
) -> list[Record]:
    units = {r.ceiling: r.unit for r in RATES}  # a ceiling is in the unit of the rates read against it
    return [
        Record(
            run_id=run_id,
            suite="bench",
            kernel=kernel,
            provider="ceiling",
            case="ceiling",
            quantity=name,
            metric=name,
            value=value,
            unit=units[name],
            limit=math.nan,
            verdict=verdict,
            message=message,
        )
        for name, value in ceilings.items()
    ]
