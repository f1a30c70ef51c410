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
