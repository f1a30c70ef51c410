"""Unit tests of bench's arithmetic: work models, rates, quantiles, ratios to the best peer,
sweep shapes, and the engine's promise to leave (mutated) inputs as it found them."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from ligerbench.bench.engine import Plan, measure_provider
from ligerbench.bench.metrics import derive, rate, ratio_to_best, target_records
from ligerbench.bench.spec import BenchInputs, accepted
from ligerbench.bench.timing import SMOKE_BUDGET, TimingBudget, runs_for, summarize, time_region
from ligerbench.cases import Case
from ligerbench.records import Record
from ligerbench.registry import Provider
from ligerbench.suites.ce import bench as bench_ce
from ligerbench.suites.ce.axes import case as ce_case
from ligerbench.suites.common.bench_shapes import HEADS, VOCABS, sweep_points
from ligerbench.suites.flce import bench as bench_flce
from ligerbench.suites.flce.axes import case as flce_case

LLAMA_CE = ce_case(n=8192, v=128256, dtype="bf16")
LLAMA_FLCE = flce_case(n=8192, v=128256, h=4096, dtype="bf16")


# ---------------------------------------------------------------- work models (docs/performance.md cost models)
def test_ce_bytes_model_is_one_read_and_one_write_of_the_logits():
    assert bench_ce.bytes_moved(LLAMA_CE, "full") == 2 * 2 * 8192 * 128256  # 4.2 GB: docs/performance.md, CE cost model
    assert bench_ce.bytes_moved(LLAMA_CE, "forward") == 2 * 8192 * 128256
    assert bench_ce.bytes_moved(LLAMA_CE, "backward") == 2 * 8192 * 128256
    assert bench_ce.bytes_moved(LLAMA_CE.replace(dtype="fp32"), "full") == 2 * 4 * 8192 * 128256


def test_flce_flop_model_is_six_nhv():
    assert bench_flce.flops(LLAMA_FLCE, "full") == 6 * 8192 * 4096 * 128256
    assert bench_flce.flops(LLAMA_FLCE, "full") == pytest.approx(25.8e12, rel=2e-3)  # docs/performance.md
    assert bench_flce.flops(LLAMA_FLCE, "forward") + bench_flce.flops(LLAMA_FLCE, "backward") == bench_flce.flops(
        LLAMA_FLCE, "full"
    )


def test_rates_reproduce_the_anchor_floors():
    # docs/performance.md: 4.2 GB in 1.40 ms is 3.0 TB/s; 25.8 TFLOP in 34 ms is ~752 TFLOP/s
    assert rate(bench_ce.SPEC, LLAMA_CE, "full", 1.40) == pytest.approx(3002, rel=1e-3)
    assert rate(bench_flce.SPEC, LLAMA_FLCE, "full", 34.3) == pytest.approx(752, rel=2e-3)
    assert math.isnan(rate(bench_ce.SPEC, LLAMA_CE, "full", math.nan))
    assert math.isnan(rate(bench_ce.SPEC, LLAMA_CE, "full", 0.0))


# ---------------------------------------------------------------- ratios to the best peer
def test_ratio_to_best_lower_is_better():
    got = ratio_to_best({"a": 4.0, "b": 2.0, "c": math.nan, "d": 3.0}, lower_is_better=True)
    assert got["a"] == 2.0 and got["b"] == 1.0 and got["d"] == 1.5
    assert math.isnan(got["c"])  # skipped/errored providers do not compete


def test_ratio_to_best_higher_is_better():
    got = ratio_to_best({"a": 1500.0, "b": 3000.0}, lower_is_better=False)
    assert got == {"a": 0.5, "b": 1.0}


@pytest.mark.parametrize("values", [{"a": math.nan}, {"a": 0.0, "b": 5.0}, {}])
def test_ratio_to_best_is_nan_when_undefined(values):
    # all NaN; a best of zero (an extra of 0 MiB would make every other ratio infinite); empty
    got = ratio_to_best(values, lower_is_better=True)
    assert set(got) == set(values)
    assert all(math.isnan(v) for v in got.values())


def _row(
    provider: str, metric: str, value: float, verdict: str = "measured", quantity: str = "full", case: Case = LLAMA_CE
) -> Record:
    return Record.for_case(
        case,
        run_id="r",
        suite="bench",
        provider=provider,
        quantity=quantity,
        metric=metric,
        value=value,
        unit="ms",
        limit=math.nan,
        verdict=verdict,
    )


def test_derive_rates_ceilings_and_ratios():
    rows = [
        _row("ours", "time_ms", 1.40),
        _row("liger", "time_ms", 2.80),
        _row("broken", "time_ms", math.nan, verdict="error"),
        _row("ours", "extra_mib", 2004.0),
        _row("liger", "extra_mib", 1002.0),
    ]
    cases = {LLAMA_CE.id: LLAMA_CE}
    out = {(r.provider, r.metric): r for r in derive(rows, bench_ce.SPEC, cases, {"copy_gbps": 3000.0})}
    assert out["ours", "rate"].value == pytest.approx(3002, rel=1e-3)
    assert out["ours", "rate"].unit == "GB/s"
    assert out["ours", "pct_ceiling"].value == pytest.approx(100.07, rel=1e-3)
    assert out["liger", "pct_ceiling"].value == pytest.approx(50.03, rel=1e-3)
    assert out["ours", "ratio_time_ms"].value == 1.0
    assert out["liger", "ratio_time_ms"].value == 2.0
    assert out["ours", "ratio_extra_mib"].value == 2.0
    assert out["liger", "ratio_extra_mib"].value == 1.0
    assert out["liger", "ratio_rate"].value == pytest.approx(0.5)
    assert not any(p == "broken" for p, _ in out)  # an error row is not a measurement


# ---------------------------------------------------------------- timing
def test_summarize_quantiles_interpolate_like_do_bench():
    t = summarize([5.0, 1.0, 3.0, 2.0, 4.0])
    assert (t.median_ms, t.p20_ms, t.p80_ms, t.runs) == (3.0, pytest.approx(1.8), pytest.approx(4.2), 5)
    with pytest.raises(ValueError):
        summarize([])


def test_runs_for_clamps_to_the_budget():
    budget = TimingBudget(rep_ms=600, min_runs=10, max_runs=200)
    assert runs_for(6.0, budget) == 100
    assert runs_for(500.0, budget) == 10
    assert runs_for(0.001, budget) == 200


def test_setup_runs_before_every_timed_call():
    order: list[str] = []
    time_region(
        lambda: order.append("fn"),
        setup=lambda: order.append("setup"),
        device=torch.device("cpu"),
        budget=TimingBudget(min_runs=3),
    )
    assert order == ["setup", "fn"] * 4  # one untimed first call, then three timed ones


# ---------------------------------------------------------------- sweeps
def test_heads_sweep_visits_the_named_heads():
    points = sweep_points(flce_case, "heads", fused=True, dtype="bf16")
    assert [(p.label, p.case.h, p.case.v, p.case.n) for p in points] == [
        (name, h, v, 8192) for name, (h, v) in HEADS.items()
    ]
    # ce has no hidden size: the same vocabularies, h=0
    assert [(p.case.get("h", 0), p.case.v) for p in sweep_points(ce_case, "heads", fused=False, dtype="bf16")] == [
        (0, v) for _, v in HEADS.values()
    ]


def test_vocab_and_tokens_sweeps():
    assert [p.case.v for p in sweep_points(ce_case, "vocab", fused=False, dtype="bf16", tokens=4096)] == list(VOCABS)
    assert {p.case.n for p in sweep_points(ce_case, "vocab", fused=False, dtype="bf16", tokens=4096)} == {4096}
    assert [p.case.n for p in sweep_points(ce_case, "tokens", fused=False, dtype="bf16", tokens=4096)] == [
        1024,
        2048,
        4096,
    ]
    assert [p.case.n for p in sweep_points(ce_case, "tokens", fused=False, dtype="bf16")][-1] == 16384
    with pytest.raises(ValueError):
        sweep_points(ce_case, "layers", fused=False, dtype="bf16")


# ---------------------------------------------------------------- calling providers
def test_accepted_keeps_only_named_options():
    def narrow(x, *, reduction):
        return x

    def wide(x, **kw):
        return x

    opts = {"reduction": "mean", "softcap": None}
    assert accepted(narrow, opts) == {"reduction": "mean"}
    assert accepted(wide, opts) == opts


def _ce_inputs() -> BenchInputs:
    return bench_ce.make_inputs(ce_case(n=6, v=11, dtype="fp32"), 0, torch.device("cpu"))


def _destroying_ce(logits, target, **opts):
    loss = F.cross_entropy(logits.clone(), target, ignore_index=opts["ignore_index"])
    with torch.no_grad():
        logits.mul_(-3.0)  # what an in-place provider does to its input
    return loss


@pytest.mark.parametrize("mutates", [True, False])  # restored when declared; the clone is reported only then
def test_measure_provider_restores_inputs_and_reports_the_clone(mutates):
    inputs = _ce_inputs()
    before = inputs.leaves[0].detach().clone()
    provider = Provider(name="p", kernel="ce", description="", load=lambda: _destroying_ce, mutates_input=mutates)
    plan = Plan(
        spec=bench_ce.SPEC,
        providers=(provider,),
        points=(),
        mode="full",
        device=torch.device("cpu"),
        seed=0,
        budget=SMOKE_BUDGET,
        smoke=True,
    )
    rows = list(measure_provider(_destroying_ce, provider, inputs, plan))
    metrics = {m for _, m, *_ in rows}
    assert {"time_ms", "p20_ms", "p80_ms", "peak_mib", "extra_mib", "inputs_mib", "loss"} <= metrics
    assert ("clone_ms" in metrics) is mutates
    assert inputs.leaves[0].grad is None
    if mutates:
        assert torch.equal(inputs.leaves[0].detach(), before)
    else:  # an undeclared mutation is not hidden by bench (verify's contracts suite catches it)
        assert not torch.equal(inputs.leaves[0].detach(), before)
    loss = next(v for _, m, v, *_ in rows if m == "loss")
    expected = F.cross_entropy(before, inputs.positional[1], ignore_index=-100).item()
    # restored inputs: the loss of the last run is the loss of the original inputs
    assert (loss == pytest.approx(expected, rel=1e-6)) is mutates


def test_targets_pass_fail_only_on_measured_full_rows_at_their_shape():
    cases = {LLAMA_CE.id: LLAMA_CE}
    rows = [
        _row("ours", "time_ms", 1.95),  # NOTES.md's v2 figure: misses 1.6 ms
        _row("ours_nocheck", "time_ms", 1.5),
        _row("ours_inplace", "time_ms", 1.0, quantity="forward"),  # forward alone is not the target
        _row("ours_inplace_nocheck", "time_ms", 1.0, verdict="not_a_measurement"),  # smoke
        _row("liger", "time_ms", 2.5),  # not ours, but a peer of the second target
    ]
    got = target_records(rows, bench_ce.SPEC, cases)
    absolute = {r.provider: r for r in got if r.limit == 1.6}
    assert set(absolute) == {"ours", "ours_nocheck"}
    assert (absolute["ours"].verdict, absolute["ours"].metric) == ("fail", "target_time_ms")
    assert "1.22x the limit" in absolute["ours"].message
    assert absolute["ours_nocheck"].verdict == "pass"
    # no slower than the best peer measured at the same point: 1.95 <= 2.5 (Liger) passes
    (relative,) = [r for r in got if r.limit != 1.6 and "best of" in r.message]
    assert (relative.provider, relative.verdict, relative.limit) == ("ours", "pass", 2.5)
    (floor,) = [r for r in got if "copy floor" in r.message]  # 1.45x the floor; no ceiling measured here: skip
    assert floor.provider == "ours"
    other_shape = LLAMA_CE.replace(v=32000)
    only_relative = target_records([_row("ours", "time_ms", 9.0)], bench_ce.SPEC, {LLAMA_CE.id: other_shape})
    assert [r.limit == 1.6 for r in only_relative] == [False]  # the two shape-bound targets apply nowhere else


def test_a_target_against_a_peer_fails_when_slower_and_is_not_judged_without_the_peer():
    cases = {LLAMA_CE.id: LLAMA_CE.replace(v=32000)}
    slower = target_records([_row("ours", "time_ms", 1.2), _row("torch_compile", "time_ms", 1.0)], bench_ce.SPEC, cases)
    assert [(r.verdict, r.limit) for r in slower] == [("fail", 1.0)]
    alone = target_records([_row("ours", "time_ms", 1.2)], bench_ce.SPEC, cases)
    assert [r.verdict for r in alone] == ["skip"] and "not judged" in alone[0].message


def test_flce_memory_target_is_the_gradients_plus_20_percent():
    rows = [_row("ours", "extra_mib", 1254.0, case=LLAMA_FLCE)]
    (got,) = [
        r for r in target_records(rows, bench_flce.SPEC, {LLAMA_FLCE.id: LLAMA_FLCE}) if r.metric == "target_extra_mib"
    ]
    grads = (128256 + 8192) * 4096 * 2 / 2**20  # 1066 MiB (docs/performance.md)
    assert got.limit == pytest.approx(1.2 * grads) and got.verdict == "pass"


@pytest.mark.gpu
def test_time_is_the_gpus_work_not_the_hosts(device):
    """A call that spends 3 ms of host time issuing ~0.1 ms of GPU work: the time must be the
    GPU's (the host is kept ahead), and host_ms must carry the 3 ms."""
    import time

    x = torch.randn(64 << 20, device=device)  # 256 MiB: one pass ~0.1-0.2 ms on an H100

    def slow_host():
        time.sleep(3e-3)
        x.mul_(1.0)

    t = time_region(slow_host, device=torch.device(device), budget=TimingBudget(warmup_ms=10, rep_ms=60))
    assert t.host_ms >= 3.0
    assert t.median_ms < 1.0, t


