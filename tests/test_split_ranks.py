"""`verify --kernel ce --nproc 2`: the dp2 cases of the split step (suites/common/split_step.py) run on two
real gloo ranks, each backpropagating its own shard of the tokens over the step's count and the
gradients summed over the process group (DDP's all-reduce); a trainer that divides each shard by
its own count fails there as it does simulated."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from typer.testing import CliRunner

from ligerbench.builtin import default_registry
from ligerbench.cli import app

runner = CliRunner()
pytestmark = [pytest.mark.interpreter, pytest.mark.slow]
DP2 = ["--kernel", "ce", "--nproc", "2", "--device", "cpu", "--preset", "quick", "--json"]


def test_the_split_step_on_two_real_ranks_is_the_one_batch_gradient(tmp_path):
    result = runner.invoke(app, ["verify", *DP2, "--provider", "ours", "--provider", "mutant_local_token_count",
                                 "--out", str(tmp_path)])  # fmt: skip
    text = result.stdout
    payload = json.loads(text[text.index("{") :])
    assert result.exit_code == 1, result.output  # the planted bug's failures
    run = tmp_path / payload["run_id"]
    assert json.loads((run / "env.json").read_text())["nproc"] == 2
    records = pd.read_csv(run / "records.csv")
    planned = {c.id for c in default_registry().kernels["ce"].grid("quick", "cpu") if c.split == "dp2"}
    assert set(records["case"]) == planned and len(planned) >= 2
    invariance = records[records["suite"] == "invariance"].set_index(["provider", "case"])["verdict"]
    assert (invariance.loc["ours"] == "pass").all() and len(invariance.loc["ours"]) == len(planned)
    assert (invariance.loc["mutant_local_token_count"] == "fail").all()
    failed = {(f["provider"], f["suite"]) for f in payload["failures"]}
    assert failed == {("mutant_local_token_count", "invariance")}
