"""Fused linear + cross entropy: the loss of `hidden @ weight.T (+ bias)` without the full logits.

    import torch
    from ligerbench.kernels.fused_linear_cross_entropy import fused_linear_cross_entropy
    h = torch.randn(64, 32, requires_grad=True)          # on a GPU: device="cuda", bf16
    w = torch.randn(500, 32, requires_grad=True)
    y = torch.randint(0, 500, (64,))
    fused_linear_cross_entropy(h, w, y).backward()

Design (the cost model is in docs/performance.md: 6*N*H*V FLOPs is the floor; a design that
recomputes the logits in backward pays 8*N*H*V):
- tokens are cut into chunks; one [chunk, V] float32 logits buffer is allocated once and
  reused. Per chunk: logits = h_c @ W.T (+ b) by cuBLAS, accumulated AND stored in float32
  (kernels/fp32_products.py: a logit rounded to bf16 moved a confident row's loss by 4% against
  0.3% for a careful computation: docs/bugs.md, "What the careful yardstick found in our own
  kernels"); our cross-entropy kernel reads the logits and writes d loss / d logits into the same
  storage (for 16-bit inputs, in their dtype, into the upper half of each row's bytes:
  fp32_products.grad_over_logits; a chunk costs 4 bytes per logit, not 6); then dh_c = dlogits @ W
  and dW += dlogits.T @ h_c (cuBLAS), db += column sums. All of it happens in forward, so backward
  only rescales the gradients by the upstream scalar (and skips even that when it is 1: the
  test is made on the device, no host sync).
- reduction="none": each row's upstream gradient is only known in backward, and dW is a sum
  over rows, so it cannot be rescaled afterwards. Forward then computes the loss only and
  backward recomputes each chunk with token weights multiplied by the upstream gradient: the
  per-row scaling is exact (one rounding, inside the kernel), at the price of 8*N*H*V FLOPs.
- memory budget, `chunk_bytes` (default: GRADIENT_SHARE of the gradients' bytes): the working
  memory allowed beyond the gradients themselves. The logits chunk gets the most tokens whose logits fit it,
  rounded down to a multiple of 64 when above 64 (cuBLAS tile friendly): a budget, not a
  formula in V/H, so large vocabularies do not get tiny chunks. `chunk_tokens` overrides it
  (tests use it to force many and partial chunks).
- gradient of the weight, `grad_weight_accum`:
    "auto"  (default) "dtype", except "fp32" when there are more than AUTO_DTYPE_MAX_CHUNKS
            chunks AND the fp32 accumulator (4*V*H bytes) takes at most half the budget (the
            logits chunk then gets the rest); with `chunk_tokens` given, the chunk count alone
            decides. The running sum's error grows as sqrt(chunks): on an H100 at N=4096,
            H=1024, V=32000, bf16, 820 chunks of 5 tokens put "dtype" at 1.08-1.14x the verify
            limit while 11 and 22 chunks stay within it. A smaller budget never selects the
            accumulator at a large head (before: a 64 MiB budget at the Gemma-2 head gave 64
            chunks, an fp32 accumulator, 2314 MiB extra and 217.7 ms).
    "dtype" accumulate into the weight-dtype gradient itself (addmm with beta=1:
            each chunk's product is accumulated in fp32 inside cuBLAS and added to the running
            sum in fp32, which is then rounded once per chunk: about sqrt(chunks/2) roundings
            instead of one). No extra memory. Not as exact as "fp32": held to the tolerance
            rule (2x eager's error) up to AUTO_DTYPE_MAX_CHUNKS chunks, and verified at that
            count; past it the error grows as sqrt(chunks) (1.05x the limit at 72 chunks of a
            72-token bf16 case, 1.08-1.14x at 820 chunks), which is why "auto" leaves it.
    "fp32"  an fp32 [V, H] accumulator, rounded to the weight dtype once at the end. Exact, but
            it costs 4*V*H bytes (2 GiB at the Llama-3-8B head) and the fp32 adds are slower.
            Asked for explicitly, the accumulator comes on top of the budget.
  Measured on an H100 at N=8192, H=4096, V=128256, bf16, 192 MiB chunks (kernels/NOTES.md):
  "dtype" 42.5 ms and 1254 MiB extra, "fp32" 50.4 ms and 3258 MiB.
  The bias gradient always accumulates in fp32 with Kahan compensation (it is only V floats).

- `store`: how a chunk's logits are kept. "float32" is the design above (4 bytes a logit).
  "shifted16" (kernels/shifted_logits.py) keeps 2: each float32 vocabulary slice of the chunk's
  logits is reduced to float32 statistics per block of columns (max, sum of exponentials, the
  target's logit) and stored as float16 values shifted by their block's max; the loss comes
  from the statistics (as exact as the float32 chunk's), the gradient from the shifted values
  (their float16 rounding is at most |y| * 2**-11 relative on a probability, under the bfloat16
  gradient's own 2**-9), written over them in bf16. More tokens a chunk for the same budget
  (576 against 384 at Llama-3-8B, 512 against 320 at Qwen2.5-7B: the float32 slice takes its
  share), so fewer passes of the weight-gradient accumulation (H100, kernels/NOTES.md, "the chunk in
  2 bytes a logit": 46.1 ms against 52.1, and 52.1 against 57.0-60.3). Only for bfloat16
  inputs without label smoothing, softcap or z-loss; "auto" (default) takes it there, where it
  buys a larger chunk than float32 (not at vocabularies of at most two slices, Mistral's).
- `split`: "tokens" is the design above. "vocab" computes each row's log-probability of its
  target with the fused linear log-probs op (kernels/fused_linear_log_probs.py: the logits cut
  into vocabulary slices, recomputed in backward, the weight gradient of a slice formed once
  with K = N; 8*N*H*V FLOPs) and the loss from it in PyTorch: -logp * class weight * token
  weight, reduced. It has no label smoothing and no z-loss. "auto" (default) takes "vocab" when
  those are off and the budget leaves fewer than VOCAB_SPLIT_BELOW tokens a chunk (of the store
  "auto" chose) over more than one chunk: there the weight-gradient accumulation costs more than
  the recomputed logits (the Gemma-2 head, V=256000: 192 tokens a float32 chunk, 320 a 2-byte
  one, both slower than the vocabulary split: kernels/NOTES.md, "Splitting by vocabulary" and
  "The chunk in 2 bytes a logit").

Output: the loss in float32 (shape of `target` for reduction="none"), like kernels/cross_entropy.
The gradients have the dtype of the tensors they belong to.
"""

