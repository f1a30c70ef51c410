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

Design. Two ways to form the gradients, `gradients`:
- "forward" (cost 2*N*V*(Hs + Ht) + 4*N*Hs*V FLOPs: each head's logits once, the student's
  two gradient products once; the 8*N*H*V floor of docs/performance.md for equal heads). For
  the scalar reductions the upstream gradient is one number, so forward forms the gradients for
  an upstream of 1 and backward multiplies them by the real one (kernels/chunk_grads.scale_:
  decided on the device, no pass at all when it is 1, no host sync), as flce does. Rows go in
  groups of R rows, each in sub-chunks of r rows: per sub-chunk both heads' logits as float32
  products into two reused float32 [r, V] buffers (never rounded to 16 bits), distill.py's
  forward kernel gives each row's divergence and statistics, its backward kernel writes the
  student's dL/dx for the group into a [R, V] buffer in the inputs' dtype (one rounding before
  the 16-bit products); per group, grad_hidden[group] = dx @ W (K = V, one rounding) and
  grad_weight += dx.T @ h[group] (kernels/chunk_grads.ChunkGrads: in the weight's dtype, the
  running sum rounded once a group, or a float32 accumulator when the budget holds it: flce's
  `plan`). The sub-chunk keeps the float32 logits small and the group keeps the weight
  gradient's passes few (each group reads and writes all of grad_weight: at N=8192, R=256 and
  a Qwen2.5-7B head, 32 passes of 2 x 1.09 GB).
