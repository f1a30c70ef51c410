"""The regression gate: a run's records against a baseline's, as a pass/fail answer for CI.

    from ligerbench.gate.rules import load, evaluate
    result = evaluate(load(Path("results/<run>")), load(Path("results/baselines/bench-ce-vocab-full")))

Two kinds of problems:
  failures     any row of the run whose verdict is fail or error (correctness, contracts,
               convergence, a provider that crashed in bench): hard failures, whatever the
               baseline says. Two exceptions, each listed in the notes: bench's design-target
               rows (metric target_*) missed in the baseline too (a known gap), and a third
               party's failed check (rule "default": a peer's kernel, never ours or a planted
               bug, which are judged strict) that the baseline records failing too (a known
               finding, classified in docs/peers.md). A target the baseline met, or a peer's
               check the baseline passed, that fails in the run is a failure: a new release of
               a peer that changes its numbers shows there.
  regressions  performance, like with like: the same GPU (env.json device_name), kernel, case,
               timed quantity, metric and provider. Absolute times drift between machines and
               days, so each value is first divided by a peer's value at the same point of the
               same run (the peer is timed on the same inputs minutes apart, so drift cancels):
                   ratio  = value(provider) / value(peer)
                   change = ratio_run / ratio_baseline - 1   (every metric here: lower is better)
               A change above the metric's threshold is a regression, and it must survive one
               re-measurement (a second run: `recheck`) to count; one that does not is listed as
               cleared. Without a second run a regression counts, marked "not re-measured".
  missing      every check of the baseline (suite, provider, case, quantity, compared there)
               must be compared in the run too; one absent or only skipped fails the gate,
               unless the run is a declared subset (`subset`: FIELD=VALUE / k=EXPR): then only
               the baseline's checks in that subset are expected. The gate says how many it
               compared.
  incomplete   the run's manifest (env.json "run", ligerbench/runs.py) says it was interrupted,
               never finished, stopped early or completed fewer cases than it planned: it fails
               the gate (exit 1) whatever its rows say; an interrupted run never reads as passed.
  kill matrix  a selftest run is judged on its kill matrix, not on its mutants' failing rows
               (those are the point): a mutant that survives, or a (mutant, suite) kill of the
               baseline that the run lost, fails the gate.
Unusable input (exit 2): a folder without records.csv or env.json, records without the Record
columns; a run or baseline without a manifest, without records (a header only), or whose
records.csv has fewer rows than its manifest says (truncated); a baseline that is itself
incomplete; a run of another kind (verify/selftest/converge/bench) or kernel than the baseline;
performance rows that cannot be compared (another GPU, a smoke run, no common point, the peer
not measured). Each says plainly what is wrong.
"""

from __future__ import annotations

import math
import shlex
import subprocess
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path

import pandas as pd

from ligerbench.exits import ExitCode
from ligerbench.gate.inputs import (
    CHECK,
    MEASURED,
    Run,
    Unusable,
    check_inputs,
    kill_matrix_problems,
    kind_of,
    load,
    missing_checks,
    parse_subset,
)
from ligerbench.records import TARGET_PREFIX

__all__ = ["CHECK", "MEASURED", "GateResult", "Run", "Unusable", "evaluate", "load", "parse_subset"]

PERF_SUITE = "bench"
# Defaults: a median of >= 10 timed runs moves 1-3% between runs on an H100, so a ratio of two
# such medians moves up to ~5%; 10% is outside that noise. Memory is deterministic up to the
# allocator's rounding, so 5% is already a real change.
DEFAULT_THRESHOLDS = {"time_ms": 0.10, "extra_mib": 0.05, "peak_mib": 0.05}
KEY = ["kernel", "case", "quantity", "metric", "provider"]


@dataclass(frozen=True)
class Comparison:
    kernel: str
    case: str
    quantity: str
    metric: str
    provider: str
    peer: str
    baseline_ratio: float
    run_ratio: float
    threshold: float
    status: str = "ok"  # ok | regression | confirmed | cleared | not re-measured | absent on re-measure
    recheck_ratio: float = math.nan

    @property
    def change(self) -> float:
        return self.run_ratio / self.baseline_ratio - 1

    @property
    def counts(self) -> bool:
        """A regression that stands (confirmed, or nothing to confirm it with)."""
        return self.status in ("confirmed", "not re-measured", "absent on re-measure")


@dataclass
class GateResult:
    run: Run
    baseline: Run
    failures: pd.DataFrame
    comparisons: list[Comparison]
    thresholds: dict[str, float]
    notes: list[str] = field(default_factory=list)
    recheck: Run | None = None
    missing: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=CHECK))
    compared: int = 0  # checks of the baseline compared in the run
    expected: int = 0  # checks of the baseline the run had to compare (all, or the subset's)
    incomplete: list[str] = field(default_factory=list)  # why the run cannot pass, from its manifest
    kill_problems: list[str] = field(default_factory=list)  # selftest: survivors and lost kills
    subset: dict[str, list[str]] = field(default_factory=dict)

    @property
    def regressions(self) -> list[Comparison]:
        return [c for c in self.comparisons if c.counts]

    @property
    def exit_code(self) -> ExitCode:
        bad = len(self.failures) or self.regressions or len(self.missing) or self.incomplete or self.kill_problems
        return ExitCode.FAILED if bad else ExitCode.OK

    @property
    def kind(self) -> str:
        return kind_of(self.run)


