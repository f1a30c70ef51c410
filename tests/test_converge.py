"""`ligerbench converge`: the suite passes on a correct patch and fails on planted bugs.

CPU runs go through Triton's interpreter (~12 ms per logits row), so the passing case is one
model (llama-mini, tiny preset, fp32) and the planted-bug cases run only the check that must
catch them, with 2 training steps.
"""

from __future__ import annotations

import dataclasses
import json
import math

import pandas as pd
import pytest
from typer.testing import CliRunner

from ligerbench.cli import app
from ligerbench.converge import tolerance as tol
from ligerbench.converge.models import PRESETS
from ligerbench.converge.mutants import MUTANTS, SoftcapDropped
from ligerbench.kernels.hf import CausalLMPatch
from ligerbench.suites.converge import ConvergeCase, run_case

TINY = PRESETS["tiny"]


@pytest.mark.interpreter
def test_llama_mini_tiny_ce_passes_end_to_end(tmp_path):
    result = CliRunner().invoke(
        app,
        [
            "converge",
            "llama-mini",
            "--patch",
            "ce",
            "--preset",
            "tiny",
            "--dtype",
            "fp32",
            "--packed",
            "--device",
            "cpu",
            "--out",
            str(tmp_path),
        ],
    )
    assert result.exit_code == 0, result.output
    (run,) = list(tmp_path.iterdir())
    df = pd.read_csv(run / "records.csv", keep_default_na=False)
    info_rows = df["metric"] == "rel_diff_info"
    assert set(df[~info_rows]["verdict"]) == {"pass"}, df[df["verdict"] != "pass"].to_string()
    assert set(df[info_rows]["verdict"]) == {"info"}  # reported, not judged: never counted a pass
    quantities = set(df["quantity"])
    expected = {
        "patch_active",
        "patch_reverted",
        "loss_per_step",
        "final_params",
        "eval_topk_logprobs",
        "hidden_grad@step0",
        "logits_grad@step0",
        "packed.per_sequence.loss",
        "packed.per_sequence.grads",
        "packed.per_token_mean.grads_vs_per_sequence",
    }
    for mode in ("train", "eval"):
        for k in (0, 1, TINY.seq_len // 4):
            expected |= {f"logits_to_keep[{mode},k={k}].{q}" for q in ("loss", "grads", "logits")}
    assert expected <= quantities, expected - quantities
    # every comparison is a real one: finite values under finite limits (the info rows excepted)
    judged = df[df["metric"] != "rel_diff_info"]
    assert (judged["limit"].astype(float) < math.inf).all()
    assert (judged["value"].astype(float) <= judged["limit"].astype(float)).all()
    # the per-token mean really differs from the per-sequence mean on uneven packed sequences
    info = df.set_index("quantity").loc["packed.per_token_mean.grads_vs_per_sequence", "value"]
    assert float(info) > 1e-2
    curves = pd.read_csv(run / "curves.csv")
    assert len(curves) == TINY.steps
    assert curves["loss_reference"].iloc[-1] < math.log(TINY.vocab) - 1.5, "the data must be learnable"
    assert (run / "loss_fp32.png").stat().st_size > 10_000
    env = json.loads((run / "env.json").read_text())
    assert env["model"] == "llama-mini" and env["triton_mode"] == "interpreter"


@pytest.mark.interpreter
def test_usage_errors_exit_2(tmp_path):
    runner = CliRunner()
    assert runner.invoke(app, ["converge", "gpt-mini", "--out", str(tmp_path)]).exit_code == 2
    assert runner.invoke(app, ["converge", "llama-mini", "--patch", "fast", "--out", str(tmp_path)]).exit_code == 2
    gpu_on_cpu = runner.invoke(
        app, ["converge", "llama-mini", "--preset", "gpu", "--device", "cpu", "--out", str(tmp_path)]
    )
    assert gpu_on_cpu.exit_code == 2
    assert not any(tmp_path.iterdir()), "a usage error must not leave a results folder"


def _run(mutant: str, check: str):
    case = ConvergeCase("llama-mini", dataclasses.replace(TINY, steps=2), "fp32", "ce", seed=0)
    records = run_case(case, patcher=MUTANTS[mutant], checks=(check,)).records
    failing = {r.quantity for r in records if r.verdict in ("fail", "error")}
    passing = {r.quantity for r in records if r.verdict == "pass"}
    return failing, passing


# Each planted bug, the check that exists to catch it, and exactly what must fail.
@pytest.mark.interpreter
@pytest.mark.parametrize(
    "mutant, check, must_fail",
    [
        # not applied: transformers is compared with itself, so everything else agrees exactly
        ("not_applied", "trajectory", {"patch_active"}),
        # left in place after the context: only the revert check can see it
        ("not_reverted", "trajectory", {"patch_reverted"}),
        # sliced in eval only: train mode with k > 0 breaks, k = 0 and eval mode do not
        (
            "logits_to_keep_eval_only",
            "logits_to_keep",
            {f"logits_to_keep[train,k={k}]" for k in (1, TINY.seq_len // 4)},
        ),
    ],
)
def test_suite_fails_on_planted_bug(mutant, check, must_fail):
    failing, passing = _run(mutant, check)
    assert failing == must_fail
    assert passing, "the other checks of this kind must still run and pass"


def test_per_step_limit_follows_the_yardstick_across_a_shifted_transition():
    """A sharp drop at step 10 in the float64 run, at step 11 in transformers' run (the yardstick),
    at step 9 in ours: ours' large error at step 9 is within the limit only because the
    yardstick's peak, two steps away, is inside the window; far from the drop the limit is back
    to rounding, so a loss 1% off everywhere fails there."""
    drop = lambda at: [3.0 if i < at else 1.0 for i in range(20)]  # noqa: E731
    truth, ref, ours = drop(10), drop(11), drop(9)
    rel = lambda a, t: [abs(x - y) / y for x, y in zip(a, t, strict=True)]  # noqa: E731
    yard = [y + 1e-7 for y in rel(ref, truth)]  # rounding everywhere, 2.0 at the shifted step
    limits = tol.per_step_limits(yard, "fp32")
    err = rel(ours, truth)
    assert all(e <= lim for e, lim in zip(err, limits, strict=True))
    rounding_level = tol.FACTOR * 1e-7 + 1e-6  # the yardstick far from the drop, plus the floor
    # near the drop the limit is the cap (a relative error of 100%), not 10x the yardstick's 200%
    assert limits[0] < rounding_level and limits[-1] < rounding_level and limits[9] == tol.MAX_LIMIT
    wrong = rel([1.01 * x for x in truth], truth)
    assert [e <= lim for e, lim in zip(wrong, limits, strict=True)].count(False) == 20 - (2 * tol.STEP_WINDOW + 1)
    # a shift beyond the window is not excused
    assert rel(drop(7), truth)[7] > tol.per_step_limits(yard, "fp32")[7]


# A genuinely wrong loss (1% too large; Gemma-2's softcap dropped) fails the trajectory against
# float64; the correct patch on the same model, data and seed passes it.
@pytest.mark.interpreter
@pytest.mark.parametrize(
    "model, patcher, must_fail",
    [
        ("llama-mini", MUTANTS["loss_scaled"], {"loss_per_step"}),
        ("llama-mini", CausalLMPatch, set()),
        ("gemma2-mini", SoftcapDropped, {"loss_per_step", "final_params", "eval_topk_logprobs"}),
        ("gemma2-mini", CausalLMPatch, set()),
    ],
)
def test_trajectory_against_float64_fails_a_wrong_loss(model, patcher, must_fail):
    case = ConvergeCase(model, dataclasses.replace(TINY, steps=4), "fp32", "ce", seed=0)
    records = {r.quantity: r for r in run_case(case, patcher=patcher, checks=("trajectory",)).records}
    trajectory = {"loss_per_step", "final_params", "eval_topk_logprobs"}
    failing = {q for q in trajectory if records[q].verdict != "pass"}
    assert must_fail <= failing, {q: (records[q].value, records[q].limit) for q in trajectory}
    if not must_fail:
        assert not failing and records["patch_active"].verdict == "pass"
    assert all(0 < records[q].limit < 1e-2 for q in trajectory), "fp32 limits come from rounding"
