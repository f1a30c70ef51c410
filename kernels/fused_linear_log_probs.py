"""Per-token log-probs and entropy of `hidden @ weight.T (+ bias)` without the full logits.

    import torch
    from ligerbench.kernels.fused_linear_log_probs import fused_linear_log_probs
    h = torch.randn(64, 32, requires_grad=True)          # on a GPU: device="cuda", bf16
    w = torch.randn(500, 32, requires_grad=True)
    y = torch.randint(0, 500, (64,))
    logp, entropy = fused_linear_log_probs(h, w, y, temperature=0.7)
    (logp.sum() + 0.01 * entropy.sum()).backward()

Semantics: kernels/log_probs.py's docstring, with x = hidden @ weight.T + bias.

Design (cost: 8*N*H*V FLOPs forward+backward, 4 matmuls: the upstream gradients are unknown in
forward, so backward recomputes the logits instead of keeping [N, V]):
- forward: the logits are made a piece at a time, cut as backward will cut them (below), into
  one reused float32 buffer: x = h @ W.T (+ b) as a float32 product with float32 accumulation,
  never rounded to 16 bits (a bf16 buffer would round z before the softmax: 4-23% gradient
  error, Liger #1432); log_probs's forward kernel carries each row's online softmax across the
  pieces and gives logp, entropy and the row statistics. Forward keeps only the statistics and
  references to the inputs. Backward recomputes the very same products, so its logits are bit
  for bit those the statistics came from (a product of another shape may round differently:
  z - m for the max is then not 0, 1 - p loses a confident row's digits, V = 1 gets a gradient).
- backward recomputes the logits (the same float32 product) and log_probs's backward kernel
  writes dL/dx: into the float32 buffer itself for float32 inputs, else in the inputs' dtype
  into the lower half of each row's bytes of that buffer (fp32_products.grad_under_logits; the
  kernel puts a barrier before each block's store): the operand dtype the gradient matmuls
  run at on tensor cores; one rounding of the gradient, within the tests' rule of 2x a float32
  yardstick. Two ways to cut the work,
  `backward_split`:
    "rows"  row chunks [c, V]: grad_hidden[c] = dx @ W; grad_weight += dx.T @ h_c into a
            float32 [V, H] accumulator for 16-bit weights (rounded once at the end: 4*V*H
            extra bytes); grad_bias += dx.sum(0) in float32. Each chunk reads and writes the
            whole accumulator: 8*V*H bytes per chunk.
    "vocab" (default) vocabulary slices of every row, [N, cols] (the kernels take the slice's
            first vocabulary id; the row statistics are the whole row's): grad_weight[s] =
            dx_s.T @ h in one product (K = N: float32 accumulation inside the matmul, one
            rounding, no accumulator); grad_hidden += dx_s @ W_s into a float32 [N, H]
            accumulator for 16-bit inputs (4*N*H extra bytes, 8*N*H moved per slice);
            grad_bias[s] = dx_s.sum(0). Cheaper than "rows" in memory and traffic when N < V
            (RL micro-batches against 128-256K vocabularies). Measured on an H100, bf16,
            N=8192, default budget (kernels/NOTES.md): qwen2.5-7b head 71.9 ms and 248 MiB
            beyond the gradients against 227.9 ms and 2080 MiB for "rows".
  The results depend on the cutting only through float32 summation order
  (tests/test_flp_kernel.py).
- memory: `chunk_bytes` bounds the per-piece buffer of float32 logits, 4 bytes a logit: the
  gradient is written into the same storage (16-bit: the lower half of each row's bytes,
  fp32_products.grad_under_logits; before 2a205e2 it had a buffer of its own, 6 bytes a
  logit, and the default budget cut 1.5x as many slices); `chunk_rows` forces the rows per
  chunk of "rows". Forward keeps 12 bytes per row (N_STATS float32).
"""

from __future__ import annotations

from typing import Literal

import torch

from .chunking import DEFAULT_CHUNK_BYTES, chunk_size
from .compile_boundary import opaque
from .fp32_products import SHARED_LOGIT_BYTES, add_product_fp32, grad_times, grad_under_logits, logits_fp32
from .head_checks import check_head_dtypes
from .log_probs import (
    N_STATS,
    log_probs_grad_rows,
    log_probs_rows,
    targets_2d,
    upstream_2d,
    validate_options,
)


