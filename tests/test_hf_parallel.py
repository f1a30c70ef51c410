"""The HF patch under FSDP2 (fully_shard, gloo, CPU) and tensor parallelism, on 2 real ranks:
loss and gradients equal to the unsharded transformers model's (tests/fsdp_checks.py).

`lm_head_unit` + flce is the reported failure: the old patch read `lm_head.weight` from outside
lm_head's call, found a sharded DTensor there and died with "aten.mm.out got mixed torch.Tensor
and DTensor"; the patch now runs the fused kernel as lm_head's forward."""

from __future__ import annotations

import pytest
from fsdp_checks import TP_CASES, TP_MUTANTS, WRAPPINGS, check_fsdp2, check_tp, check_tp_mutants
from vp_checks import run_gloo

pytestmark = pytest.mark.interpreter  # our kernels on CPU tensors


# one spawn per kind (the ranks' start-up, about 10 s, is the larger cost); every wrapping each
@pytest.mark.slow(seconds=17)
@pytest.mark.parametrize("kind", ["flce", "ce"])
def test_patch_under_fsdp2_matches_the_unsharded_model(tmp_path, kind):
    run_gloo(2, check_fsdp2, list(WRAPPINGS), [kind], store=str(tmp_path / "store"), timeout_s=240)


@pytest.mark.slow(seconds=13)
def test_patch_under_tensor_parallel_lm_head(tmp_path):
    # every TP case (ce, flce on uneven shards, both), then what flce refuses, in one spawn
    run_gloo(2, check_tp, list(TP_CASES), None, True, store=str(tmp_path / "store"), timeout_s=180)


# Each planted bug on the uneven shards, with what the check fails on: a start taken as rank *
# local width leaves a gap between the shards (the kernel's layout check); shards in reverse
# order tile [0, V) but put each class's logit on the wrong row of the weight (the loss
# compared); a detached shard leaves lm_head's weight without a gradient (the gradients compared).
# One spawn for the three.
TP_BUGS_CAUGHT = {
    "even_width_start": "vocab shards do not tile",
    "reversed_shards": r"tp/flce_uneven rank \d: loss",
    "detached_weight_shard": r"\('tp/flce_uneven rank \d', \{'lm_head\.weight'\}\)",
}


@pytest.mark.slow(seconds=14)
def test_planted_bugs_in_the_fused_patch_under_tensor_parallel_fail(tmp_path):
    assert set(TP_BUGS_CAUGHT) == set(TP_MUTANTS)
    run_gloo(2, check_tp_mutants, TP_BUGS_CAUGHT, store=str(tmp_path / "store"), timeout_s=180)


@pytest.mark.slow(seconds=13)
def test_completion_log_probs_under_tensor_parallel_and_fsdp2(tmp_path):
    from fsdp_checks import check_log_probs

    run_gloo(2, check_log_probs, store=str(tmp_path / "store"), timeout_s=180)
