"""`converge MODEL --rl grpo` (suites/converge/rl.py): policy-gradient steps through our fused
log-probs match transformers' logits path against a float64 run, and the same check fails when
the fused path drops the temperature (TRL #4159's bug) or when our op silently does not run."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pandas as pd
import pytest
from converge_2rank_checks import two_rank_outcomes
from typer.testing import CliRunner
from vp_checks import PASSED

from ligerbench.cli import app
from ligerbench.converge.checker import ConvergeCase
from ligerbench.converge.models import PRESETS
from ligerbench.converge.tolerance import MAX_LIMIT
from ligerbench.suites.converge import rl as converge_rl
from ligerbench.suites.converge.parallel import case_batches

pytestmark = pytest.mark.interpreter
CASE = ConvergeCase("llama-mini", PRESETS["tiny"], "fp32", "flp", seed=0)


def _verdicts(result) -> dict[str, str]:
    return {r.quantity: r.verdict for r in result.records}


def test_the_cli_passes_on_cpu_in_both_dtypes(tmp_path):
    result = CliRunner().invoke(app, ["converge", "llama-mini", "--rl", "grpo", "--device", "cpu", "--json",
                                      "--out", str(tmp_path)])  # fmt: skip
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["counts"]["pass"] == 10 and payload["counts"]["fail"] == 0  # 5 checks x 2 dtypes
    run = tmp_path / payload["run_id"]
    records = pd.read_csv(run / "records.csv", keep_default_na=False).set_index(["case", "quantity"])
    assert (records["limit"].astype(float) <= MAX_LIMIT).all()
    # the loss, which crosses zero, is judged over the size of its terms
    assert (records.xs("loss_per_step", level="quantity")["metric"] == "diff_over_term_scale_vs_float64").all()
    # a well-conditioned fixture: no run's loss leaves a couple of term scales (on GPUs, at three
    # times this rate, the loss jumped from ~1 to ~5000 at step 3)
    scales = converge_rl.term_scales(converge_rl.rollouts(CASE, case_batches(CASE)[0]))
    curves = pd.read_csv(run / "curves.csv")
    for _, one in curves.groupby("dtype"):
        for run_loss in ("loss_reference", "loss_patched", "loss_float64"):
            assert (one[run_loss].abs().to_numpy() <= 2 * np.asarray(scales)).all(), one


# A wrong temperature in the fused path changes every log-prob. Dropped (TRL #4159's bug), it fails
# each trajectory quantity in float32 within 4 steps; in bf16, multiplied instead of divided (the
# logits scaled 2x less than they should be), the loss and the eval log-probs over the preset's
# 12 steps (measured: loss 0.13 vs limit 0.0066, log-probs 0.31 vs 0.20 nats; the parameters, 0.031
# vs 0.057, stay within bf16's own distance: no planted bug of the policy loss fails them in bf16)
@pytest.mark.parametrize(
    ("dtype", "temperature", "steps", "must_fail"),
    [
        ("fp32", 1.0, 4, {"loss_per_step", "final_params", "eval_topk_logprobs"}),
        ("bf16", 1 / converge_rl.TEMPERATURE, 12, {"loss_per_step", "eval_topk_logprobs"}),
    ],
)
def test_a_wrong_temperature_in_the_fused_path_fails(monkeypatch, dtype, temperature, steps, must_fail):
    real = converge_rl.completion_log_probs
    monkeypatch.setattr(
        converge_rl, "completion_log_probs", lambda *a, temperature_=temperature, temperature, **k: real(
            *a, temperature=temperature_, **k)
    )  # fmt: skip
    case = dataclasses.replace(CASE, dtype=dtype, preset=dataclasses.replace(CASE.preset, steps=steps))
    got = _verdicts(converge_rl.run_case(case))
    assert got["flp_active"] == "pass", got
    assert {q for q, v in got.items() if v == "fail"} >= must_fail, got


def test_our_op_not_running_fails_flp_active(monkeypatch):
    monkeypatch.setattr(converge_rl, "_ours", lambda calls: converge_rl._theirs)
    assert _verdicts(converge_rl.run_case(CASE))["flp_active"] == "fail"


def test_rl_under_ddp_is_refused():
    result = CliRunner().invoke(app, ["converge", "llama-mini", "--rl", "grpo", "--nproc", "2", "--parallel", "ddp"])
    assert result.exit_code == 2, result.output
    said = " ".join(result.output.replace("│", " ").split())  # the message as one line, out of its panel
    assert "--rl trains under --parallel fsdp2, tp, fsdp2_tp or fsdp2_tp_strided" in said


def _on_two_ranks(tmp_path, *args):
    result = CliRunner().invoke(app, ["converge", "llama-mini", "--rl", "grpo", "--nproc", "2", "--device", "cpu",
                                      "--dtype", "fp32", "--json", "--out", str(tmp_path), *args])  # fmt: skip
    return result, json.loads(result.stdout[result.stdout.index("{") :])


@pytest.mark.slow
def test_rl_on_two_real_gloo_ranks_passes(tmp_path):
    result, payload = _on_two_ranks(tmp_path, "--parallel", "fsdp2")
    assert result.exit_code == 0, result.output
    run = tmp_path / payload["run_id"]
    env = json.loads((run / "env.json").read_text())
    assert env["nproc"] == 2 and env["backend"] == "gloo" and env["launch_returncode"] == 0
    assert payload["counts"]["pass"] == 6 and payload["counts"]["fail"] == 0  # flp_active, grads@step0, 4 trajectory


def test_rl_under_tensor_parallel_passes_on_two_real_gloo_ranks(tmp_path_factory):
    """Under tp, as the command's ranks run it (tests/converge_2rank_checks.py, one shared launch)."""
    outcome = two_rank_outcomes(tmp_path_factory)["rl_tp"]
    assert outcome == PASSED, outcome


def test_rl_with_a_gradient_divided_by_the_world_size_twice_fails_on_real_ranks(tmp_path_factory):
    """Under fsdp2, as the command's ranks run it with `--mutant grad_divided_by_world_twice`
    (tests/converge_2rank_checks.py: grads@step0 fails, flp_active passes; the command's
    --mutant itself: tests/test_converge_parallel.py)."""
    outcome = two_rank_outcomes(tmp_path_factory)["rl_grad_divided_by_world_twice"]
    assert outcome == PASSED, outcome