- "backward" (cost 12*N*H*V for equal heads: the upstream is unknown in forward, so backward
  recomputes both heads' logits, as kernels/fused_linear_log_probs.py does). Forward: row
  chunks, both heads' float32 logits, the divergences and statistics ([N, 6] float64); backward:
  vocabulary slices over every row (as flp's "vocab" split): both heads' logits for columns
  [c0, c1), the student's dL/dx for them, grad_weight[c0:c1] = dx.T @ hidden in one product
  (K = N, no accumulator), grad_hidden += dx @ weight[c0:c1] into a float32 [N, H] accumulator.
- "auto" (default): "forward" for sum, mean and batchmean when the student needs a gradient and
  the weight gradient's sum stays within the rule flce verified (at most AUTO_DTYPE_MAX_CHUNKS
  groups summed in the weight's dtype, or a float32 accumulator the budget holds: 64 roundings
  of a bf16 running sum exceed it, kernels/NOTES.md); else "backward" (reduction "none": each
  row's upstream is only known in backward, and grad_weight is a sum over rows).
- memory: `chunk_bytes` bounds the working buffers beyond the gradients: "forward" 8 bytes a
  logit of the sub-chunk (r = SUB_ROWS, or fewer when the budget is small) plus the dtype's
  bytes a logit of the group (R: the most the rest of the budget holds); "backward" 8 bytes a
  logit forward and 8, or 10 for 16-bit inputs, backward, plus its float32 [N, H] accumulator.
  Default 260 MiB: at N=8192 and a Qwen2.5-7B head for both (H=3584, V=152064, bf16) r=128,
  R=384, 22 groups (224 MiB gave R=256, 32 groups: 10 more passes over grad_weight); extra
  memory the gradients (1096 MiB) + 260 MiB = 1356 MiB, under the gradients + 25% (1370 MiB).
  At a Llama-3-8B head r=128, R=512: 1317 MiB against 1332. `chunk_rows` forces r = R (tests
  use it for many and partial groups).
- what the budget costs (N=8192, Qwen2.5-7B heads for both, bf16, JSD, mean; time of forward +
  backward, extra memory with the gradients; flkd_rows_probe.py,
  results/README.md#where-the-probes-went): H100: 224 MiB 125.0 ms / 1319 MiB, 260 MiB 113.9 / 1356,
  280 MiB 121.3 / 1375; chunk_rows=256 100.8 / 1468, 384 85.4 / 1653; "backward" 124.3 / 1468;
  Liger's fused linear JSD (bf16 logits) 87.1 / 3465 in the same run. H200 (224 MiB, 2026-11-26):
  100.3 ms, 384 rows 80.4, Liger 83.3.
  Where the time goes (H100 profile at 224 MiB, heads_profile.py,
  results/README.md#where-the-probes-went): the 128 logits products 54 ms (43%), the 32 grad_weight
  passes 36 ms, the grad_hidden products 13 ms, the divergence kernels 21 ms (with libdevice's exp,
  since reverted). A 128-row product reads the whole weight (1.09 GB) for 2 * 128 FLOPs a byte,
  under the GPU's balance (~200 on an H200, ~300 on an H100): bound by memory. A 256-row product for
  both heads needs 8 bytes a logit x 256 rows = 297 MiB, and the memory target leaves 274 MiB: so
  within the target the products stay bound by memory, and a larger budget (`chunk_rows=384`: 1653
  MiB) buys Liger's time at half Liger's memory.
  Products of different row counts for the two heads (the student's at R rows, the teacher's at
  r) were tried and dropped: a self-distilled teacher's logits then differ from the student's in
  the last bit (a product's rounding depends on its shape), and TVD's gradient at p == q is 0
  only when they do not (verify's `self` cases failed on CPU).
"""

from __future__ import annotations

import torch

from .chunk_grads import ChunkGrads, take_kept_grads
from .chunking import chunk_size
from .compile_boundary import opaque
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
from .fused_linear_cross_entropy import AUTO_DTYPE_MAX_CHUNKS, plan
from .fused_linear_log_probs import _spans

DEFAULT_CHUNK_BYTES = 260 * 2**20  # the module docstring: under the memory target at Qwen2.5-7B and Llama-3-8B heads
SUB_ROWS = 128  # "forward": rows of a float32 logits sub-chunk when the budget holds them
GRADIENTS = ("auto", "forward", "backward")


def _validate(hs, ws, ht, wt, labels, divergence, beta, temperature, reduction, gradients, chunk_rows):
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
    if gradients not in GRADIENTS:
        raise ValueError(f"gradients must be one of {GRADIENTS}, got {gradients!r}")
    if gradients == "forward" and reduction == "none":
        raise ValueError("gradients='forward' needs a scalar reduction: with 'none' each row's upstream is "
                         "only known in backward")  # fmt: skip
    if chunk_rows is not None and chunk_rows < 1:
        raise ValueError(f"chunk_rows must be >= 1, got {chunk_rows}")
    return labels_1d(labels, tuple(hs.shape[:-1]), hs.device)


def plan_forward(n_rows, n_classes, n_hidden, dtype, chunk_bytes, chunk_rows) -> tuple[int, int, str]:
    """(r, R, accumulation) of the "forward" path (module docstring): float32 logits sub-chunks
    of r rows (8 bytes a logit, both heads), groups of R rows whose gradient rows (the dtype's
    bytes a logit) are summed into grad_weight at once, in the weight's dtype or float32
    (fused_linear_cross_entropy.plan's rule, on what the sub-chunk leaves of the budget)."""
    grad_bytes = torch.empty((), dtype=dtype).element_size()
    if chunk_rows is not None:
        rows = min(chunk_rows, max(n_rows, 1))
        return rows, rows, plan(n_rows, n_classes, n_hidden, grad_bytes, chunk_bytes, rows, "auto")[1]
    sub = min(chunk_size(n_rows, n_classes, 8 + grad_bytes, chunk_bytes, None), SUB_ROWS)
    rest = max(chunk_bytes - 8 * n_classes * sub, 1)
    group, accum = plan(n_rows, n_classes, n_hidden, grad_bytes, rest, None, "auto")
    return sub, max(group, sub), accum


def _forward_gradients(gradients, reduction, need_grad, n_rows, group, accum) -> bool:
    """Whether this call forms its gradients in forward (module docstring, "auto")."""
    if gradients != "auto":
        return gradients == "forward" and need_grad
    few = -(-n_rows // max(group, 1)) <= AUTO_DTYPE_MAX_CHUNKS
    return need_grad and reduction != "none" and (accum == "fp32" or few)


class FusedLinearDistillFunction(torch.autograd.Function):
    """autograd wrapper; forward(...) returns the reduced loss (float32)."""

    @staticmethod
    def forward(ctx, hs, ws, ht, wt, labels, divergence, beta, temperature, ignore_index, reduction, chunk_bytes,
                gradients, chunk_rows):  # fmt: skip
        lbl = _validate(hs, ws, ht, wt, labels, divergence, beta, temperature, reduction, gradients, chunk_rows)
        h = hs.reshape(-1, hs.shape[-1])  # a view where the strides allow
        g = ht.detach().reshape(-1, ht.shape[-1])
        n_rows, n_classes, dev = h.shape[0], ws.shape[0], hs.device
        opts = dict(divergence=divergence, beta=beta, temperature=temperature, ignore_index=ignore_index)
        rows = torch.empty(n_rows, dtype=torch.float32, device=dev)
        stats = torch.empty(n_rows, N_STATS, dtype=torch.float64, device=dev)
        counted = counted_rows(lbl, ignore_index, n_rows, dev)
        need_h, need_w = ctx.needs_input_grad[:2]
        sub, group, accum = plan_forward(n_rows, n_classes, h.shape[1], h.dtype, chunk_bytes, chunk_rows)
        ctx.done = False
        ctx.shape = hs.shape
        if _forward_gradients(gradients, reduction, need_h or need_w, n_rows, group, accum):
            grads = ChunkGrads(h, ws, need_h=need_h, need_w=need_w, need_b=False, accum=accum)
            scale = row_scale(torch.ones((), dtype=torch.float32, device=dev), counted, reduction)
            _forward_pass(h, ws.detach(), g, wt.detach(), lbl, opts, rows, stats, sub, group, scale, grads)
            ctx.grads = grads.result()
            ctx.kd = None
        else:
            span = chunk_size(n_rows, n_classes, 8, chunk_bytes, chunk_rows)  # two float32 logits a column
            _forward_pass(h, ws.detach(), g, wt.detach(), lbl, opts, rows, stats, span, span, None, None)
            ctx.save_for_backward(hs, ws, ht, wt)  # the caller's tensors, no copies
            ctx.kd = (lbl, stats, counted, opts, reduction, chunk_bytes)
        return reduce_rows(rows, counted, reduction, hs.shape[:-1])

    @staticmethod
    def backward(ctx, dloss):
        none = (None,) * 13
        if ctx.done:
            raise RuntimeError("fused_linear_distill backward ran twice on one forward: the gradients are formed "
                               "in forward and scaled in place, so they can be used once")  # fmt: skip
        ctx.done = True
        if ctx.kd is None:
            grad_h, grad_w, _ = take_kept_grads(ctx, dloss)
            grad_h = None if grad_h is None else grad_h.view(ctx.shape)
            return (grad_h, grad_w) + none[2:]
        need_h, need_w = ctx.needs_input_grad[:2]
        if not (need_h or need_w):
            return none
        return _backward_pass(ctx, dloss, need_h, need_w) + none[2:]


def _forward_pass(h, ws, g, wt, lbl, opts, rows, stats, sub, group, scale, grads) -> None:
    """Row groups of `group` rows, each in sub-chunks of `sub`: both heads' float32 logits, each
    row's divergence and statistics, and with `grads` the student's dL/dx for an upstream of
    `scale` summed into the head's gradients a group at a time."""
    n_rows, n_classes = h.shape[0], ws.shape[0]
    xs_buf = torch.empty(min(sub, n_rows) * n_classes, dtype=torch.float32, device=h.device)
    xt_buf = torch.empty_like(xs_buf)
    dx_buf = None if grads is None else torch.empty(min(group, n_rows) * n_classes, dtype=h.dtype, device=h.device)
    with torch.no_grad():
        for g0, g1 in _spans(n_rows, group):
            dx = None if dx_buf is None else dx_buf[: (g1 - g0) * n_classes].view(g1 - g0, n_classes)
            for start in range(g0, g1, sub):
                stop = min(start + sub, g1)
                xs = xs_buf[: (stop - start) * n_classes].view(stop - start, n_classes)
                xt = xt_buf[: xs.numel()].view(xs.shape)
                logits_fp32(h[start:stop], ws, None, xs)
                logits_fp32(g[start:stop], wt, None, xt)
                part = slice(start, stop)
                lbl_c = None if lbl is None else lbl[part]
                distill_rows(xs, xt, None, lbl_c, **opts, out=(rows[part], stats[part]), sub_chunks=True)
                if dx is not None:
                    distill_grad_rows(xs, xt, None, lbl_c, stats[part], scale[part], dx[start - g0 : stop - g0],
                                      None, **opts)  # fmt: skip
            if grads is not None:
                grads.add(g0, g1, h[g0:g1], dx, ws)


def _backward_pass(ctx, dloss, need_h, need_w):
    """ "backward": vocabulary slices over every row, both heads' logits recomputed."""
    hs, ws, ht, wt = ctx.saved_tensors
    lbl, stats, counted, opts, reduction, chunk_bytes = ctx.kd
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
    return grad_h, grad_w


@opaque  # torch.compile runs it as it is, outside the graph: kernels/compile_boundary.py
# the public signature: each op names its options itself, keyword for keyword where they mean the same
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
    gradients: str = "auto",
    chunk_rows: int | None = None,
) -> torch.Tensor:
    """kernels/distill.py's divergence between softmax(student_hidden @ student_weight.T / T)
    and the teacher's head at T, without storing [N, V]: the module docstring.

    student_hidden [N, Hs] or [B, T, Hs] (any strides), student_weight [V, Hs], one dtype;
    teacher_hidden [.., Ht] (the student's rows), teacher_weight [V, Ht], one dtype (may differ
    from the student's). Gradients flow to the student's hidden and weight only. divergence,
    beta, temperature, ignore_index and reduction as in distill_loss; chunk_bytes bounds the
    working buffers (default 260 MiB); gradients ("auto", "forward", "backward") chooses where
    the gradients are formed and chunk_rows forces the rows of a chunk (module docstring)."""
    args = (divergence, beta, temperature, ignore_index, reduction, chunk_bytes, gradients, chunk_rows)
    heads = (student_hidden, student_weight, teacher_hidden, teacher_weight)
    return FusedLinearDistillFunction.apply(*heads, labels, *args)