def _validate(hidden, weight, bias, target, temperature, softcap, logit_scale) -> torch.Tensor:
    if hidden.dim() not in (2, 3):
        raise ValueError(f"hidden must be 2-D [N, H] or 3-D [B, T, H], got shape {tuple(hidden.shape)}")
    if weight.dim() != 2 or weight.shape[1] != hidden.shape[-1] or weight.shape[0] < 1:
        raise ValueError(
            f"weight must be [V, H] with V >= 1 and H = hidden.shape[-1] = {hidden.shape[-1]}, "
            f"got {tuple(weight.shape)}"
        )
    check_head_dtypes(hidden, weight, bias)
    for name, t in (("weight", weight), ("bias", bias), ("target", target)):
        if t is not None and t.device != hidden.device:
            raise ValueError(f"{name} is on {t.device} but hidden is on {hidden.device}")
    validate_options(temperature, softcap, logit_scale)
    return targets_2d(target, tuple(hidden.shape[:-1]), "hidden")


def plan_rows(n_rows: int, n_classes: int, chunk_bytes: int, chunk_rows: int | None) -> int:
    """Rows per chunk: `chunk_rows` if given, else the most whose float32 logits fit
    `chunk_bytes` (the gradient shares their storage: 4 bytes a logit)."""
    return chunk_size(n_rows, n_classes, SHARED_LOGIT_BYTES, chunk_bytes, chunk_rows)


def plan_cols(n_rows: int, n_classes: int, chunk_bytes: int, chunk_cols: int | None) -> int:
    """Vocabulary columns per slice for backward_split="vocab" (every row at once): `chunk_cols`
    if given, else the most whose float32 [N, cols] logits fit `chunk_bytes` (4 bytes a logit:
    the gradient shares their storage)."""
    return chunk_size(n_classes, n_rows, SHARED_LOGIT_BYTES, chunk_bytes, chunk_cols)


def _spans(n: int, step: int):
    for start in range(0, n, step):
        yield start, min(start + step, n)


def _backward_rows(h, weight, b32, t2, stats, dl, de, opts, chunk, need):
    """Row chunks: grad_hidden[c] = dx @ W; grad_weight += dx.T @ h_c into a float32 [V, H]
    accumulator for 16-bit weights (rounded once at the end); grad_bias += dx.sum(0)."""
    need_h, need_w, need_b = need
    (n_rows, n_hidden), n_classes, dev, dtype = h.shape, weight.shape[0], h.device, h.dtype
    grad_h = torch.empty(n_rows, n_hidden, dtype=dtype, device=dev) if need_h else None
    # the first chunk's product is written, not added: nothing to zero unless no chunk runs
    alloc = torch.empty if n_rows > 0 else torch.zeros
    grad_w = alloc(weight.shape, dtype=torch.float32, device=dev) if need_w else None
    grad_b = torch.zeros(n_classes, dtype=torch.float32, device=dev) if need_b else None
    buf = torch.empty(min(chunk, n_rows) * n_classes, dtype=torch.float32, device=dev)
    for start, stop in _spans(n_rows, chunk):
        x = buf[: (stop - start) * n_classes].view(stop - start, n_classes)
        g = grad_under_logits(x, dtype)  # dL/dx in x's own storage (log_probs walks a row forwards)
        h_c = h[start:stop]
        logits_fp32(h_c, weight, b32, x)
        rows = slice(start, stop)
        log_probs_grad_rows(x, t2[rows], stats[rows], _rows(dl, rows), _rows(de, rows), g, **opts)
        if need_h:
            grad_times(g, weight, grad_h[start:stop])
        if need_w:
            add_product_fp32(grad_w, g.t(), h_c, first=start == 0)
        if need_b:
            grad_b += g.sum(0, dtype=torch.float32)
    del buf  # before the accumulator's conversion: the two never coexist
    return grad_h, grad_w, grad_b


