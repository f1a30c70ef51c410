"""The last rows of logits past 2**31 elements equal the same rows computed alone (a GPU only).

32768 x 128256 bf16 logits (Llama-3's head) hold 4.2e9 elements: a row offset formed in 32 bits
wraps there, and the last rows would read and write another row's memory. Their loss (log-prob,
entropy) and gradient in the whole batch must have the bits they have alone. No CPU can run it
(Triton's interpreter takes a row at a time): tests/test_offsets_64bit.py holds the offsets on
CPU; the verify suite `past_int32` runs the same cases in the full preset (suites/common/same_row.py).

The fused heads (flce, flp) at 131072 tokens of Llama-3-8B's head (H=4096, V=128256) stand for
1.7e10 logits, which they never hold at once: the check is that their last rows, whose
offsets into the hidden states and into each chunk are the largest, give what the same rows give
alone. Not bit for bit: a two-row chunk is another matrix product than a chunk of the batch
(cuBLAS picks its kernel by shape, docs/checks.md), and a logit whose float32 sum falls either side
of a 16-bit rounding moves by one 16-bit ulp; so the per-row outputs within 0.05 nats, and the
hidden gradient within 1% (relative L2). A row read at a wrapped offset is another row: its
hidden gradient is unrelated (relative L2 near 1.4), its loss a few nats off.
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


HEAD_N, HEAD_H = 131072, 4096  # tokens, Llama-3-8B's hidden size (V as above)


def _head() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator(device="cuda").manual_seed(0)
    h = torch.randn(HEAD_N, HEAD_H, device="cuda", dtype=torch.bfloat16, generator=g)
    w = (torch.randn(V, HEAD_H, device="cuda", generator=g) * 2 * HEAD_H**-0.5).to(torch.bfloat16)  # logits ~N(0, 4)
    t = torch.randint(0, V, (HEAD_N,), device="cuda", generator=g)
    assert HEAD_N * V > 2**31
    return h, w, t


def _head_rows(fn, h, w, t, rows: slice):
    leaf = h[rows].detach().clone().requires_grad_(True)
    outs = fn(leaf, w, t[rows])
    outs = outs if isinstance(outs, tuple) else (outs,)
    torch.autograd.backward(list(outs), [torch.ones_like(o) for o in outs])
    return [o.detach()[-LAST:].double() for o in outs], leaf.grad[-LAST:].double()


def _close(fn) -> None:
    h, w, t = _head()
    whole, g_whole = _head_rows(fn, h, w, t, slice(None))
    alone, g_alone = _head_rows(fn, h, w, t, slice(HEAD_N - LAST, HEAD_N))
    for a, b in zip(whole, alone, strict=True):
        assert torch.isfinite(a).all() and ((a - b).abs() <= 0.05).all(), (a, b)
    assert torch.isfinite(g_whole).all()
    assert float((g_whole - g_alone).norm() / g_alone.norm()) <= 1e-2


def test_flce_last_rows_of_131072_tokens_match_them_alone():
    from ligerbench.kernels.fused_linear_cross_entropy import fused_linear_cross_entropy

    _close(lambda h, w, t: fused_linear_cross_entropy(h, w, t, reduction="none"))


def test_flp_last_rows_of_131072_tokens_match_them_alone():
    from ligerbench.kernels.fused_linear_log_probs import fused_linear_log_probs

    _close(lambda h, w, t: fused_linear_log_probs(h, w, t))
