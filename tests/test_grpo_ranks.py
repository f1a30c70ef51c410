"""`verify --kernel grpo --nproc 2`: the dp2 cases run on two real gloo ranks, each rank
backpropagating its half of the batch and the gradients summed over the process group (DDP's
all-reduce), against the one-process gradient of the whole batch; a normaliser taken per rank
(num_items ignored) fails there, and Liger gets the count over every process.

The three providers run in ONE command (one launch of the ranks, each case's inputs and float64
truth formed once), shared by the tests below: ours, the planted bug and Liger's Triton loss
(when Liger-Kernel is installed). Each provider's rows are judged on their own."""

from __future__ import annotations

import importlib.util
import json

import pandas as pd
import pytest
from typer.testing import CliRunner

from helpers import once_per_run
from ligerbench.builtin import default_registry
from ligerbench.cli import app

runner = CliRunner()
pytestmark = [pytest.mark.interpreter, pytest.mark.slow(seconds=14)]  # scheduled early (tests/conftest.py)
DP2 = ["--kernel", "grpo", "--nproc", "2", "--where", "dtype=fp32", "--device", "cpu", "--preset", "quick", "--json"]
MUTANT = "mutant_grpo_num_items_ignored"
LIGER = "liger_triton"


def _providers() -> list[str]:
    has_liger = importlib.util.find_spec("liger_kernel") is not None
    return ["ours", MUTANT, *([LIGER] if has_liger else [])]


@pytest.fixture
def dp2_run(tmp_path_factory):
    """(the CLI's result, its --json payload, the run folder, the records) of the one shared command."""
    args = [a for p in _providers() for a in ("--provider", p)]
    result, folder = once_per_run(
        tmp_path_factory, "grpo_dp2_ranks", lambda out: runner.invoke(app, ["verify", *DP2, *args, "--out", str(out)])
    )
    assert "{" in result.stdout, result.output
    payload = json.loads(result.stdout[result.stdout.index("{") :])
    run = folder / payload["run_id"]
    return result, payload, run, pd.read_csv(run / "records.csv")


def _planned() -> set[str]:
    grid = default_registry().kernels["grpo"].grid("quick", "cpu")
    return {c.id for c in grid if c.split == "dp2" and c.dtype == "fp32"}


def test_the_command_ran_on_two_real_ranks_and_only_the_planted_bug_failed(dp2_run):
    result, payload, run, records = dp2_run
    env = json.loads((run / "env.json").read_text())
    assert env["nproc"] == 2 and env["backend"] == "gloo" and env["launch_returncode"] == 0
    assert result.exit_code == 1, result.output  # the planted bug's failures, and nothing else's
    assert {f["provider"] for f in payload["failures"]} == {MUTANT}, payload["failures"]
    assert set(records["provider"]) == set(_providers())


def test_the_split_gradient_over_two_real_ranks_is_the_whole_batch_gradient(dp2_run):
    *_, records = dp2_run
    ours = records[records["provider"] == "ours"]
    planned = _planned()
    assert set(ours["case"]) == planned and len(planned) >= 4
    invariance = ours[ours["suite"] == "invariance"]
    assert set(invariance["quantity"]) == {"split_grad_hidden", "split_grad_weight"}
    assert set(invariance["case"]) == planned and (invariance["verdict"] == "pass").all()
    assert (ours["verdict"] == "pass").all()


def test_a_normaliser_per_rank_fails_on_real_ranks(dp2_run):
    _, payload, _, _ = dp2_run
    failed = {(f["suite"], f["case"].split("/")[6]) for f in payload["failures"] if f["provider"] == MUTANT}
    assert failed == {("invariance", "dapo"), ("invariance", "cispo")}


def test_liger_gets_the_count_over_every_process_on_real_ranks(dp2_run):
    """Liger divides `num_items_in_batch` by the world size itself (TRL's contract): its adapter
    hands it the count over every process (suites/peers/liger.py, _liger_num_items). Handed a
    rank's normaliser as it was, its dapo and cispo gradients came out 2x on two ranks (error 1.0)."""
    pytest.importorskip("liger_kernel")
    *_, records = dp2_run
    liger = records[(records["provider"] == LIGER) & (records["suite"] == "invariance")]
    judged = liger[liger["verdict"] != "skip"]
    assert {c.split("/")[6] for c in judged["case"]} >= {"dapo", "cispo"}
    assert (judged["verdict"] == "pass").all() and len(judged) >= 4
