"""The HF patch under FSDP2 (fully_shard, gloo, CPU) and tensor parallelism, on 2 real ranks:
loss and gradients equal to the unsharded transformers model's (tests/fsdp_checks.py).

`lm_head_unit` + flce is the reported failure: the old patch read `lm_head.weight` from outside
lm_head's call, found a sharded DTensor there and died with "aten.mm.out got mixed torch.Tensor
and DTensor"; the patch now runs the fused kernel as lm_head's forward."""

from __future__ import annotations

import pytest
from fsdp_checks import (
    TP_CASES,
    TP_MUTANTS,
    WRAPPINGS,
    check_fsdp2,
    check_log_probs,
    check_tp,
    check_tp_mutants,
)
from vp_checks import PASSED, run_gloo_checks

from helpers import computed_once_per_run

pytestmark = pytest.mark.interpreter  # our kernels on CPU tensors

# Each planted bug on the uneven shards, with what the check fails on: a start taken as rank *
# local width leaves a gap between the shards (the kernel's layout check); shards in reverse
# order tile [0, V) but put each class's logit on the wrong row of the weight (the loss
# compared); a detached shard leaves lm_head's weight without a gradient (the gradients compared).
TP_BUGS_CAUGHT = {
    "even_width_start": "vocab shards do not tile",
    "reversed_shards": r"tp/flce_uneven rank \d: loss",
    "detached_weight_shard": r"\('tp/flce_uneven rank \d', \{'lm_head\.weight'\}\)",
}

# Every check of this file on ONE set of 2 gloo ranks, one after the other (the ranks' start-up,
# transformers' imports the larger part, about 8 CPU-s a launch, paid once instead of once per
# test): name -> (check, its bound in s, its arguments). Each test below asserts its own check's
# outcome: passed on both ranks, or what a rank raised in it (a check that raises ends the
# launch: the checks after it fail as not run, naming it).
CHECKS = {
    # every wrapping, each patch kind
    "fsdp2/flce": (check_fsdp2, 240, list(WRAPPINGS), ["flce"]),
    "fsdp2/ce": (check_fsdp2, 240, list(WRAPPINGS), ["ce"]),
    # every TP case (ce, flce on uneven shards, both), then what flce refuses
    "tp": (check_tp, 180, list(TP_CASES), None, True),
    "tp_mutants": (check_tp_mutants, 180, TP_BUGS_CAUGHT),
    "log_probs": (check_log_probs, 180),
}


@pytest.fixture
def two_ranks(tmp_path_factory) -> dict[str, str]:
    """Each check's outcome, from the one launch of this pytest run (shared by the xdist workers)."""

    def launch(folder):
        return run_gloo_checks(2, CHECKS, folder=folder / "checks", store=str(folder / "store"))

    outcomes, _ = computed_once_per_run(tmp_path_factory, "hf_parallel_checks", launch)
    return outcomes


@pytest.mark.parametrize("kind", ["flce", "ce"])
def test_patch_under_fsdp2_matches_the_unsharded_model(two_ranks, kind):
    assert two_ranks[f"fsdp2/{kind}"] == PASSED, two_ranks[f"fsdp2/{kind}"]


# scheduled early (tests/conftest.py), alone: the launch every test here reads, about 14 s
@pytest.mark.slow(seconds=14)
def test_patch_under_tensor_parallel_lm_head(two_ranks):
    assert two_ranks["tp"] == PASSED, two_ranks["tp"]


def test_planted_bugs_in_the_fused_patch_under_tensor_parallel_fail(two_ranks):
    assert set(TP_BUGS_CAUGHT) == set(TP_MUTANTS)
    assert two_ranks["tp_mutants"] == PASSED, two_ranks["tp_mutants"]


def test_completion_log_probs_under_tensor_parallel_and_fsdp2(two_ranks):
    assert two_ranks["log_probs"] == PASSED, two_ranks["log_probs"]