def _backward_vocab(h, weight, b32, t2, stats, dl, de, opts, cols, need, vocab_start=0):
    """Vocabulary slices over every row: grad_weight[s] = dx_s.T @ h in one product (K = N,
    float32 accumulation inside the matmul, one rounding, no accumulator); grad_hidden +=
    dx_s @ W_s into a float32 [N, H] accumulator (grad_h comes back float32, whatever the
    inputs' dtype); grad_bias[s] = dx_s.sum(0). vocab_start: the vocabulary id of weight's
    row 0 (a vocab-parallel shard)."""
    need_h, need_w, need_b = need
    (n_rows, n_hidden), n_classes, dev, dtype = h.shape, weight.shape[0], h.device, h.dtype
    grad_h = torch.empty(n_rows, n_hidden, dtype=torch.float32, device=dev) if need_h else None  # slice 0 writes it
    grad_w = torch.empty(weight.shape, dtype=dtype, device=dev) if need_w else None
    grad_b = torch.empty(n_classes, dtype=torch.float32, device=dev) if need_b else None
    buf = torch.empty(n_rows * min(cols, n_classes), dtype=torch.float32, device=dev)
    for c0, c1 in _spans(n_classes, cols):
        x = buf[: n_rows * (c1 - c0)].view(n_rows, c1 - c0)
        g = grad_under_logits(x, dtype)  # dL/dx in x's own storage (log_probs walks a row forwards)
        w_s = weight[c0:c1]
        logits_fp32(h, w_s, None if b32 is None else b32[c0:c1], x)
        log_probs_grad_rows(x, t2, stats, dl, de, g, **opts, col_start=vocab_start + c0)
        if need_w:
            torch.mm(g.t(), h, out=grad_w[c0:c1])
        if need_h:
            add_product_fp32(grad_h, g, w_s, first=c0 == 0)
        if need_b:
            grad_b[c0:c1] = g.sum(0, dtype=torch.float32)
    del buf
    return grad_h, grad_w, grad_b


def _rows(t: torch.Tensor | None, rows: slice) -> torch.Tensor | None:
    return None if t is None else t[rows]


BackwardSplit = Literal["rows", "vocab"]


class FusedLinearLogProbsFunction(torch.autograd.Function):
    """autograd wrapper; forward(...) returns (logp, entropy), both differentiable."""

    # apply's arguments by position (autograd.Function takes no keywords): this op's options, its own
    @staticmethod
    def forward(ctx, hidden, weight, bias, target, temperature, softcap, logit_scale, ignore_index, chunk_bytes,
                chunk_rows, backward_split):  # fmt: skip
        t2 = _validate(hidden, weight, bias, target, temperature, softcap, logit_scale)
        if backward_split not in ("rows", "vocab"):
            raise ValueError(f"backward_split must be 'rows' or 'vocab', got {backward_split!r}")
        if (chunk_rows is not None and chunk_rows < 1) or chunk_bytes < 1:
            raise ValueError(f"chunk_rows must be None or >= 1 and chunk_bytes >= 1, got {chunk_rows}, {chunk_bytes}")
        h = hidden.reshape(-1, hidden.shape[-1])  # a view where the strides allow; else [N, H] copied
        n_rows, n_classes = h.shape[0], weight.shape[0]
        opts = dict(temperature=temperature, softcap=softcap, logit_scale=logit_scale, ignore_index=ignore_index)
        b32 = None if bias is None else bias.float()
        dev = hidden.device
        logp = torch.empty(n_rows, t2.shape[1], dtype=torch.float32, device=dev)
        entropy = torch.empty(n_rows, dtype=torch.float32, device=dev)
        stats = torch.empty(n_rows, N_STATS, dtype=torch.float32, device=dev)
        out = (logp, entropy, stats)
        # Forward cuts the work as backward will: backward recomputes the very same products, so
        # its logits are bit for bit the ones the statistics came from (a product of another
        # shape may round differently: then z - m for the max is not 0 and 1 - p loses the
        # digits of a confident row, and a V = 1 row gets a nonzero gradient).
        if backward_split == "rows":
            span = plan_rows(n_rows, n_classes, chunk_bytes, chunk_rows)
            buf = torch.empty(min(span, n_rows) * n_classes, dtype=torch.float32, device=dev)
            for start, stop in _spans(n_rows, span):
                x = buf[: (stop - start) * n_classes].view(stop - start, n_classes)
                logits_fp32(h[start:stop], weight, b32, x)
                rows = slice(start, stop)
                log_probs_rows(x, t2[rows], **opts, out=(logp[rows], entropy[rows], stats[rows]))
        else:
            span = plan_cols(n_rows, n_classes, chunk_bytes, None)
            buf = torch.empty(n_rows * min(span, n_classes), dtype=torch.float32, device=dev)
            zt = torch.full(t2.shape, float("nan"), dtype=torch.float32, device=dev)
            for c0, c1 in _spans(n_classes, span):
                x = buf[: n_rows * (c1 - c0)].view(n_rows, c1 - c0)
                logits_fp32(h, weight[c0:c1], None if b32 is None else b32[c0:c1], x)
                log_probs_rows(x, t2, **opts, out=out, slices=(c0, c0 == 0, c1 == n_classes, zt))
        del buf
        ctx.save_for_backward(hidden, weight, bias)  # the caller's tensors, no copies
        ctx.t2, ctx.stats, ctx.opts = t2, stats, opts
        ctx.split, ctx.span = backward_split, span
        # an output that gets no gradient arrives as None: its term is skipped, not added as zeros
        ctx.set_materialize_grads(False)
        return logp.view(target.shape), entropy.view(hidden.shape[:-1])

    @staticmethod
    def backward(ctx, dlogp, dentropy):
        hidden, weight, bias = ctx.saved_tensors
        need = tuple(ctx.needs_input_grad[:3])
        none = (None,) * 11
        if not any(need) or (dlogp is None and dentropy is None):
            return none
        h = hidden.reshape(-1, hidden.shape[-1])
        dl, de = upstream_2d(dlogp, dentropy, h.shape[0], ctx.t2.shape[1])
        b32 = None if bias is None else bias.float()
        run = _backward_rows if ctx.split == "rows" else _backward_vocab
        grad_h, grad_w, grad_b = run(h, weight, b32, ctx.t2, ctx.stats, dl, de, ctx.opts, ctx.span, need)
        if grad_h is not None:
            grad_h = grad_h.to(hidden.dtype).view(hidden.shape)
        if grad_w is not None:
            grad_w = grad_w.to(weight.dtype)
        if grad_b is not None:
            grad_b = grad_b.to(bias.dtype)
        return (grad_h, grad_w, grad_b) + none[3:]


