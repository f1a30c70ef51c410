"""`verify --kernel grpo --nproc 2`: the dp2 cases run on two real gloo ranks, each rank
backpropagating its half of the batch and the gradients summed over the process group (DDP's
all-reduce), against the one-process gradient of the whole batch; a normaliser taken per rank
(num_items ignored) fails there."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from typer.testing import CliRunner

from ligerbench.builtin import default_registry
from ligerbench.cli import app

runner = CliRunner()
pytestmark = [pytest.mark.interpreter, pytest.mark.slow(seconds=14)]  # each, scheduled early (tests/conftest.py)
DP2 = ["--kernel", "grpo", "--nproc", "2", "--where", "dtype=fp32", "--device", "cpu", "--preset", "quick", "--json"]


def _verify(tmp_path, *args):
    result = runner.invoke(app, ["verify", *DP2, *args, "--out", str(tmp_path)])
    text = result.stdout
    return result, json.loads(text[text.index("{") :])


def test_the_split_gradient_over_two_real_ranks_is_the_whole_batch_gradient(tmp_path):
    result, payload = _verify(tmp_path, "--provider", "ours")
    assert result.exit_code == 0, result.output
    run = tmp_path / payload["run_id"]
    env = json.loads((run / "env.json").read_text())
    assert env["nproc"] == 2 and env["backend"] == "gloo" and env["launch_returncode"] == 0
    records = pd.read_csv(run / "records.csv")
    grid = default_registry().kernels["grpo"].grid("quick", "cpu")
    planned = {c.id for c in grid if c.split == "dp2" and c.dtype == "fp32"}
    assert set(records["case"]) == planned and len(planned) >= 4
    invariance = records[records["suite"] == "invariance"]
    assert set(invariance["quantity"]) == {"split_grad_hidden", "split_grad_weight"}
    assert set(invariance["case"]) == planned and (invariance["verdict"] == "pass").all()


def test_a_normaliser_per_rank_fails_on_real_ranks(tmp_path):
    result, payload = _verify(tmp_path, "--provider", "mutant_grpo_num_items_ignored")
    assert result.exit_code == 1, result.output
    failed = {(f["suite"], f["case"].split("/")[6]) for f in payload["failures"]}
    assert failed == {("invariance", "dapo"), ("invariance", "cispo")}


def test_liger_gets_the_count_over_every_process_on_real_ranks(tmp_path):
    """Liger divides `num_items_in_batch` by the world size itself (TRL's contract): its adapter
    hands it the count over every process (suites/peers/liger.py, _liger_num_items). Handed a
    rank's normaliser as it was, its dapo and cispo gradients came out 2x on two ranks (error 1.0)."""
    pytest.importorskip("liger_kernel")
    result, payload = _verify(tmp_path, "--provider", "liger_triton", "--suite", "invariance")
    assert result.exit_code == 0, payload["failures"]
    records = pd.read_csv(tmp_path / payload["run_id"] / "records.csv")
    judged = records[records["verdict"] != "skip"]
    assert {c.split("/")[6] for c in judged["case"]} >= {"dapo", "cispo"}
    assert (judged["verdict"] == "pass").all() and len(judged) >= 4