from __future__ import annotations

from typing import Literal

import torch

from . import shifted_logits
from .chunk_grads import ChunkGrads, take_kept_grads
from .chunking import chunk_size
from .cross_entropy import (
    CheckTargets,
    Reduction,
    cross_entropy_rows,
    mean_denominator,
    reduce_loss_rows,
    run_target_check,
    validate_loss_options,
)
from .fp32_products import SHARED_LOGIT_BYTES, grad_over_logits, logits_fp32
from .fused_linear_log_probs import fused_linear_log_probs
from .head_checks import check_head_dtypes

GradWeightAccum = Literal["auto", "fp32", "dtype"]
# chunk_bytes=None: the working memory is this share of the two gradients (their bytes, (V + N) * H
# in the inputs' dtype), so the extra memory stays under the 1.2x design target at every head
# (docs/performance.md) with a margin for the per-row buffers, and a head with room gets larger
# chunks: fewer passes of the [V, H] weight-gradient product (H200, docs/profiles/flce-heads-h200.md:
# the Gemma-2-2B head 67.7 -> 64.0 ms, Qwen2.5-7B 54.1 -> 52.9; Mistral-7B's 512 MiB extra, 1.6x its
# gradients, falls to 1.18x). Never under GRADIENT_SHARE_FLOOR: tiny heads keep whole-batch chunks.
GRADIENT_SHARE = 0.19
GRADIENT_SHARE_FLOOR = 32 * 2**20