def _missed_targets(records: pd.DataFrame) -> pd.Series:
    return records["verdict"].isin(["fail", "error"]) & records["metric"].str.startswith(TARGET_PREFIX)


def _in_baseline(rows: pd.DataFrame, base_rows: pd.DataFrame, keys: list[str]) -> pd.Series:
    """Whether each of `rows` has a row of `base_rows` with the same `keys` (aligned to rows)."""
    if rows.empty or base_rows.empty:
        return pd.Series(False, index=rows.index)
    flagged = rows[keys].merge(base_rows[keys].drop_duplicates(), on=keys, how="left", indicator=True)
    return pd.Series(flagged["_merge"].to_numpy() == "both", index=rows.index)


def _third_party_fails(records: pd.DataFrame) -> pd.Series:
    """Failed checks judged by the default verdict (a third party's kernel, or a PyTorch
    yardstick's provider); ours and planted bugs are judged strict (ligerbench/tolerance.py)."""
    rule = records["rule"] if "rule" in records else pd.Series("", index=records.index)
    return (records["verdict"] == "fail") & (rule == "default")


def failures(run: Run, baseline: Run) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(hard failures, design targets missed in the baseline too, a third party's failed checks
    that the baseline records failing too: known findings, docs/peers.md)."""
    rec = run.records
    bad = rec["verdict"].isin(["fail", "error"])
    target = _missed_targets(rec)
    known_gap = target & _in_baseline(rec, baseline.records[_missed_targets(baseline.records)],
                                      ["provider", "case", "quantity", "metric"])  # fmt: skip
    peer = _third_party_fails(rec) & ~target
    known_finding = peer & _in_baseline(rec, baseline.records[_third_party_fails(baseline.records)], CHECK)
    return rec[bad & ~known_gap & ~known_finding], rec[known_gap], rec[known_finding]


def _perf_rows(run: Run, thresholds: dict[str, float]) -> pd.DataFrame:
    df = run.records
    return df[(df["suite"] == PERF_SUITE) & df["metric"].isin(list(thresholds))]


def ratios(run: Run, thresholds: dict[str, float], peers: dict[str, str]) -> pd.DataFrame:
    """One row per measured (kernel, case, quantity, metric, provider) with its peer and ratio."""
    perf = _perf_rows(run, thresholds)
    if len(perf) and not (perf["verdict"] == MEASURED).any():
        raise Unusable(f"{run.path}: its performance rows are not measurements (a --smoke run?)")
    perf = perf[perf["verdict"] == MEASURED]
    out = []
    for kernel, rows in perf.groupby("kernel"):
        peer = peers.get(kernel)
        if peer is None or not (rows["provider"] == peer).any():
            raise Unusable(
                f"{run.path}: no peer to divide by for kernel {kernel!r}: {peer!r} was not measured "
                f"(choose one with --peer {kernel}=PROVIDER from {sorted(set(rows['provider']))})"
            )
        peer_rows = rows[rows["provider"] == peer][["case", "quantity", "metric", "value"]]
        merged = rows.merge(peer_rows, on=["case", "quantity", "metric"], suffixes=("", "_peer"))
        merged = merged[merged["provider"] != peer].assign(peer=peer)
        merged["ratio"] = merged["value"] / merged["value_peer"]
        out.append(merged[[*KEY, "peer", "ratio"]])
    return pd.concat(out) if out else pd.DataFrame(columns=[*KEY, "peer", "ratio"])


def _same_gpu(a: Run, b: Run) -> None:
    da, db = a.env.get("device_name"), b.env.get("device_name")
    if da != db:
        raise Unusable(
            f"{a.path} was measured on {da!r} and {b.path} on {db!r}: performance compares like with "
            "like only; use a baseline from the same GPU"
        )


def compare(run: Run, baseline: Run, thresholds: dict[str, float], peers: dict[str, str]) -> list[Comparison]:
    mine = ratios(run, thresholds, peers)
    if mine.empty:
        return []
    _same_gpu(run, baseline)
    theirs = ratios(baseline, thresholds, peers)
    both = mine.merge(theirs[[*KEY, "ratio"]], on=KEY, suffixes=("", "_base"))
    if both.empty:
        raise Unusable(
            f"{run.path} and {baseline.path} share no measured point (kernel, case, quantity, metric, "
            "provider): a baseline of another sweep or kernel?"
        )
    out = []
    for r in both.itertuples(index=False):
        if not (math.isfinite(r.ratio) and math.isfinite(r.ratio_base) and r.ratio_base > 0):
            continue  # no allocator figures on a device, a skipped peer: nothing to compare
        c = Comparison(
            r.kernel, r.case, r.quantity, r.metric, r.provider, r.peer, r.ratio_base, r.ratio, thresholds[r.metric]
        )
        out.append(replace(c, status="regression") if c.change > c.threshold else c)
    return out


def apply_recheck(
    comparisons: list[Comparison], recheck: Run, baseline: Run, thresholds: dict[str, float], peers: dict[str, str]
) -> list[Comparison]:
    """A regression stands only if the second run shows it too."""
    _same_gpu(recheck, baseline)
    again = ratios(recheck, thresholds, peers).set_index(KEY)["ratio"]
    out = []
    for c in comparisons:
        if c.status != "regression":
            out.append(c)
            continue
        key = (c.kernel, c.case, c.quantity, c.metric, c.provider)
        if key not in again.index:
            out.append(replace(c, status="absent on re-measure"))
            continue
        ratio = float(again.loc[key])
        still = ratio / c.baseline_ratio - 1 > c.threshold
        out.append(replace(c, status="confirmed" if still else "cleared", recheck_ratio=ratio))
    return out


def remeasure(command: str) -> Path:
    """Run a re-measure command whose `{out}` is a fresh results root; returns the run folder it
    made there. e.g. "ligerbench bench --kernel ce --sweep vocab --out {out}"."""
    if "{out}" not in command:
        raise Unusable("the re-measure command must contain {out}, the results root it writes its run to")
    root = Path(tempfile.mkdtemp(prefix="ligerbench-remeasure-"))
    args = [a.replace("{out}", str(root)) for a in shlex.split(command)]
    proc = subprocess.run(args, capture_output=True, text=True)
    made = [p for p in root.iterdir() if (p / "records.csv").is_file()]
    if len(made) != 1:
        raise Unusable(
            f"the re-measure command made {len(made)} run folders in {root} (exit {proc.returncode}); "
            f"expected one. stderr: {proc.stderr.strip()[-500:]}"
        )
    return made[0]


def evaluate(
    run: Run,
    baseline: Run,
    *,
    thresholds: dict[str, float] | None = None,
    peers: dict[str, str],
    recheck: Run | None = None,
    remeasure_command: str | None = None,
    subset: dict[str, list[str]] | None = None,
) -> GateResult:
    thresholds = {**DEFAULT_THRESHOLDS, **(thresholds or {})}
    subset = subset or {}
    incomplete = check_inputs(run, baseline)
    if kind_of(run) == "selftest":
        kill_problems, compared, expected, gone = kill_matrix_problems(run, baseline, subset)
        notes = ["a selftest run is gated on its kill matrix; its mutants' failing rows are the point"]
        return GateResult(
            run,
            baseline,
            run.records.iloc[0:0],
            [],
            thresholds,
            notes,
            missing=pd.DataFrame({"provider": gone}).reindex(columns=CHECK, fill_value=""),
            compared=compared,
            expected=expected,
            incomplete=incomplete,
            kill_problems=kill_problems,
            subset=subset,
        )
    comparisons = compare(run, baseline, thresholds, peers)
    hard, known_gaps, known_findings = failures(run, baseline)
    notes = [
        f"design target missed, as in the baseline (not gated): {r.provider} {r.metric[len(TARGET_PREFIX) :]} "
        f"{r.value:.4g} > {r.limit:.4g} at {r.case}"
        for r in known_gaps.itertuples()
    ]
    if len(known_findings):
        by_provider = known_findings.groupby("provider").size()
        notes.append(
            "a third party's failed checks that the baseline records failing too (known findings, docs/peers.md; "
            "not gated): " + ", ".join(f"{p} {n}" for p, n in by_provider.items())
        )
    if not comparisons:
        notes.append("no measured performance rows in the run: only failures are gated")
    if any(c.status == "regression" for c in comparisons):
        if recheck is None and remeasure_command:
            recheck = load(remeasure(remeasure_command))
        if recheck is not None:
            comparisons = apply_recheck(comparisons, recheck, baseline, thresholds, peers)
        else:
            comparisons = [replace(c, status="not re-measured") if c.status == "regression" else c for c in comparisons]
            notes.append("regressions were not re-measured (pass --remeasure or --recheck): each counts")
    gone, compared, expected = missing_checks(run, baseline, subset)
    if subset:
        notes.append(
            "a declared subset (--subset " + " ".join(f"{k}={v}" for k, vs in subset.items() for v in vs) + ")"
        )
    return GateResult(
        run,
        baseline,
        hard,
        comparisons,
        thresholds,
        notes,
        recheck,
        missing=gone,
        compared=compared,
        expected=expected,
        incomplete=incomplete,
        subset=subset,
    )
