"""Log-probs' launches differ by row count on a GPU (a GPU only): with few rows the forward caps a
thread's registers and the backward splits a row's blocks over several programs
(kernels/log_probs.py). Neither may move a bit: a row's log-prob, entropy and gradient in a
batch of many rows must be those it gets in a batch of a few. Under the interpreter the launch is
the same whatever the rows (tests/test_lp_kernel.py holds the split on CPU)."""

from __future__ import annotations

import pytest
import torch

from ligerbench.kernels import log_probs as lp_module
from ligerbench.kernels.log_probs import log_probs

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="the launches differ only on a GPU")

V = 151936
MANY = 8192
FEW = 64


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("softcap", [None, 30.0])
def test_a_rows_numbers_do_not_depend_on_the_rows_beside_it(dtype, softcap):
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    assert FEW <= lp_module._GPU_FWD_FEW_ROWS * sms < MANY  # both launches are taken
    g = torch.Generator(device="cuda").manual_seed(3)
    x = (3 * torch.randn(MANY, V, device="cuda", generator=g)).to(dtype)
    t = torch.randint(0, V, (MANY,), device="cuda", generator=g)
    t[::7] = -100
    up_lp = torch.randn(MANY, device="cuda", generator=g)
    up_ent = torch.randn(MANY, device="cuda", generator=g)
    results = []
    for rows in (slice(None), slice(0, FEW)):
        leaf = x[rows].clone().requires_grad_(True)
        logp, ent = log_probs(leaf, t[rows], temperature=0.7, softcap=softcap)
        torch.autograd.backward([logp, ent], [up_lp[rows], up_ent[rows]])
        results.append((logp[:FEW].detach(), ent[:FEW].detach(), leaf.grad[:FEW]))
    for many, few in zip(*results, strict=True):
        assert torch.isfinite(many).all()
        assert torch.equal(many, few)