def default_chunk_bytes(n_tokens: int, n_classes: int, n_hidden: int, dtype: torch.dtype) -> int:
    """The budget chunk_bytes=None stands for: GRADIENT_SHARE of the two gradients' bytes."""
    grads = (n_classes + n_tokens) * n_hidden * dtype.itemsize
    return max(int(GRADIENT_SHARE * grads), GRADIENT_SHARE_FLOOR)


AUTO_DTYPE_MAX_CHUNKS = 32
Split = Literal["auto", "tokens", "vocab"]
Store = Literal["auto", "float32", "shifted16"]
VOCAB_SPLIT_BELOW = 384  # "auto": chunks of fewer tokens than this go the vocabulary way


def resolve_split(split: str, n_tokens: int, chunk: int | None, label_smoothing: float, z_loss_scale: float) -> str:
    """ "tokens" or "vocab" for `split` (module docstring); `chunk` is None when `chunk_tokens`
    forced the chunking (then "auto" keeps the chunks it was asked for)."""
    if split not in ("auto", "tokens", "vocab"):
        raise ValueError(f"split must be 'auto', 'tokens' or 'vocab', got {split!r}")
    fits = label_smoothing == 0.0 and z_loss_scale == 0.0
    if split == "vocab" and not fits:
        raise ValueError("split='vocab' has no label smoothing and no z-loss: use split='tokens'")
    if split != "auto":
        return split
    return "vocab" if fits and chunk is not None and chunk < VOCAB_SPLIT_BELOW and n_tokens > chunk else "tokens"


def resolve_store(
    store: str, dtype: torch.dtype, label_smoothing: float, softcap, z_loss_scale: float, n_classes: int, device
) -> str:
    """ "float32" or "shifted16" for `store` (module docstring). "auto" takes "shifted16" where
    it may (bfloat16, no smoothing, softcap or z-loss) and where its 2 bytes buy a larger chunk
    (not when the vocabulary is at most two float32 slices wide: then a token of it costs the
    same 4 bytes a logit, and the slicing only adds launches: Mistral-7B's head, kernels/NOTES.md)."""
    if store not in ("auto", "float32", "shifted16"):
        raise ValueError(f"store must be 'auto', 'float32' or 'shifted16', got {store!r}")
    fits = dtype == torch.bfloat16 and label_smoothing == 0.0 and not softcap and z_loss_scale == 0.0
    if store == "shifted16" and not fits:
        raise ValueError(
            "store='shifted16' takes bfloat16 inputs without label smoothing, softcap or z-loss: use store='float32'"
        )
    if store != "auto":
        return store
    smaller = shifted_logits.chunk_row_bytes(n_classes, device) < SHARED_LOGIT_BYTES * n_classes
    return "shifted16" if fits and smaller else "float32"


def store_row_bytes(store: str, n_classes: int, device: torch.device) -> tuple[int, int]:
    """(bytes a logit, other bytes a token) of a chunk kept as `store`, for plan()."""
    if store == "float32":
        return SHARED_LOGIT_BYTES, 0
    return 2, shifted_logits.chunk_row_bytes(n_classes, device) - 2 * n_classes


def resolve_split_and_store(
    split, store, n_tokens, n_classes, dtype, device, label_smoothing, softcap, z_loss_scale, chunk_bytes, chunk_tokens
) -> tuple[str, str, int | None]:
    """(split, store, tokens a chunk of that store: None when chunk_tokens forces it) as "auto"
    resolves them for a call: the store first, then the split from the store's chunk."""
    kept = resolve_store(store, dtype, label_smoothing, softcap, z_loss_scale, n_classes, device)
    logit_bytes, extra = store_row_bytes(kept, n_classes, device)
    chunk = (
        None
        if chunk_tokens is not None
        else chunk_size(n_tokens, n_classes * logit_bytes + extra, 1, chunk_bytes, None)
    )
    return resolve_split(split, n_tokens, chunk, label_smoothing, z_loss_scale), kept, chunk