def test_lp_time_target_is_1_15x_its_copy_floor_at_the_measured_ceiling():
    """The design target (docs/performance.md, lp): fwd+bwd within 1.15x of 3 passes over the logits
    at the run's copy rate; the H100 run measured 0.774 ms at N=2048 (1.25x the floor: a fail) and
    2.925 ms at N=8192 (1.18x: a fail at 1.15x)."""
    from ligerbench.suites.lp import bench as bench_lp
    from ligerbench.suites.lp.axes import case as lp_case

    def judged(n: int, ms: float, ceiling: float | None = 3016.0):
        c = lp_case(n=n, v=151936, dtype="bf16", temperature=0.7)
        rows = [_row("ours", "time_ms", ms, case=c)]
        if ceiling is not None:
            rows.append(Record(run_id="r", suite="bench", kernel="lp", provider="ceiling", case="ceiling",
                               quantity="copy_gbps", metric="copy_gbps", value=ceiling, unit="GB/s",
                               limit=math.nan, verdict="measured"))  # fmt: skip
        return [r for r in target_records(rows, bench_lp.SPEC, {c.id: c}) if "floor" in r.message]

    floor_ms = 3 * 2048 * 151936 * 2 / (3016.0 * 1e6)
    (slow,) = judged(2048, 0.7743)
    assert slow.limit == pytest.approx(1.15 * floor_ms) and slow.verdict == "fail"
    (fast,) = judged(8192, 2.80)  # 1.13x the 2.476 ms floor (the H100's 2.925 ms was 1.18x: a fail now)
    assert fast.verdict == "pass"
    assert judged(8192, 2.925)[0].verdict == "fail"
    (unknown,) = judged(8192, 2.925, ceiling=None)
    assert unknown.verdict == "skip" and "ceiling" in unknown.message
