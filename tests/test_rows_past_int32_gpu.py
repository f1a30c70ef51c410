"""The last rows of logits past 2**31 elements equal the same rows computed alone (a GPU only).

32768 x 128256 bf16 logits (Llama-3's head) hold 4.2e9 elements: a row offset formed in 32 bits
wraps there, and the last rows would read and write another row's memory. Their loss (log-prob,
entropy) and gradient in the whole batch must have the bits they have alone. No CPU can run it
(Triton's interpreter takes a row at a time): tests/test_offsets_64bit.py holds the offsets on
CPU; the verify suite `past_int32` runs the same cases in the full preset (suites/common/same_row.py).
"""

from __future__ import annotations

import pytest
import torch

N, V = 32768, 128256
LAST = 2

NEEDS = "logits past 2**31 elements need a GPU (16.8 GB in bf16 with their gradient)"
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason=NEEDS)


def _logits() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(N, V, device="cuda", dtype=torch.bfloat16, generator=g)
    t = torch.randint(0, V, (N,), device="cuda", generator=g)
    assert x.numel() > 2**31
    return x, t


def _grad_and_values(fn, x: torch.Tensor, t: torch.Tensor, rows: slice):
    leaf = x[rows].detach().clone().requires_grad_(True) if rows != slice(None) else x.requires_grad_(True)
    outs = fn(leaf, t[rows])
    outs = outs if isinstance(outs, tuple) else (outs,)
    torch.autograd.backward(list(outs), [torch.ones_like(o) for o in outs])
    return [o.detach()[-LAST:] for o in outs], leaf.grad[-LAST:].clone()


def _same(fn) -> None:
    x, t = _logits()
    whole, g_whole = _grad_and_values(fn, x, t, slice(None))
    x.grad = None
    alone, g_alone = _grad_and_values(fn, x.detach(), t, slice(N - LAST, N))
    for a, b in zip(whole, alone, strict=True):
        assert torch.equal(a, b)
    assert torch.equal(g_whole, g_alone)


def test_ce_last_rows_past_int32_equal_them_alone():
    from ligerbench.kernels.cross_entropy import cross_entropy

    _same(lambda x, t: cross_entropy(x, t, reduction="none"))


def test_lp_last_rows_past_int32_equal_them_alone():
    from ligerbench.kernels.log_probs import log_probs

    _same(lambda x, t: log_probs(x, t))