def check_accum(accum: str) -> None:
    if accum not in ("auto", "fp32", "dtype"):
        raise ValueError(f"grad_weight_accum must be 'auto', 'fp32' or 'dtype', got {accum!r}")


def resolve_accum(accum: str, n_tokens: int, chunk: int) -> str:
    """The accumulation "auto" stands for, given the number of chunks alone (the rule when the
    chunk size is forced by `chunk_tokens`; `plan` adds the memory budget otherwise)."""
    if accum != "auto":
        return accum
    return "dtype" if -(-n_tokens // max(chunk, 1)) <= AUTO_DTYPE_MAX_CHUNKS else "fp32"


def plan(
    n_tokens: int,
    n_classes: int,
    n_hidden: int,
    logit_bytes: int,
    chunk_bytes: int,
    chunk_tokens: int | None,
    accum: str,
    extra_row_bytes: int = 0,
) -> tuple[int, str]:
    """(tokens per chunk, weight-gradient accumulation) for a memory budget of `chunk_bytes`.

    `logit_bytes`: the chunk's bytes per logit (fp32_products.SHARED_LOGIT_BYTES: 4, the float32
    logit, its gradient in the same storage).
    The budget bounds the working memory beyond the gradients themselves: the logits chunk and,
    in "fp32" accumulation, the fp32 [V, H] accumulator (4*V*H bytes). "auto" takes "fp32" only
    when the chunks would be more than AUTO_DTYPE_MAX_CHUNKS AND the accumulator takes at most
    half the budget (the logits chunk gets the rest); otherwise "dtype". So a smaller budget
    never buys a larger accumulator: the extra memory stays within max(budget, one row of
    logits) whatever the budget. With `chunk_tokens` given the budget does not size anything
    and "auto" follows the chunk count alone (resolve_accum); an explicit "fp32" gets the whole
    budget for its logits chunk, its accumulator on top. `extra_row_bytes`: what else a token
    of the chunk costs (store="shifted16": its row of the float32 slice)."""
    row_bytes = n_classes * logit_bytes + extra_row_bytes
    if chunk_tokens is not None or accum != "auto":
        chunk = chunk_size(n_tokens, row_bytes, 1, chunk_bytes, chunk_tokens)
        return chunk, resolve_accum(accum, n_tokens, chunk)
    chunk = chunk_size(n_tokens, row_bytes, 1, chunk_bytes, None)
    if resolve_accum("auto", n_tokens, chunk) == "dtype":
        return chunk, "dtype"
    acc_bytes = 4 * n_classes * n_hidden
    if 2 * acc_bytes > chunk_bytes:
        return chunk, "dtype"
    return chunk_size(n_tokens, row_bytes, 1, chunk_bytes - acc_bytes, None), "fp32"


def _validate(hidden, weight, bias, target, class_weight, token_weight, reduction, label_smoothing, softcap):
    if hidden.dim() not in (2, 3):
        raise ValueError(f"hidden must be 2-D [N, H] or 3-D [B, T, H], got shape {tuple(hidden.shape)}")
    if weight.dim() != 2 or weight.shape[1] != hidden.shape[-1]:
        raise ValueError(
            f"weight must be [V, H] with H = hidden.shape[-1] = {hidden.shape[-1]}, got {tuple(weight.shape)}"
        )
    check_head_dtypes(hidden, weight, bias)
    if target.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"target must be int64 or int32 class ids, got {target.dtype}")
    if tuple(target.shape) != tuple(hidden.shape[:-1]):
        raise ValueError(
            f"target shape {tuple(target.shape)} must equal hidden shape without the hidden dim "
            f"{tuple(hidden.shape[:-1])}"
        )
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and t.device != hidden.device:
            raise ValueError(f"{name} is on {t.device} but hidden is on {hidden.device}")
    validate_loss_options(
        weight.shape[0], target, class_weight, token_weight, reduction, label_smoothing, softcap,
        device=hidden.device, names=("class_weight", "hidden"),
    )  # fmt: skip


