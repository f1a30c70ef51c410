"""`bench --kernel vp_flce --nproc N`: the vocab-parallel fused kernel timed on real ranks beside
our single-GPU kernel on a whole head. The declaration (the two design targets at the
Llama-3-8B head, docs/performance.md), both targets judged only at their shape and able to fail, and
a smoke run on 2 gloo ranks (CPU, NOT a measurement) that measures ours and the yardstick and judges
nothing."""

from __future__ import annotations

import math

import pytest
from test_vp_ce_bench import _row
from typer.testing import CliRunner

from ligerbench.bench import metrics
from ligerbench.builtin import default_registry
from ligerbench.cli import app
from ligerbench.records import TARGET_PREFIX, load_records
from ligerbench.suites.vp_flce import bench as vp_flce_bench
from ligerbench.suites.vp_flce.axes import case as vp_flce_case

runner = CliRunner()
TARGET_CASE = vp_flce_case(n=8192, v=128256, h=4096, dtype="bf16", world=2)
# dh [8192, 4096] + dW shard [64128, 4096] in bf16
GRADS_MIB = (8192 + 64128) * 4096 * 2 / 2**20


def _spec():
    return default_registry().kernels["vp_flce"].bench


def test_vp_flce_declares_a_distributed_bench_with_the_issue_targets():
    spec = _spec()
    assert spec is not None and spec.distributed and next(iter(spec.sweeps)) == "heads"
    (point,) = spec.sweeps["heads"]("bf16", None, False)
    assert (point.case.n, point.case.h, point.case.v) == (8192, 4096, 128256)
    time_target, memory_target = spec.targets
    assert time_target.peers == ("single_gpu",) and time_target.factor == 0.55
    assert memory_target.limit(TARGET_CASE) == pytest.approx(GRADS_MIB + 256)
    assert vp_flce_bench.flops(TARGET_CASE, "full") == 6 * 8192 * 4096 * 64128  # per rank: its shard
    assert "single_gpu" in {p.name for p in default_registry().providers_for("vp_flce", bench_only=True)}
    assert "single_gpu" not in {p.name for p in default_registry().providers_for("vp_flce")}  # bench only


@pytest.mark.parametrize(
    "ours_ms, judged",
    [(5.4, "pass"), (5.6, "fail")],  # 0.55 x 10 ms: just under, just over
)
def test_the_time_target_is_0_55x_our_single_gpu_time(ours_ms, judged):
    rows = [_row(TARGET_CASE, "ours", "time_ms", ours_ms), _row(TARGET_CASE, "single_gpu", "time_ms", 10.0)]
    found = metrics.target_records(rows, _spec(), {TARGET_CASE.id: TARGET_CASE})
    assert [(r.provider, r.metric, r.verdict) for r in found] == [("ours", f"{TARGET_PREFIX}time_ms", judged)]


def test_the_time_target_without_the_yardstick_is_not_judged_as_passed():
    rows = [_row(TARGET_CASE, "ours", "time_ms", 0.1)]
    found = metrics.target_records(rows, _spec(), {TARGET_CASE.id: TARGET_CASE})
    assert all(r.verdict != "pass" for r in found)


@pytest.mark.parametrize("extra, judged", [(GRADS_MIB + 255, "pass"), (GRADS_MIB + 257, "fail")])
def test_the_memory_target_is_the_gradients_plus_256_mib(extra, judged):
    other = TARGET_CASE.replace(n=4096)  # another shape: not judged
    rows = [_row(TARGET_CASE, "ours", "extra_mib", extra), _row(other, "ours", "extra_mib", math.inf)]
    found = metrics.target_records(rows, _spec(), {c.id: c for c in (TARGET_CASE, other)})
    assert [(r.case, r.verdict) for r in found] == [(TARGET_CASE.id, judged)]


@pytest.mark.interpreter
@pytest.mark.slow
def test_a_smoke_run_on_two_gloo_ranks_measures_ours_and_the_yardstick(tmp_path):
    args = ["bench", "--kernel", "vp_flce", "--smoke", "--nproc", "2", "--provider", "ours", "--provider", "single_gpu"]
    result = runner.invoke(app, [*args, "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    (run,) = tmp_path.iterdir()
    records = load_records(run / "records.csv")
    timed = records[records["metric"] == "time_ms"]
    assert set(timed["provider"]) == {"ours", "single_gpu"} and (timed["value"] > 0).all()
    assert not records["metric"].str.startswith(TARGET_PREFIX).any()  # smoke shapes: nothing judged
