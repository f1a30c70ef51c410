"""`converge MODEL --distill DIVERGENCE` (suites/converge/distill.py): a student trained from a
fixed teacher through our fused distillation loss matches the same divergence on transformers'
full logits against a float64 run, and the same judgement fails when the fused loss carries one
of the distillation kernels' planted bugs (suites/families/distill_mutants.py: the temperature on the student
only, the KL taken in the wrong direction) or when our op silently does not run."""

from __future__ import annotations

import dataclasses
import json

import pytest
from typer.testing import CliRunner

from ligerbench.cli import app
from ligerbench.converge.checker import ConvergeCase
from ligerbench.converge.models import PRESETS
from ligerbench.suites.converge import distill as converge_distill
from ligerbench.suites.families import distill_mutants

pytestmark = pytest.mark.interpreter


def _case(divergence: str) -> ConvergeCase:
    return ConvergeCase("llama-mini", PRESETS["tiny"], "fp32", "flkd", seed=0, distill=divergence)


def _verdicts(result) -> dict[str, str]:
    return {r.quantity: r.verdict for r in result.records}


def test_the_cli_passes_on_cpu_with_jsd(tmp_path):
    result = CliRunner().invoke(app, ["converge", "llama-mini", "--distill", "jsd", "--device", "cpu", "--dtype",
                                      "fp32", "--json", "--out", str(tmp_path)])  # fmt: skip
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["counts"]["pass"] == 5 and payload["counts"]["fail"] == 0  # flkd_active + 4 trajectory checks


# each bug on the divergence where it changes the objective: a one-sided temperature under the
# symmetric JSD (TRL #5731's kind), a swapped direction under forward KL (JSD at beta 0.5 is
# symmetric: swapping there would be an equivalent mutant). In bf16 over 4 steps the one-sided
# temperature fails the loss (3.5 vs limit 0.009), not the parameters or the eval log-probs
# (0.044 vs 0.068, 0.12 vs 0.14 nats: within bf16's own distance to float64)
@pytest.mark.parametrize(
    ("divergence", "bug", "dtype", "must_fail"),
    [
        ("jsd", "temperature_student_only", "fp32", {"loss_per_step", "final_params"}),
        ("forward_kl", "kl_direction_swapped", "fp32", {"loss_per_step", "final_params"}),
        ("jsd", "temperature_student_only", "bf16", {"loss_per_step"}),
    ],
)
def test_a_planted_bug_in_the_fused_loss_fails_the_trajectory(monkeypatch, divergence, bug, dtype, must_fail):
    monkeypatch.setattr(converge_distill, "fused_linear_distill", distill_mutants.on_head(bug))
    case = dataclasses.replace(_case(divergence), dtype=dtype)
    if dtype == "bf16":
        case = dataclasses.replace(case, preset=dataclasses.replace(case.preset, steps=4))
    got = _verdicts(converge_distill.run_case(case))
    assert got["flkd_active"] == "pass", got
    assert {q for q, v in got.items() if v == "fail"} >= must_fail, got


def test_our_op_not_running_fails_flkd_active(monkeypatch):
    monkeypatch.setattr(converge_distill, "_ours", lambda calls: converge_distill._theirs)
    assert _verdicts(converge_distill.run_case(_case("jsd")))["flkd_active"] == "fail"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["llama-mini", "--distill", "jsd", "--rl", "grpo"], "--distill and --rl are two objectives"),
        (["llama-mini", "--distill", "jsd", "--packed"], "without --nproc or --packed"),
        (["gemma2-mini", "--distill", "jsd"], "no softcap"),
    ],
)
def test_distill_usage_errors(args, message):
    result = CliRunner().invoke(app, ["converge", *args])
    text = " ".join(result.output.replace("│", " ").split())  # rich's error box, unwrapped
    assert result.exit_code == 2 and message in text, result.output