def flat_inputs(hidden, weight, bias, token_weight, class_weight):
    """(h [N, H], w, b, token weights [N] float32, class weights float32), contiguous, as the
    fused linear losses' chunk loops read them (None where not given)."""
    h = hidden.reshape(-1, hidden.shape[-1]).contiguous()
    w = weight.contiguous()
    b = bias.contiguous() if bias is not None else None
    tw = token_weight.reshape(-1).float().contiguous() if token_weight is not None else None
    cw = class_weight.float().contiguous() if class_weight is not None else None
    return h, w, b, tw, cw


def _chunk_loop(h, w, b, t, tw, *, ce, denom, chunk, need_h, need_w, need_b, accum, loss_rows, zloss_rows, store):
    """Run every chunk: logits, loss and gradient rows (in place), then the three gradient
    products. Returns (grad_hidden, grad_weight, grad_bias), None where not needed. No host
    sync: the chunk bounds are host integers from the shapes. `store`: how a chunk's logits are
    kept ("float32" or "shifted16", module docstring)."""
    n, v = h.shape[0], w.shape[0]
    need_grad = need_h or need_w or need_b
    grads = ChunkGrads(h, w, need_h=need_h, need_w=need_w, need_b=need_b, accum=accum,
                       bias_dtype=None if b is None else b.dtype)  # fmt: skip
    b32 = None if b is None else b.float()
    form = (_Float32Chunks if store == "float32" else _Shifted16Chunks)(min(chunk, n), v, h.dtype, h.device)
    for start in range(0, n, chunk):
        stop = min(start + chunk, n)
        h_c = h[start:stop]
        loss_c, zloss_c, grad = form(h_c, w, b32, t[start:stop], None if tw is None else tw[start:stop],
                                     ce=ce, denom=denom, need_grad=need_grad)  # fmt: skip
        loss_rows[start:stop] = loss_c
        zloss_rows[start:stop] = zloss_c
        if need_grad:
            grads.add(start, stop, h_c, grad, w)
    del form  # its buffers go before the fp32 accumulator's conversion: the two never coexist
    return grads.result()


class _Float32Chunks:
    """store="float32": one [chunk, V] float32 logits buffer, the gradient laid over it."""

    def __init__(self, rows: int, v: int, dtype: torch.dtype, device):
        self.v, self.dtype = v, dtype
        self.buf = torch.empty(rows * v, dtype=torch.float32, device=device)

    def __call__(self, h_c, w, b32, t_c, tw_c, *, ce, denom, need_grad):
        # float32 logits (never rounded to 16 bits) and their gradient in the inputs' dtype, in
        # the same storage (fp32_products.grad_over_logits: the kernel reads before it writes)
        logits = self.buf[: h_c.shape[0] * self.v].view(h_c.shape[0], self.v)
        grad = grad_over_logits(logits, self.dtype)
        logits_fp32(h_c, w, b32, logits)
        loss_c, zloss_c, _ = cross_entropy_rows(
            logits, t_c, grad_out=grad if need_grad else None, denom=denom, token_weight=tw_c, **ce
        )
        return loss_c, zloss_c, grad


