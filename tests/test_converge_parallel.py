"""`converge --nproc 2 --parallel ddp|fsdp2|tp` on 2 real gloo ranks: the command through
torch.distributed.run passes under fsdp2 and fails on a gradient divided by the world size
twice; every other plan passes and a mean taken per accumulation micro-batch fails, as the
command's ranks run them, on one shared launch (tests/converge_2rank_checks.py); the command
ends with a clear error when a rank dies, and refuses what it cannot run (exit 2).
The 2-D plans (FSDP2 x tensor parallel) on 4 real gloo ranks: tests/mesh_2d_checks.py."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from converge_2rank_checks import two_rank_outcomes
from typer.testing import CliRunner
from vp_checks import PASSED

from ligerbench.cli import app
from ligerbench.converge.parallel import Layout, micro_rows
from ligerbench.distributed.launch import FAULT_ENV

runner = CliRunner()
pytestmark = pytest.mark.interpreter  # --device cpu: our kernels through Triton's interpreter
BASE = ["converge", "llama-mini", "--preset", "quick", "--dtype", "fp32", "--device", "cpu", "--nproc", "2"]
JUDGED = {"patch_active", "grads@step0", "loss_per_step", "float64_loss_bounded", "final_params", "eval_topk_logprobs"}


def _converge(tmp_path, *args, env=None):
    result = runner.invoke(app, [*BASE, *args, "--out", str(tmp_path), "--json"], env=env)
    text = result.stdout
    payload = json.loads(text[text.index("{") :]) if "{" in text else None
    run = tmp_path / payload["run_id"] if payload else None
    return result, payload, run


# The CLI end to end under one plan, fsdp2 + flce (the reported failure: lm_head its own unit,
# the fused loss must find lm_head's weight gathered): its run folder, records, case ids and
# curves. The other plans run as a rank of this command runs them, on one shared launch
# (tests/converge_2rank_checks.py). 4 steps: enough for the trajectory checks.
@pytest.mark.slow
def test_fsdp2_with_the_fused_loss_passes_against_the_single_process_float64_run(tmp_path):
    result, payload, run = _converge(tmp_path, "--parallel", "fsdp2", "--patch", "flce", "--steps", "4")
    assert result.exit_code == 0, result.output
    df = pd.read_csv(run / "records.csv", keep_default_na=False)
    assert set(df["quantity"]) == JUDGED and (df["verdict"] == "pass").all(), df.to_string()
    assert df["case"].str.endswith("-fsdp2x2").all()
    env = json.loads((run / "env.json").read_text())
    assert env["nproc"] == 2 and env["backend"] == "gloo" and env["run"]["completed"] == 1
    curves = pd.read_csv(run / "curves.csv")
    assert len(curves) == 4 and curves["loss_patched"].notna().all()


@pytest.fixture
def two_ranks(tmp_path_factory) -> dict[str, str]:
    """Each case's outcome, from the one launch of this pytest run (shared by the xdist workers)."""
    return two_rank_outcomes(tmp_path_factory)


# ddp + ce with gradient accumulation (2 ranks x 2 micro-batches: the loss normalised over all
# four); tp + ce: the logits vocab-sharded, the vocab-parallel loss; tp + flce: lm_head's weight
# shard to the vocab-parallel fused kernel
@pytest.mark.parametrize("name", ["ddp_ce_accum2", "tp_ce", "tp_flce"])
def test_each_plan_passes_on_two_real_gloo_ranks(two_ranks, name):
    assert two_ranks[name] == PASSED, two_ranks[name]


def test_a_mean_per_micro_batch_fails_under_gradient_accumulation(two_ranks):
    # 2 ranks x 2 micro-batches of unequal counted targets (prompt masks and padding): the mean of
    # the four micro-batch means is not the mean over the step's targets
    assert two_ranks["mean_per_micro_batch"] == PASSED, two_ranks["mean_per_micro_batch"]


@pytest.mark.slow
def test_a_gradient_divided_by_the_world_size_twice_fails(tmp_path):
    # through the CLI's --mutant: the planted normalisation reaches every rank
    args = ["--parallel", "ddp", "--patch", "ce", "--steps", "2", "--mutant", "grad_divided_by_world_twice"]
    result, payload, run = _converge(tmp_path, *args)
    assert result.exit_code == 1, result.output
    df = pd.read_csv(run / "records.csv", keep_default_na=False).set_index("quantity")
    assert df.loc["grads@step0", "verdict"] == "fail"
    assert abs(float(df.loc["grads@step0", "value"]) - 0.5) < 1e-3  # half the gradient, at 2 ranks
    assert df.loc["patch_active", "verdict"] == "pass"  # the kernel ran; the normalisation is wrong


@pytest.mark.slow
def test_a_rank_that_dies_ends_the_converge_run_with_a_clear_error(tmp_path):
    result, payload, run = _converge(tmp_path, "--parallel", "ddp", "--steps", "2", env={FAULT_ENV: "die:1"})
    assert result.exit_code == 1, result.output
    assert [f["quantity"] for f in payload["failures"]] == ["ranks"]
    (message,) = pd.read_csv(run / "records.csv", keep_default_na=False)["message"]
    assert "a rank failed" in message and "rank 1 exit code 3" in message and "only 0 of 1" in message


@pytest.mark.parametrize(
    "args, why",
    [
        (["--patch", "ce"], "needs --parallel"),  # --nproc without a plan
        (["--parallel", "ddp", "--packed"], "single-process"),  # packing is not a parallel check
        (["--parallel", "ddp", "--accum", "2"], "cannot be split"),  # 2 rows over 2 ranks x 2
        (["--parallel", "ddp", "--mutant", "nonsense"], "--mutant"),
        (["--parallel", "fsdp2_tp"], "at least 4, got 2"),  # a (dp, 2) mesh needs dp >= 2
        (["--parallel", "fsdp2_tp", "--nproc", "6", "--accum", "2"], "over 3 replica(s)"),  # dp 3, not 6
    ],
)
def test_usage_errors_exit_2_without_a_run_folder(tmp_path, args, why):
    result = runner.invoke(app, [*BASE, *args, "--out", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert why in result.output
    assert not any(tmp_path.iterdir())


# One set of 4 gloo ranks runs every 2-D case (start-up is most of the cost): see CASES there.
@pytest.mark.slow(seconds=60)
def test_the_2d_plans_pass_and_catch_their_planted_bugs_on_four_gloo_ranks(tmp_path):
    from mesh_2d_checks import CASES, check_mesh_2d
    from vp_checks import run_gloo

    run_gloo(4, check_mesh_2d, list(CASES), store=str(tmp_path / "store"), timeout_s=300)


@pytest.mark.parametrize(
    "layout, rows",
    [
        (Layout(0, 1), [slice(0, 8)]),  # no data parallelism (tp): the whole batch
        (Layout(1, 2), [slice(4, 8)]),  # the second dp replica of two: under fsdp2_tp, global ranks 2 and 3
        (Layout(2, 3), [slice(6, 8)]),  # uneven: torch.tensor_split gives the last replica fewer rows
    ],
)
def test_each_replica_takes_its_slice_of_the_batch(layout, rows):
    assert micro_rows(8, layout, 1) == rows
    # accumulation splits the replica's slice again, contiguously
    assert micro_rows(8, layout, 2)[0].start == rows[0].start and micro_rows(8, layout, 2)[-1].stop == rows[0].stop
