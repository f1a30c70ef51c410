"""The HF patch under FSDP2 (fully_shard, gloo, CPU) and tensor parallelism, on 2 real ranks:
loss and gradients equal to the unsharded transformers model's (tests/fsdp_checks.py).

`lm_head_unit` + flce is the reported failure: the old patch read `lm_head.weight` from outside
lm_head's call, found a sharded DTensor there and died with "aten.mm.out got mixed torch.Tensor
and DTensor"; the patch now runs the fused kernel as lm_head's forward."""

from __future__ import annotations

import pytest
from fsdp_checks import WRAPPINGS, check_fsdp2, check_tp
from vp_checks import run_gloo

pytestmark = pytest.mark.interpreter  # our kernels on CPU tensors


# one spawn per kind (the ranks' start-up, about 10 s, is the larger cost); every wrapping each
@pytest.mark.parametrize("kind", ["flce", "ce"])
def test_patch_under_fsdp2_matches_the_unsharded_model(tmp_path, kind):
    run_gloo(2, check_fsdp2, list(WRAPPINGS), [kind], store=str(tmp_path / "store"), timeout_s=240)


def test_patch_under_tensor_parallel_lm_head(tmp_path):
    run_gloo(2, check_tp, store=str(tmp_path / "store"), timeout_s=180)