class _Shifted16Chunks:
    """store="shifted16": the chunk in 2 bytes a logit (kernels/shifted_logits.py), filled one
    float32 vocabulary slice at a time; the 16-bit gradient is written over it."""

    def __init__(self, rows: int, v: int, dtype: torch.dtype, device):
        self.v, self.dtype = v, dtype
        self.width = shifted_logits.slice_width(v, device)
        self.y16 = torch.empty(rows * v, dtype=torch.float16, device=device)
        self.x32 = torch.empty(rows * self.width, dtype=torch.float32, device=device)
        self.stats = shifted_logits.Stats(rows, v, device)

    def __call__(self, h_c, w, b32, t_c, tw_c, *, ce, denom, need_grad):
        k = h_c.shape[0]
        y = self.y16[: k * self.v].view(k, self.v)
        self.stats.start(k)
        for c0 in range(0, self.v, self.width):
            c1 = min(c0 + self.width, self.v)
            x = self.x32[: k * (c1 - c0)].view(k, c1 - c0)
            logits_fp32(h_c, w[c0:c1], None if b32 is None else b32[c0:c1], x)
            shifted_logits.pack_slice(x, y, t_c, self.stats, c0)
        grad = y.view(self.dtype) if need_grad else None
        loss_c, _ = shifted_logits.rows_loss_grad(
            y, grad, t_c, self.stats, ignore_index=ce["ignore_index"], class_weight=ce["weight"],
            token_weight=tw_c, denom=denom,
        )  # fmt: skip
        return loss_c, torch.zeros_like(loss_c), grad


def finish_chunked_forward(ctx, loss_rows, zloss_rows, reduction: str, denom, grads, recompute, shape, hidden_shape):
    """Reduce per-row (loss, z-loss) as asked and keep for backward what it takes: for
    reduction "none" `recompute` (the gradients are formed there, each row's upstream known),
    else `grads`, formed in forward and scaled there (shared by the fused linear losses)."""
    loss, zloss = reduce_loss_rows(loss_rows, zloss_rows, reduction, denom, shape)
    ctx.recompute = recompute if reduction == "none" else None
    ctx.grads = None if reduction == "none" else grads
    ctx.mark_non_differentiable(zloss)
    ctx.hidden_shape = hidden_shape
    ctx.done = False
    return loss, zloss


def start_chunked_backward(ctx, name: str) -> None:
    """One backward per forward: the gradients kept by finish_chunked_forward are scaled in place."""
    if ctx.done:
        raise RuntimeError(
            f"{name} backward ran twice on one forward: the gradients are "
            "formed in forward and scaled in place, so they can be used once"
        )
    ctx.done = True


