"""Distillation divergences from the student's and the teacher's lm_heads, without either's
full logits (`flkd`).

    import torch
    from ligerbench.kernels.fused_linear_distill import fused_linear_distill
    hs = torch.randn(64, 32, requires_grad=True)          # on a GPU: device="cuda", bf16
    ws = torch.randn(500, 32, requires_grad=True)
    ht, wt = torch.randn(64, 48), torch.randn(500, 48)     # a wider teacher
    loss = fused_linear_distill(hs, ws, ht, wt, divergence="jsd", beta=0.5, temperature=2.0)
    loss.backward()

Semantics: kernels/distill.py's docstring, with student logits hidden @ weight.T and teacher
logits teacher_hidden @ teacher_weight.T (the vocabularies must match; the hidden sizes may not).
The teacher is a constant: it never gets a gradient. No bias, softcap or logit scale.

Design (cost: 12*N*H*V FLOPs forward+backward for H = both hidden sizes: the upstream gradient
is unknown in forward, so backward recomputes both heads' logits, as kernels/fused_linear_log_probs.py
does):
- forward, row chunks (whole rows: the divergence's second pass needs both normalisers): both
  heads' logits as float32 products into two reused float32 buffers (never rounded to 16 bits),
  then kernels/distill.py's forward kernel gives each row's divergence and statistics. Forward
  keeps the statistics ([N, 6] float64) and references to the inputs.
- backward, vocabulary slices over every row (as flp's "vocab" split): both heads' logits for
  columns [c0, c1), distill.py's backward kernel writes the student's dL/dx for them (its own
  float32 buffer for float32 inputs, else a buffer in the inputs' dtype: one rounding before the
  16-bit products), then grad_weight[c0:c1] = dx.T @ hidden in one product (K = N, no
  accumulator) and grad_hidden += dx @ weight[c0:c1] into a float32 [N, H] accumulator.
- memory: `chunk_bytes` bounds each piece's buffers (8 bytes a logit forward; 8, or 10 for
  16-bit inputs, backward). Default 128 MiB: at N=8192 and a Qwen2.5-7B head (H=3584,
  V=152064, bf16) the extra memory is the gradients (1.09 GB + 58 MB), the float32 hidden
  accumulator (117 MB) and the pieces: 1.40 GB, under the gradients + 25% (1.43 GB).
"""

from __future__ import annotations

import torch

from .chunking import chunk_size
from .distill import (
    N_STATS,
    counted_rows,
    distill_grad_rows,
    distill_rows,
    labels_1d,
    reduce_rows,
    row_scale,
    validate_options,
)
from .fp32_products import add_product_fp32, logits_fp32
from .fused_linear_log_probs import _spans

DEFAULT_CHUNK_BYTES = 128 * 2**20


def _validate(hs, ws, ht, wt, labels, divergence, beta, temperature, reduction):
    for name, h, w in (("student", hs, ws), ("teacher", ht, wt)):
        if h.dim() not in (2, 3):
            raise ValueError(f"{name} hidden must be [N, H] or [B, T, H], got shape {tuple(h.shape)}")
        if w.dim() != 2 or w.shape[1] != h.shape[-1] or w.shape[0] < 1:
            raise ValueError(f"{name} weight must be [V, H] with H = {h.shape[-1]}, got {tuple(w.shape)}")
        if h.dtype not in (torch.float32, torch.bfloat16, torch.float16) or w.dtype != h.dtype:
            raise TypeError(f"{name} hidden and weight must share one float dtype, got {h.dtype} and {w.dtype}")
        if h.device != hs.device or w.device != hs.device:
            raise ValueError(f"the {name}'s tensors must be on {hs.device}")
    if tuple(ht.shape[:-1]) != tuple(hs.shape[:-1]):
        raise ValueError(f"teacher hidden rows {tuple(ht.shape[:-1])} must match the student's {tuple(hs.shape[:-1])}")
    if wt.shape[0] != ws.shape[0]:
        raise ValueError(f"the vocabularies differ: student {ws.shape[0]}, teacher {wt.shape[0]}")
    validate_options(divergence, beta, temperature, reduction, topk=False)
    return labels_1d(labels, tuple(hs.shape[:-1]), hs.device)