@opaque  # torch.compile runs it as it is, outside the graph: kernels/compile_boundary.py
def fused_linear_log_probs(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    target: torch.Tensor,
    *,
    bias: torch.Tensor | None = None,
    temperature: float = 1.0,
    softcap: float | None = None,
    logit_scale: float = 1.0,
    ignore_index: int = -100,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    chunk_rows: int | None = None,
    backward_split: BackwardSplit = "vocab",
) -> tuple[torch.Tensor, torch.Tensor]:
    """(logp, entropy) of `target` under softmax(z), z = softcap-capped (logit_scale * (hidden @
    weight.T + bias)) / temperature: kernels/log_probs.py's semantics, without storing [N, V].

    hidden [N, H] or [B, T, H] (any strides: column-major, a logits_to_keep slice); weight
    [V, H]; bias [V] or None; all three in one dtype (float32, bfloat16 or float16) on one
    device. target [N] / [B, T] (one token per row) or [N, K] / [B, T, K] (K per row).
    Returns float32 logp (target's shape) and float32 entropy (the row shape); gradients flow
    into hidden, weight and bias through either or both (each in its own dtype).
    chunk_bytes: the budget for the per-piece buffers (default DEFAULT_CHUNK_BYTES, 192 MiB:
    float32 logits, their gradient in the same storage).
    backward_split: how the logits are cut, forward and backward alike: "vocab" (default:
    vocabulary slices of every row, sized by chunk_bytes; a float32 [N, H] accumulator for
    16-bit hidden) or "rows" (row chunks, sized by chunk_bytes or forced by chunk_rows; a
    float32 [V, H] accumulator for 16-bit weights). See the module docstring. The results do
    not depend on either choice beyond float32 summation order."""
    return FusedLinearLogProbsFunction.apply(
        hidden, weight, bias, target, temperature, softcap, logit_scale, ignore_index, chunk_bytes, chunk_rows,
        backward_split,
    )  # fmt: skip