class FusedLinearCrossEntropyFunction(torch.autograd.Function):
    """autograd wrapper; forward(...) returns (loss, z_loss), z_loss only for logging."""

    # apply's arguments by position (autograd.Function takes no keywords): this op's options, its own
    @staticmethod
    def forward(ctx, hidden, weight, bias, target, class_weight, token_weight, ignore_index, reduction, label_smoothing,
                softcap, z_loss_scale, chunk_bytes, chunk_tokens, grad_weight_accum, check_targets, store):  # fmt: skip
        _validate(hidden, weight, bias, target, class_weight, token_weight, reduction, label_smoothing, softcap)
        check_accum(grad_weight_accum)
        shape = target.shape
        n_classes = weight.shape[0]
        h, w, b, tw, cw = flat_inputs(hidden, weight, bias, token_weight, class_weight)
        t = target.reshape(-1).contiguous()
        run_target_check(check_targets, t, n_classes, ignore_index)
        denom = mean_denominator(t, cw, ignore_index, n_classes) if reduction == "mean" else None
        store = resolve_store(store, h.dtype, label_smoothing, softcap, z_loss_scale, n_classes, h.device)
        logit_bytes, extra = store_row_bytes(store, n_classes, h.device)
        chunk, grad_weight_accum = plan(
            h.shape[0], n_classes, h.shape[1], logit_bytes, chunk_bytes, chunk_tokens, grad_weight_accum, extra
        )
        ce = dict(
            weight=cw,
            ignore_index=ignore_index,
            label_smoothing=label_smoothing,
            softcap=softcap,
            z_loss_scale=z_loss_scale,
        )
        need_h, need_w, need_b = ctx.needs_input_grad[0], ctx.needs_input_grad[1], ctx.needs_input_grad[2]
        # reduction="none": gradients are formed in backward, where each row's upstream is known
        in_forward = reduction != "none"
        loss_rows = torch.empty(h.shape[0], dtype=torch.float32, device=h.device)
        zloss_rows = torch.empty_like(loss_rows)
        grads = _chunk_loop(
            h,
            w,
            b,
            t,
            tw,
            ce=ce,
            denom=denom,
            chunk=chunk,
            need_h=need_h and in_forward,
            need_w=need_w and in_forward,
            need_b=need_b and in_forward,
            accum=grad_weight_accum,
            loss_rows=loss_rows,
            zloss_rows=zloss_rows,
            store=store,
        )
        recompute = (h, w, b, t, tw, ce, chunk, grad_weight_accum, store)
        return finish_chunked_forward(ctx, loss_rows, zloss_rows, reduction, denom, grads, recompute, shape,
                                      hidden.shape)  # fmt: skip

    @staticmethod
    def backward(ctx, grad_loss, _grad_zloss):
        start_chunked_backward(ctx, "fused_linear_cross_entropy")
        need_h, need_w, need_b = ctx.needs_input_grad[0], ctx.needs_input_grad[1], ctx.needs_input_grad[2]
        if ctx.recompute is not None:
            h, w, b, t, tw, ce, chunk, accum, store = ctx.recompute
            ctx.recompute = None
            # The upstream gradient joins the token weights: the kernel then writes the gradient
            # of sum_i up_i * tw_i * loss_i, each row scaled exactly once.
            up = grad_loss.reshape(-1).float()
            tw_up = up if tw is None else tw * up
            scratch = torch.empty(h.shape[0], dtype=torch.float32, device=h.device)
            grad_h, grad_w, grad_b = _chunk_loop(
                h,
                w,
                b,
                t,
                tw_up,
                ce=ce,
                denom=None,
                chunk=chunk,
                need_h=need_h,
                need_w=need_w,
                need_b=need_b,
                accum=accum,
                loss_rows=scratch,
                zloss_rows=torch.empty_like(scratch),
                store=store,
            )
        else:
            grad_h, grad_w, grad_b = take_kept_grads(ctx, grad_loss)
        if grad_h is not None:
            grad_h = grad_h.view(ctx.hidden_shape)
        return (grad_h, grad_w, grad_b) + (None,) * 13