class FusedLinearDistillFunction(torch.autograd.Function):
    """autograd wrapper; forward(...) returns the reduced loss (float32)."""

    @staticmethod
    def forward(ctx, hs, ws, ht, wt, labels, divergence, beta, temperature, ignore_index, reduction, chunk_bytes):
        lbl = _validate(hs, ws, ht, wt, labels, divergence, beta, temperature, reduction)
        h = hs.reshape(-1, hs.shape[-1])  # a view where the strides allow
        g = ht.detach().reshape(-1, ht.shape[-1])
        n_rows, n_classes, dev = h.shape[0], ws.shape[0], hs.device
        opts = dict(divergence=divergence, beta=beta, temperature=temperature, ignore_index=ignore_index)
        rows = torch.empty(n_rows, dtype=torch.float32, device=dev)
        stats = torch.empty(n_rows, N_STATS, dtype=torch.float64, device=dev)
        span = chunk_size(n_rows, n_classes, 8, chunk_bytes, None)  # two float32 logits a column
        xs_buf = torch.empty(min(span, n_rows) * n_classes, dtype=torch.float32, device=dev)
        xt_buf = torch.empty_like(xs_buf)
        with torch.no_grad():
            for start, stop in _spans(n_rows, span):
                xs = xs_buf[: (stop - start) * n_classes].view(stop - start, n_classes)
                xt = xt_buf[: xs.numel()].view(xs.shape)
                logits_fp32(h[start:stop], ws.detach(), None, xs)
                logits_fp32(g[start:stop], wt.detach(), None, xt)
                part = slice(start, stop)
                distill_rows(xs, xt, None, None if lbl is None else lbl[part], **opts, out=(rows[part], stats[part]))
        del xs_buf, xt_buf
        counted = counted_rows(lbl, ignore_index, n_rows, dev)
        ctx.save_for_backward(hs, ws, ht, wt)  # the caller's tensors, no copies
        ctx.kd = (lbl, stats, counted, opts, reduction, chunk_bytes)
        return reduce_rows(rows, counted, reduction, hs.shape[:-1])

    @staticmethod
    def backward(ctx, dloss):
        hs, ws, ht, wt = ctx.saved_tensors
        lbl, stats, counted, opts, reduction, chunk_bytes = ctx.kd
        need_h, need_w = ctx.needs_input_grad[:2]
        none = (None,) * 11
        if not (need_h or need_w):
            return none
        h = hs.reshape(-1, hs.shape[-1])
        g = ht.detach().reshape(-1, ht.shape[-1])
        (n_rows, n_hidden), n_classes, dev, dtype = h.shape, ws.shape[0], h.device, h.dtype
        scale = row_scale(dloss, counted, reduction)
        wide = dtype == torch.float32
        cols = chunk_size(n_classes, n_rows, 8 if wide else 10, chunk_bytes, None)
        width = min(cols, n_classes)
        xs_buf = torch.empty(n_rows * width, dtype=torch.float32, device=dev)
        xt_buf = torch.empty_like(xs_buf)
        g_buf = xs_buf if wide else torch.empty(n_rows * width, dtype=dtype, device=dev)  # dx over xs: read first
        grad_h = torch.zeros(n_rows, n_hidden, dtype=torch.float32, device=dev) if need_h else None
        grad_w = torch.empty(ws.shape, dtype=dtype, device=dev) if need_w else None
        for c0, c1 in _spans(n_classes, cols):
            xs = xs_buf[: n_rows * (c1 - c0)].view(n_rows, c1 - c0)
            xt = xt_buf[: xs.numel()].view(xs.shape)
            dx = g_buf[: xs.numel()].view(xs.shape)
            w_s = ws.detach()[c0:c1]
            logits_fp32(h, w_s, None, xs)
            logits_fp32(g, wt.detach()[c0:c1], None, xt)
            distill_grad_rows(xs, xt, None, lbl, stats, scale, dx, None, **opts, col_start=c0)
            if need_w:
                torch.mm(dx.t(), h, out=grad_w[c0:c1])
            if need_h:
                add_product_fp32(grad_h, dx, w_s)
        del xs_buf, xt_buf, g_buf
        if grad_h is not None:
            grad_h = grad_h.to(dtype).view(hs.shape)
        return (grad_h, grad_w) + none[2:]


# torch.compile around a caller runs this op as it is, outside the graph (a graph break): dynamo
# cannot trace Triton's interpreter (CPU), and the op's own launches are what we verified.
@torch.compiler.disable
def fused_linear_distill(
    student_hidden: torch.Tensor,
    student_weight: torch.Tensor,
    teacher_hidden: torch.Tensor,
    teacher_weight: torch.Tensor,
    labels: torch.Tensor | None = None,
    *,
    divergence: str = "forward_kl",
    beta: float = 0.5,
    temperature: float = 1.0,
    ignore_index: int = -100,
    reduction: str = "mean",
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
) -> torch.Tensor:
    """kernels/distill.py's divergence between softmax(student_hidden @ student_weight.T / T)
    and the teacher's head at T, without storing [N, V]: the module docstring.

    student_hidden [N, Hs] or [B, T, Hs] (any strides), student_weight [V, Hs], one dtype;
    teacher_hidden [.., Ht] (the student's rows), teacher_weight [V, Ht], one dtype (may differ
    from the student's). Gradients flow to the student's hidden and weight only. divergence,
    beta, temperature, ignore_index and reduction as in distill_loss; chunk_bytes bounds the
    per-piece buffers (default 128 MiB)."""
    args = (divergence, beta, temperature, ignore_index, reduction, chunk_bytes)
    heads = (student_hidden, student_weight, teacher_hidden, teacher_weight)
    return FusedLinearDistillFunction.apply(*heads, labels, *args)
