"""The gradients of a linear head (hidden, weight, bias) summed chunk of rows by chunk of rows,
shared by the fused kernels that form a chunk's dL/dlogits in forward (flce's token split,
grpo's eager path, flkd's scalar reductions): grad_hidden[chunk] = dlogits @ W in one product;
grad_weight += dlogits.T @ h_chunk (the first chunk's product written, not added) in the
weight's dtype ("dtype": addmm, the running sum rounded once a chunk) or into a float32 [V, H]
accumulator ("fp32": rounded once at the end; the choice and its error are in
kernels/fused_linear_cross_entropy.py's docstring, `plan`); grad_bias in float32 with Kahan
compensation (a plain running sum drifted past eager's single reduction over 820 chunks on an
H100: 1.1x the tolerance). No host sync."""

from __future__ import annotations

import torch

from .cross_entropy import scale_rows_
from .fp32_products import add_product_fp32, grad_times


class ChunkGrads:
    """Accumulates the gradients of h [N, H], w [V, H] and (if need_b) the bias [V], each only
    where asked for; `add(start, stop, h_c, grad, w)` takes rows [start, stop)'s hidden h_c and
    dL/dlogits grad [rows, V] (the inputs' dtype, any row stride); `result()` gives (grad_h,
    grad_w, grad_b), None where not needed, in the dtypes of the tensors they belong to."""

    def __init__(self, h, w, *, need_h: bool, need_w: bool, need_b: bool, accum: str, bias_dtype=None):
        self.w_dtype, self.bias_dtype = w.dtype, bias_dtype
        self.accum = accum
        # contiguous whatever h's strides: scale_ views it
        self.grad_h = torch.empty(h.shape, dtype=h.dtype, device=h.device) if need_h else None
        # the first chunk's product is written, not added (no pass zeroing the [V, H] gradient,
        # none reading those zeros back); a weight no chunk reached is zeroed by result()
        self.grad_w = torch.empty_like(w, dtype=torch.float32 if accum == "fp32" else w.dtype) if need_w else None
        self.w_written = False
        self.grad_b = torch.zeros(w.shape[0], dtype=torch.float32, device=h.device) if need_b else None
        self.carry = torch.zeros_like(self.grad_b) if need_b else None

    def add(self, start: int, stop: int, h_c: torch.Tensor, grad: torch.Tensor, w: torch.Tensor) -> None:
        if self.grad_h is not None:
            grad_times(grad, w, self.grad_h[start:stop])
        if self.grad_w is not None:
            first, self.w_written = not self.w_written, True
            if self.accum == "fp32":
                add_product_fp32(self.grad_w, grad.t(), h_c, first=first)
            elif first:
                torch.mm(grad.t(), h_c, out=self.grad_w)
            else:
                self.grad_w.addmm_(grad.t(), h_c)
        if self.grad_b is not None:
            term = grad.sum(0, dtype=torch.float32) - self.carry
            total = self.grad_b + term
            self.carry = (total - self.grad_b) - term
            self.grad_b = total

    def result(self):
        grad_w, grad_b = self.grad_w, self.grad_b
        if grad_w is not None and not self.w_written:
            grad_w.zero_()  # no rows: the gradient is 0
        if grad_w is not None and grad_w.dtype != self.w_dtype:
            grad_w = grad_w.to(self.w_dtype)
        if grad_b is not None:
            grad_b = grad_b.to(self.bias_dtype)
        self.grad_w = self.grad_b = self.carry = None
        return self.grad_h, grad_w, grad_b


def scale_(g: torch.Tensor, up: torch.Tensor) -> None:
    """g *= up (a scalar tensor) in place, decided on the device: when up is 1 the kernel
    reads one value per row and writes nothing, so the common `loss.backward()` costs no pass
    over the 1-2 GB weight gradient and no host sync.
    The rows handed to scale_rows_ are groups of whole rows of g, as few as still spread over
    the GPU (each row is one program's walk); the interpreter runs programs one by one, so on
    CPU a handful of long rows is fastest."""
    if g.numel() == 0:
        return  # no tokens: an empty gradient, nothing to scale (and no whole rows to group)
    rows = g.shape[0] if g.dim() > 1 else 1
    most = 1024 if g.is_cuda else 4
    groups = max(d for d in range(1, min(rows, most) + 1) if rows % d == 0)
    scale_rows_(g.view(groups, -1), up)


def take_kept_grads(ctx, up: torch.Tensor):
    """The gradients a fused head formed in forward for an upstream of 1 and kept in ctx.grads,
    scaled in place by the upstream scalar `up` and handed out once (ctx lets go of them)."""
    grads, ctx.grads = ctx.grads, None
    for g in grads:
        if g is not None:
            scale_(g, up)
    return grads
