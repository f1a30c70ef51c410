"""grpo's eager path and flp lay each chunk's 16-bit gradient under its float32 logits
(fp32_products.grad_under_logits), so a warp of log_probs' backward that stores early could
overwrite logits another warp of the same program has yet to read: the race of docs/bugs.md,
bug 9 (met there in cross_entropy's pass 2). The backward kernel puts a barrier before each
block's store when told (SYNC)."""

from __future__ import annotations

import pytest
import torch

from ligerbench.kernels import log_probs as log_probs_module
from ligerbench.kernels.fp32_products import grad_under_logits
from ligerbench.kernels.log_probs import log_probs_grad_rows, log_probs_rows


@pytest.mark.interpreter
def test_the_backward_is_told_when_the_gradient_lies_under_the_logits(monkeypatch):
    """Its warps run apart on a GPU (docs/bugs.md, bug 9): a 16-bit gradient under float32 logits
    gets a barrier before each block's store (SYNC); a buffer of its own, or the logits
    themselves in place, need none. The interpreter runs a program as one thread, so only the
    launch can be checked here."""
    seen = []
    real = log_probs_module._lp_bwd_kernel

    class Spy:
        def __getitem__(self, grid):
            def launch(*args, **kw):
                seen.append(kw["SYNC"])
                return real[grid](*args, **kw)

            return launch

    monkeypatch.setattr(log_probs_module, "_lp_bwd_kernel", Spy())
    logits = torch.randn(4, 300)
    target = torch.randint(0, 300, (4, 1))
    opts = dict(temperature=1.0, softcap=None, logit_scale=1.0, ignore_index=-100)
    _, _, stats = log_probs_rows(logits, target, **opts)
    dlogp = torch.randn(4, 1)
    under, own, in_place = logits.clone(), logits.clone(), logits.clone()
    log_probs_grad_rows(under, target, stats, dlogp, None, grad_under_logits(under, torch.bfloat16), **opts)
    log_probs_grad_rows(own, target, stats, dlogp, None, torch.empty(4, 300, dtype=torch.bfloat16), **opts)
    log_probs_grad_rows(in_place, target, stats, dlogp, None, in_place, **opts)
    assert seen == [True, False, False]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_large_logits_give_the_bits_of_a_separate_buffer_every_time(device, dtype):
    """Peaked float32 rows (an overwritten max moves the whole row's gradient), many blocks a row,
    many rows: the gradient laid under the logits must be, run after run, the bits a buffer of its
    own gets."""
    g = torch.Generator(device=device).manual_seed(7)
    n, v = 2048, 32000
    logits = 8 * torch.randn(n, v, generator=g, device=device)
    target = torch.randint(0, v, (n, 1), generator=g, device=device)
    target[::10] = -100
    opts = dict(temperature=0.7, softcap=None, logit_scale=1.0, ignore_index=-100)
    _, _, stats = log_probs_rows(logits, target, **opts)
    dlogp, dent = torch.randn(n, 1, generator=g, device=device), torch.randn(n, generator=g, device=device)
    want = torch.empty(n, v, dtype=dtype, device=device)
    log_probs_grad_rows(logits, target, stats, dlogp, dent, want, **opts)
    for _ in range(8):
        shared = logits.clone()
        grad = grad_under_logits(shared, dtype)
        log_probs_grad_rows(shared, target, stats, dlogp, dent, grad, **opts)
        assert torch.equal(grad, want)
