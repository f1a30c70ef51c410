"""The one rounding the careful yardsticks of the fused-head kernels (`flce`, `flp` and through
them `vp_flce`, `vp_flp`, `grpo`) add inside backward: the logits' gradient, once, to the case's
16-bit dtype (docs/bugs.md, bug 10).

A fused head forms grad_hidden = dlogits @ W and grad_weight = dlogits^T @ hidden as products
whose operands are 16-bit for 16-bit inputs (that is what tensor cores take; so does PyTorch as
users write it: `(hidden @ weight.T).float()` hands its backward an fp16 or bf16 gradient). So
any such kernel rounds dlogits once to the dtype, however carefully it forms it in float32. A
yardstick that kept dlogits in float32 asks for less error than any of them can have:
- far from 0 (logits shifted by a constant) the hidden gradient is a sum that cancels, and the
  rounding of its terms shows (flce);
- in fp16, dlogits below 2**-14 (6.1e-5) is subnormal, with an absolute spacing of 2**-24: at
  a 128K vocabulary an entropy-only upstream makes every element ~1e-5 to 1e-7, rounded to a
  few significant bits. Our flp and an independent fused kernel both measured 6.7e-3 on the
  weight's gradient there, against a limit of 1.1e-3 from a float32-dlogits yardstick (docs/bugs.md,
  bug 10).
The logits themselves stay float32 and unrounded: a kernel that rounds THEM before the softmax
(Liger #1432) still fails.
"""

from __future__ import annotations

import torch


class GradRoundedTo(torch.autograd.Function):
    """Identity forward; backward rounds the gradient once to `dtype` (a no-op where that is
    the gradient's own dtype) and hands it on in the gradient's dtype."""

    @staticmethod
    def forward(ctx, x, dtype):
        ctx.dtype = dtype
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return grad.to(ctx.dtype).to(grad.dtype), None


def grad_rounded_to(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """`x`, whose gradient backward rounds once to `dtype` on its way through."""
    return GradRoundedTo.apply(x, dtype)