# the public signature: each op names its options itself, keyword for keyword where they mean the same
def fused_linear_cross_entropy(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    target: torch.Tensor,
    *,
    bias: torch.Tensor | None = None,
    class_weight: torch.Tensor | None = None,
    ignore_index: int = -100,
    reduction: Reduction = "mean",
    label_smoothing: float = 0.0,
    softcap: float | None = None,
    z_loss_scale: float = 0.0,
    token_weight: torch.Tensor | None = None,
    return_z_loss: bool = False,
    chunk_bytes: int | None = None,
    chunk_tokens: int | None = None,
    grad_weight_accum: GradWeightAccum = "auto",
    check_targets: CheckTargets = True,
    split: Split = "auto",
    store: Store = "auto",
):
    """Cross entropy of `hidden @ weight.T + bias` against class ids `target`, chunk by chunk.

    hidden [N, H] or [B, T, H]; weight [V, H]; bias [V] or None; target [N] or [B, T]; all of
    hidden, weight and bias in one dtype (float32, bfloat16 or float16) on one device.
    The loss options are those of kernels.cross_entropy.cross_entropy (`class_weight` is its
    `weight`): softcap first, then cross entropy with class weights and label smoothing, plus
    z_loss_scale * lse**2 per counted token, times the per-token weight; mean divides by
    PyTorch's denominator. Returns the float32 loss, or (loss, z_loss) with return_z_loss=True
    (z_loss for logging: no gradient flows through it; the loss already includes it).
    chunk_bytes: the memory budget, in bytes, for the working memory beyond the gradients
    (the logits chunk; in "auto" accumulation also the fp32 weight-gradient accumulator, which
    it only takes when that fits half the budget). Extra memory is then about the gradients +
    chunk_bytes (at least one row of logits). Default None: GRADIENT_SHARE (19%) of the two
    gradients' bytes, at least 32 MiB (203 MiB at the Llama-3-8B head, 221 at Gemma-2-2B, 61
    at Mistral-7B). Smaller budgets mean more, smaller chunks (slower at large heads), never
    more memory.
    chunk_tokens: force the tokens per chunk instead (the budget then sizes nothing).
    grad_weight_accum: "auto", "dtype" or "fp32": see the module docstring.
    check_targets: as in kernels.cross_entropy.cross_entropy: True (default) checks the targets
    on the device on a GPU (no host sync; a device-side assertion) and on the host elsewhere
    (ValueError); "host" / "device" pick one; False skips it (bad rows give NaN).
    split: "auto", "tokens" or "vocab": how the work is cut (module docstring).
    store: "auto", "float32" or "shifted16": how a chunk's logits are kept (module docstring).
    One backward per forward (the gradients are formed in forward, except for reduction="none").
    """
    n_tokens = target.numel()
    if chunk_bytes is None:
        chunk_bytes = default_chunk_bytes(n_tokens, weight.shape[0], weight.shape[-1], weight.dtype)
    how = resolve_split_and_store(
        split, store, n_tokens, weight.shape[0], hidden.dtype, hidden.device, label_smoothing, softcap,
        z_loss_scale, chunk_bytes, chunk_tokens,
    )  # fmt: skip
    if how[0] == "vocab":
        loss = _by_vocabulary(
            hidden, weight, bias, target, class_weight, token_weight, ignore_index, reduction, softcap,
            chunk_bytes, check_targets,
        )  # fmt: skip
        return (loss, torch.zeros_like(loss)) if return_z_loss else loss
    # how[1]: the store "auto" resolved to, passed on: forward does not decide it again
    loss, zloss = FusedLinearCrossEntropyFunction.apply(
        hidden, weight, bias, target, class_weight, token_weight, ignore_index, reduction, label_smoothing, softcap,
        z_loss_scale, chunk_bytes, chunk_tokens, grad_weight_accum, check_targets, how[1],
    )  # fmt: skip
    return (loss, zloss) if return_z_loss else loss


def _by_vocabulary(
    hidden,
    weight,
    bias,
    target,
    class_weight,
    token_weight,
    ignore_index,
    reduction,
    softcap,
    chunk_bytes,
    check_targets,
):
    """split="vocab": the loss from the fused linear log-probs of the targets (module docstring);
    autograd carries -class weight * token weight (/ the mean's denominator) into its backward."""
    _validate(hidden, weight, bias, target, class_weight, token_weight, reduction, 0.0, softcap)
    n_classes = weight.shape[0]
    run_target_check(check_targets, target.reshape(-1).contiguous(), n_classes, ignore_index)
    logp, _ = fused_linear_log_probs(
        hidden, weight, target, bias=bias, softcap=softcap, ignore_index=ignore_index, chunk_bytes=chunk_bytes
    )
    loss = -logp  # an ignored row's log-prob is 0: its loss is 0 and it passes no gradient
    if class_weight is not None:
        counted = target != ignore_index
        loss = loss * class_weight.float()[torch.where(counted, target, 0).clamp(0, n_classes - 1)]
    if token_weight is not None:
        loss = loss * token_weight.float()
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    return loss.sum() / mean_denominator(target.reshape(-1), class_weight, ignore_index, n_classes)
