"""kernels/fused_linear_distill.py against the float64 semantics, and its result independent of
how the work is cut (one piece, or 16 KiB pieces: many row chunks and vocabulary slices)."""

from __future__ import annotations

import pytest
import torch

from ligerbench.kernels.fused_linear_distill import fused_linear_distill
from ligerbench.suites.flkd.spec import flkd_semantics


def _inputs(n=10, v=301, h=16, ht=24, seed=0):
    g = torch.Generator().manual_seed(seed)
    hs, ws = torch.randn(n, h, generator=g), torch.randn(v, h, generator=g) / h**0.5
    teacher = torch.randn(n, ht, generator=g), torch.randn(v, ht, generator=g) / ht**0.5
    labels = torch.randint(0, v, (n,), generator=g)
    labels[:3] = -100  # a prompt
    return hs, ws, *teacher, labels


def _run(fn, dtype, hs, ws, ht, wt, labels, **options):
    x, w = (a.to(dtype).clone().requires_grad_(True) for a in (hs, ws))
    y, u = (a.to(dtype).clone().requires_grad_(True) for a in (ht, wt))
    loss = fn(x, w, y, u, labels, **options)
    loss.sum().backward()
    assert y.grad is None or y.grad.abs().max() == 0, "the teacher got a gradient"
    return loss.detach().double(), x.grad.double(), w.grad.double()


@pytest.mark.interpreter
@pytest.mark.parametrize("divergence, beta", [("forward_kl", 0.5), ("reverse_kl", 0.5), ("jsd", 0.3), ("tvd", 0.5)])
# one piece, and 16 KiB pieces (4 rows a chunk, a few columns a slice): the same numbers
@pytest.mark.parametrize("chunk_bytes", [2**27, 16 * 1024])
def test_matches_float64_however_cut(divergence, beta, chunk_bytes):
    args = _inputs()
    opts = dict(divergence=divergence, beta=beta, temperature=1.5, reduction="none")
    ours = _run(fused_linear_distill, torch.float32, *args, chunk_bytes=chunk_bytes, **opts)
    ref = _run(flkd_semantics, torch.float64, *args, **opts)
    for got, want in zip(ours, ref, strict=True):
        torch.testing.assert_close(got, want, rtol=2e-5, atol=1e-7)


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("reduction", ["sum", "mean", "batchmean"])
def test_gradients_formed_in_forward_match_those_formed_in_backward(dtype, reduction):
    """The two places the gradients are formed (module docstring): the same numbers, to the
    float32 summation order (bf16: one rounding apart); 3-row groups leave a partial last
    group, and an upstream of 2.5 is applied in backward (not 1: the scaling must happen)."""
    args = _inputs(n=11)
    opts = dict(divergence="jsd", beta=0.3, temperature=1.5, reduction=reduction)
    got = _run(_times(2.5), dtype, *args, gradients="forward", chunk_rows=3, **opts)
    want = _run(_times(2.5), dtype, *args, gradients="backward", **opts)
    tol = dict(rtol=2e-5, atol=1e-7) if dtype == torch.float32 else dict(rtol=2e-2, atol=1e-4)
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, **tol)
    assert got[1].abs().max() > 0 and got[2].abs().max() > 0


def _times(up):
    return lambda *a, **k: fused_linear_distill(*a, **k) * up


@pytest.mark.interpreter
def test_auto_takes_forward_for_scalar_losses_and_backward_for_rows(monkeypatch):
    from ligerbench.kernels import fused_linear_distill as module

    taken = []
    real = module._forward_pass
    monkeypatch.setattr(module, "_forward_pass", lambda *a: taken.append(a[-1] is not None) or real(*a))
    args = _inputs(n=6, v=64)
    _run(fused_linear_distill, torch.float32, *args, reduction="mean")
    _run(fused_linear_distill, torch.float32, *args, reduction="none")
    # a budget of 1-row groups (34 > 32) with no room for a float32 accumulator: backward
    _run(fused_linear_distill, torch.bfloat16, *_inputs(n=34, v=16), reduction="sum", chunk_bytes=170)
    # the same rows forced: the float32 accumulator is taken, in forward
    _run(fused_linear_distill, torch.bfloat16, *_inputs(n=34, v=16), reduction="sum", chunk_rows=1)
    assert taken == [True, False, False, True]


def test_forward_gradients_refuse_a_row_loss_and_a_second_backward():
    args = _inputs(n=4, v=32)
    with pytest.raises(ValueError, match="scalar reduction"):
        _run(fused_linear_distill, torch.float32, *args, reduction="none", gradients="forward")
    x, w = (a.clone().requires_grad_(True) for a in args[:2])
    loss = fused_linear_distill(x, w, *args[2:], reduction="mean")
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="twice"):
        loss.backward()


def test_plan_keeps_the_budget_and_few_groups_at_a_qwen_head():
    from ligerbench.kernels.fused_linear_distill import DEFAULT_CHUNK_BYTES, plan_forward

    v, h, n = 152064, 3584, 8192
    sub, group, accum = plan_forward(n, v, h, torch.bfloat16, DEFAULT_CHUNK_BYTES, None)
    assert (sub, accum) == (128, "dtype")
    assert 8 * v * sub + 2 * v * group <= DEFAULT_CHUNK_BYTES
    assert -(-n // group) <= 32
