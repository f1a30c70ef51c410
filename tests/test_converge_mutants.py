"""`ligerbench selftest -k converge` on CPU: between them, converge's planted bugs
(ligerbench/converge/mutants.py) fail every judged quantity of the suite in float32 and in bf16,
each where the correct patch on the same model, data and seed passes it, and no limit is above
1 (ligerbench/converge/tolerance.py's MAX_LIMIT): every limit is one a wrong patch exceeds.

The bugs: normalisers (the mean over every position, a loss 1% off), a 16-bit rounding (the
logits rounded to bf16 in a float32 model), a gradient scaled wrong (twice, the loss right), the
shift lost (another objective), and the patch bugs (not applied, not reverted, logits_to_keep in
eval only, packed rows per token)."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from typer.testing import CliRunner

from ligerbench.cli import app
from ligerbench.converge.checker import INFO_METRIC
from ligerbench.converge.tolerance import MAX_LIMIT
from ligerbench.selftest.converge import CONTROL

pytestmark = [pytest.mark.interpreter, pytest.mark.slow(seconds=70)]

TRAJECTORY = {"loss_per_step", "final_params", "eval_topk_logprobs", "hidden_grad@step0", "logits_grad@step0"}
MUST_FAIL = {
    "fp32": TRAJECTORY | {"patch_active", "patch_reverted", "logits_to_keep[train,k=1]", "packed.per_sequence.loss"},
    "bf16": TRAJECTORY,  # the patch's own bugs (active, reverted, slicing, packing) do not depend on the dtype
}


def test_the_planted_bugs_fail_every_quantity_in_both_dtypes(tmp_path):
    result = CliRunner().invoke(app, ["selftest", "--device", "cpu", "-k", "converge", "--json",
                                      "--out", str(tmp_path)])  # fmt: skip
    assert result.exit_code == 0, result.output
    run = tmp_path / json.loads(result.stdout[result.stdout.index("{") :])["run_id"]
    df = pd.read_csv(run / "records.csv", keep_default_na=False)
    judged = df[df["metric"] != INFO_METRIC]
    assert (judged["limit"].astype(float) <= MAX_LIMIT).all(), judged[judged["limit"].astype(float) > MAX_LIMIT]
    control = df[df["provider"] == CONTROL]
    # the control passes every judged row; the rows reported for information say so
    assert set(control.loc[control["metric"] == INFO_METRIC, "verdict"]) <= {"info"}
    control = control[control["metric"] != INFO_METRIC].set_index(["case", "quantity"])["verdict"]
    assert (control == "pass").all(), control[control != "pass"]
    bad = df[(df["provider"] != CONTROL) & df["verdict"].isin(["fail", "error"])]
    dtypes = ["bf16" if "-bf16-" in case else "fp32" for case in bad["case"]]
    killed = set(zip(dtypes, bad["quantity"], strict=True))
    missing = {(dtype, q) for dtype, quantities in MUST_FAIL.items() for q in quantities} - killed
    assert not missing, f"no planted bug fails {sorted(missing)}"
