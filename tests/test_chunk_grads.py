"""kernels/chunk_grads.py: the weight gradient's first chunk is written, not added to zeros,
so its storage starts as torch.empty. Filled with NaN here, any read of it before the first
write (an addmm where an mm belongs) shows in the result."""

from __future__ import annotations

import pytest
import torch

from ligerbench.kernels import chunk_grads, fp32_products
from ligerbench.kernels.chunk_grads import ChunkGrads


@pytest.fixture
def nan_empty(monkeypatch):
    real = torch.empty_like

    def poisoned(t, **kw):
        out = real(t, **kw)
        return out.fill_(float("nan")) if out.is_floating_point() else out

    monkeypatch.setattr(chunk_grads.torch, "empty_like", poisoned)


@pytest.mark.parametrize("accum", ["dtype", "fp32"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_chunks_sum_to_the_whole_product(nan_empty, accum, dtype):
    g = torch.Generator().manual_seed(3)
    h = torch.randn(10, 8, generator=g).to(dtype)
    w = torch.randn(12, 8, generator=g).to(dtype)
    grad = torch.randn(10, 12, generator=g).to(dtype)
    grads = ChunkGrads(h, w, need_h=True, need_w=True, need_b=True, accum=accum, bias_dtype=dtype)
    for start, stop in ((0, 4), (4, 8), (8, 10)):
        grads.add(start, stop, h[start:stop], grad[start:stop], w)
    grad_h, grad_w, grad_b = grads.result()
    exact_w = grad.double().t() @ h.double()
    tol = 1e-5 if dtype == torch.float32 else 3 * 2**-8  # bf16: a few roundings of the running sum
    assert grad_w.dtype == dtype and not grad_w.isnan().any()
    assert ((grad_w.double() - exact_w).abs().max() / exact_w.abs().max()).item() <= tol
    assert torch.allclose(grad_h.double(), grad.double() @ w.double(), rtol=tol, atol=tol)
    assert torch.allclose(grad_b.double(), grad.double().sum(0), rtol=tol, atol=tol)


def test_no_chunk_gives_a_zero_weight_gradient(nan_empty):
    h, w = torch.randn(0, 8), torch.randn(12, 8)
    _, grad_w, _ = ChunkGrads(h, w, need_h=True, need_w=True, need_b=False, accum="dtype").result()
    assert torch.equal(grad_w, torch.zeros_like(w))


@pytest.mark.parametrize("lay", [fp32_products.grad_over_logits, fp32_products.grad_under_logits])
@pytest.mark.parametrize("rows", [17, 64])
def test_a_gradient_laid_in_the_logits_storage_reads_none_of_the_logits(lay, rows):
    """dh = grad @ W where grad is a bfloat16 view laid over (or under) float32 logits, its rows
    2V elements apart. Every byte of the logits around it here reads, as a bfloat16, as NaN (a
    float32 logit whose low half is 0x7fa0, as 1.6835823 is: the logit of the failing flce
    verify case flce/n17/v100/h7b/bf16/sum/up-random/random_10/all/normal, row 11 column 9).
    PyTorch's CPU bfloat16 matmul on an AMX CPU (oneDNN brg_matmul:avx10_1_512_amx) read 28
    elements past each row of V=100 and made its whole output row NaN (fp32_products.grad_times);
    on a CPU without AMX, or on a GPU, this passes either way."""
    v, hd = 100, 7
    gen = torch.Generator().manual_seed(5)
    logits = torch.full((rows, v), 1.6835823059082031)
    assert logits.view(torch.int32)[0, 0].item() & 0xFFFF == 0x7FA0
    grad = lay(logits, torch.bfloat16)
    assert grad.stride(0) == 2 * v
    grad.copy_(torch.randn(rows, v, generator=gen).to(torch.bfloat16))
    w = torch.randn(v, hd, generator=gen).to(torch.bfloat16)
    h = torch.randn(rows, hd, generator=gen).to(torch.bfloat16)
    exact = grad.double() @ w.double()
    grads = ChunkGrads(h, w, need_h=True, need_w=False, need_b=False, accum="dtype")
    grads.add(0, rows, h, grad, w)
    grad_h, _, _ = grads.result()
    assert not grad_h.isnan().any(), f"NaN rows {grad_h.isnan().any(1).nonzero().flatten().tolist()}"
    assert torch.allclose(grad_h.double(), exact, rtol=2**-7, atol=2**-7)
