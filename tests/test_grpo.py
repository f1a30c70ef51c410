"""The GRPO family (kernels/grpo_loss.py, suites/grpo/): verify passes on CPU against the
float64 formulas with the split-step invariance records, bad options are refused by name, and
the one normalisation that does not split (bnpo) is shown not to."""

from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

from ligerbench.cli import app
from ligerbench.kernels.grpo_loss import grpo_loss
from ligerbench.suites.grpo import spec
from ligerbench.suites.grpo.axes import case
from ligerbench.tolerance import rel_error

runner = CliRunner()


@pytest.mark.interpreter
@pytest.mark.slow(seconds=14)
def test_verify_passes_with_invariance_records(tmp_path):
    result = runner.invoke(app, ["verify", "--kernel", "grpo", "--device", "cpu", "--json", "--out", str(tmp_path),
                                 "--where", "split=dp2"])  # fmt: skip
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["counts"]["fail"] == 0 and payload["counts"]["error"] == 0 and payload["counts"]["pass"] > 0
    (run,) = tmp_path.iterdir()
    import pandas as pd

    records = pd.read_csv(run / "records.csv")
    split = records[(records["suite"] == "invariance") & (records["provider"] == "ours")]
    assert len(split) > 0 and (split["verdict"] == "pass").all()


@pytest.mark.interpreter
def test_bnpo_is_a_token_mean_of_each_micro_batch_and_does_not_split():
    problem = spec.make_problem(case(b=4, t=6, h=16, v=64, loss_type="bnpo", split="accum2"), 0, torch.device("cpu"))
    whole = spec.run_grpo(grpo_loss, spec.GRPOProblem(**{**problem.__dict__, "split": "none"}))
    split = spec.run_grpo(grpo_loss, problem)
    # ragged masks give the micro-batches different token counts: their means do not average to the whole's
    assert rel_error(split.values["split_grad_weight"], whole.values["grad_weight"]) > 1e-3


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"loss_type": "ppo"}, "loss_type must be one of"),
        ({"importance_level": "batch"}, "importance_level must be one of"),
        ({"kl_estimator": "k2"}, "kl_estimator must be one of"),
        ({"beta": -0.1}, "beta must be >= 0"),
        ({"temperature": 0.0}, "temperature must be > 0"),
        ({"beta": 0.04, "ref": None}, "beta > 0 needs ref_logp"),
    ],
)
def test_bad_options_are_refused_by_name(options, match):
    b, t, h, v = 2, 3, 4, 5
    ref = options.pop("ref", torch.zeros(b, t))
    args = (torch.randn(b, t, h), torch.randn(v, h), torch.zeros(b, t, dtype=torch.long), torch.zeros(b, t), ref,
            torch.zeros(b), torch.ones(b, t, dtype=torch.long))  # fmt: skip
    with pytest.raises(ValueError, match=match):
        grpo_loss(*args, **options)
