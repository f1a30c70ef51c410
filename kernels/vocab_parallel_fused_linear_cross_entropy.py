"""Vocab-parallel fused linear + cross entropy: the lm_head weight sharded on the vocab dim
(column-parallel), the hidden states replicated, the logits never stored whole.

    from ligerbench.kernels.vocab_parallel_fused_linear_cross_entropy import (
        vocab_parallel_fused_linear_cross_entropy,
    )
    # rank r holds weight[lo_r:hi_r] (shards may be uneven, even empty), the whole hidden and target
    loss = vocab_parallel_fused_linear_cross_entropy(hidden, weight_shard, target, group=tp, vocab_start=lo_r)
    loss.backward()   # hidden.grad: the full gradient (reduced over the group), the same on every
                      # rank; weight_shard.grad: the gradient of the GLOBAL loss for this shard

Semantics: exactly those of `fused_linear_cross_entropy` (kernels/fused_linear_cross_entropy.py)
on the unsharded weight [V, H], V = the sum of the shard widths, with every option: a
`bias_shard` [V_local], any `ignore_index` (one equal to a valid class included: a row is ignored
by its GLOBAL target id), label smoothing over the GLOBAL vocab, softcap, z-loss on the global
log-sum-exp, class weights sharded with the vocab (`class_weight_shard`), token weights,
reductions none/mean/sum, `none` with any upstream gradient. Every rank returns the same float32
loss. A target outside [0, V) gives NaN, as on one GPU (or an error: `check_targets`).

Design: tokens are cut into chunks, the same chunks on every rank. Per chunk: the local logits
h_c @ W_shard.T (+ b) by cuBLAS into one reused buffer; this shard's row statistics (those of
kernels/vocab_parallel_cross_entropy.py: local max, sum of exp over the non-target classes, the
target's logit and class weight where it lives, ownership, the smoothing sum); ONE all_gather of
them ([chunk + 1, 6] float32), merged into the global per-row quantities identically on every
rank; the loss rows; the gradient of the chunk's logits written into their storage; then
dW_shard += dlogits.T @ h_c, db += column sums, and this shard's part of the hidden gradient
dh_c = dlogits @ W_shard. After the last chunk, dh is summed over the group by ONE all_reduce.
All of it happens in forward; backward only rescales the gradients by the upstream scalar.

Why a gather per chunk rather than one for all rows (a first pass over every chunk for the
statistics, then a second pass recomputing the logits): the second pass would recompute every
local logit, 8*N*H*V_local FLOPs per rank instead of 6*N*H*V_local (the floor), so at 2 ranks
0.67x the single-GPU FLOPs where this design does 0.5x. A per-chunk gather moves (chunk+1)*6
floats per rank; chunks are hundreds of tokens, so there are a handful of them.

Collectives (forward): one all_gather of a [6] layout row (width, vocab_start, class-weight sum,
this rank's share of the mean's class-weighted denominator), one all_gather of statistics per
chunk, one all_reduce of dh [N, H] in float32 (each rank's share formed in the hidden dtype; the
sum rounded to it once); one more all_gather of the widths when `vocab_start` is left to the op.
None in backward, except reduction="none": each row's upstream gradient is only known in backward and dW is a sum over
rows, so backward recomputes the local logits chunk by chunk (the merged statistics are kept
from forward, N * world * 6 floats) with the token weights multiplied by the upstream (exact, as
the single-GPU kernel), at
8*N*H*V_local FLOPs in all, and all-reduces dh there (the upstream must be the same on every
rank, which it is when the loss is used the same way on every rank).
Every rank must make the same calls with the same chunking: `hidden`'s requires_grad, N,
`chunk_tokens` and `chunk_bytes` the same everywhere. Without `chunk_tokens` the chunk size comes
from the widest shard, read on the host from the layout gather (one host sync per call): pass
`chunk_tokens` to avoid it.

Memory per rank beyond the gradients (dh [N, H], dW_shard, db_shard): one float32 logits chunk
within `chunk_bytes` (sized for the widest shard), its 16-bit gradient laid in the same storage
(4 bytes a logit: fp32_products.grad_under_logits), on CPU float32 temporaries of at most 2**22
elements per step of the PyTorch passes (kernels/vocab_parallel_cross_entropy.py), the
gathered statistics of one chunk, and in "fp32" weight-gradient accumulation the fp32 [V_local,
H] accumulator (the single-GPU kernel's rule, applied with the widest shard).

`group`: a torch.distributed ProcessGroup, None for the default group (or a single process when
torch.distributed is not initialized), or any object with `rank()`, `size()`,
`all_gather_into_tensor(out, inp)` and `all_reduce(t)` (sum, in place): an in-process simulation
of ranks, for tests.

The per-chunk passes are the vocabulary-parallel cross entropy's, chosen as its PASSES says: on
a GPU its fused path, two Triton kernels around the gather (the statistics pass, which locates
the targets itself, and the finishing kernel: merge, loss rows, gradient row), so a chunk costs
the host a handful of launches (8-12 ms to issue a call at the Llama-3-8B head on one H200,
in two runs, against 35 ms when the merge and the rows were ~70 PyTorch ops a chunk:
results/runs/bench-vp_flce-heads-1xh200); on CPU PyTorch ops in float32. The matmuls are cuBLAS.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch

from . import vocab_parallel_passes as passes
from .chunk_grads import take_kept_grads
from .chunking import DEFAULT_CHUNK_BYTES
from .cross_entropy import CheckTargets, Reduction
from .fp32_products import SHARED_LOGIT_BYTES, add_product_fp32, grad_times, grad_under_logits, logits_fp32
from .fused_linear_cross_entropy import (
    GradWeightAccum,
    _validate,
    check_accum,
    finish_chunked_forward,
    flat_inputs,
    plan,
    start_chunked_backward,
)
from .vocab_parallel_cross_entropy import (
    N_STATS,
    _local_stats,
    _Merged,
    _passes,
    _rows,
    _write_grad,
    all_gather,
    all_reduce_,
    check_layout,
    group_rank_size,
    locate_targets,
    owns,
    shard_offsets,
)


def _layout_row(v_local: int, vocab_start: int, cw, local_t, owned, device) -> torch.Tensor:
    """This rank's [N_STATS] layout row: width, vocab_start, class-weight sum, and its share of
    the mean's class-weighted denominator (the weights of the counted targets it holds).
    Columns 0-2 are those _Merged reads from the extra row of the statistics."""
    row = torch.zeros(N_STATS, dtype=torch.float32, device=device)
    row[0] = float(v_local)
    row[1] = float(vocab_start)
    if cw is not None and v_local > 0:
        row[2] = cw.sum()
        row[3] = torch.where(owned, cw[local_t], 0.0).sum()
    return row


def _gathered(s, k: int, stats: list, rows: int, device, fill) -> torch.Tensor:
    """Chunk k's statistics of every rank: stats[k] where forward kept them, else this shard's
    [rows + 1, N_STATS] filled by `fill`, gathered (the chunk's one collective) and appended."""
    if k < len(stats):
        return stats[k]
    local = torch.empty(rows + 1, N_STATS, dtype=torch.float32, device=device)
    fill(local)
    stats.append(all_gather(local, s.group))
    return stats[-1]


class _Shared:
    """What every chunk of one call shares (inputs flattened, ownership, options)."""

    def __init__(self, h, w, b, t, local_t, owned, counted, cw, tw, layout_row, group, rank, opts, *, vocab_start,
                 ignore_index):  # fmt: skip
        self.h, self.w, self.b, self.t = h, w, b, t
        self.vocab_start, self.ignore_index = vocab_start, ignore_index
        self.local_t, self.owned, self.counted = local_t, owned, counted
        self.cw, self.tw = cw, tw
        self.layout_row, self.group, self.rank = layout_row, group, rank
        self.opts = opts  # (label_smoothing, softcap, z_loss_scale)


class VocabParallelFusedLinearCrossEntropyFunction(torch.autograd.Function):
    """autograd wrapper; forward(...) returns (loss, z_loss), z_loss only for logging."""

    # The replaceable parts, as class attributes: a variant (a planted bug in
    # suites/vp_flce/mutants.py) is a subclass that overrides one; this op has one path, so
    # every part always runs.
    OWNS = staticmethod(owns)
    MERGED = _Merged
    FUSED = True  # on a GPU, each chunk's statistics, merge, loss rows and gradient in Triton (_fused_finish)
    REDUCE = staticmethod(all_reduce_)  # the hidden gradient's sum over the group
    GRAD_H_BUFFER = staticmethod(torch.empty_like)  # where the hidden gradient is formed

    @classmethod
    def _chunks(cls, s: _Shared, *, chunk, denom, tw, need, accum, loss_rows, zloss_rows, stats):
        """Every chunk: local logits, statistics (gathered, or `stats` kept from forward), loss
        rows, the gradient over the logits, the three products; then dh's all_reduce.
        `stats` is a list: filled with each chunk's gathered statistics when empty."""
        h, w, b = s.h, s.w, s.b
        n, v_local = h.shape[0], w.shape[0]
        need_h, need_w, need_b = need
        need_grad = need_h or need_w or need_b
        grad_h = cls.GRAD_H_BUFFER(h) if need_h else None
        grad_w = None
        if need_w:
            grad_w = torch.zeros_like(w, dtype=torch.float32) if accum == "fp32" else torch.zeros_like(w)
        grad_b = torch.zeros(v_local, dtype=torch.float32, device=h.device) if need_b else None
        grad_b_carry = torch.zeros_like(grad_b) if need_b else None  # Kahan, as the single-GPU kernel
        # float32 logits (never rounded to 16 bits) and their gradient in the inputs' dtype laid
        # in the same storage, as the single-GPU kernel's float32 chunks (every pass below reads
        # a row's block before writing its gradient: fp32_products.grad_under_logits)
        buf = torch.empty(min(chunk, n) * v_local, dtype=torch.float32, device=h.device)
        b32 = None if b is None else b.float()
        finish = cls._fused_finish if cls.FUSED and _passes(h) == "fused" else cls._staged_finish
        logits = grad = None
        for k, start in enumerate(range(0, n, chunk)):
            stop = min(start + chunk, n)
            h_c = h[start:stop]
            logits = buf[: (stop - start) * v_local].view(stop - start, v_local)
            grad = grad_under_logits(logits, h.dtype)
            logits_fp32(h_c, w, b32, logits)
            rows = loss_rows[start:stop] if loss_rows is not None else None
            z_rows = zloss_rows[start:stop] if zloss_rows is not None else None
            finish(s, k, start, stop, logits, grad if need_grad else None, denom, tw, stats, rows, z_rows)
            if not need_grad:
                continue
            # dW and db before dh: dh's rows may be formed where h_c was read (a buffer reused)
            if need_w:
                if accum == "fp32":
                    add_product_fp32(grad_w, grad.t(), h_c)
                else:
                    grad_w.addmm_(grad.t(), h_c)
            if need_b:
                term = grad.sum(0, dtype=torch.float32) - grad_b_carry
                total = grad_b + term
                grad_b_carry = (total - grad_b) - term
                grad_b = total
            if need_h:
                grad_times(grad, w, grad_h[start:stop])
        # the chunk's views go with it: held, they kept its buffer alive beside the float32 sum
        # below (124 MiB more at the Llama-3-8B head: results/runs/bench-vp_flce-heads-1xh200)
        del buf, logits, grad
        if need_h:  # the one all_reduce: every rank's share of dh
            if grad_h.dtype == torch.float32 or group_rank_size(s.group)[1] == 1:
                cls.REDUCE(grad_h, s.group)  # (one rank: nothing to sum, nothing to round again)
            else:
                # each rank's share was rounded to the hidden dtype by its product; the shares are
                # summed in float32 and the sum rounded once more: a 16-bit all_reduce rounds again
                # at every hop of NCCL's ring (bf16 at 3 ranks on four H100s: 1.14x the strict
                # limit). Shares kept in float32 (as vp_flp's) would drop the first rounding too.
                total = grad_h.float()
                cls.REDUCE(total, s.group)
                grad_h.copy_(total)
                del total
        if grad_w is not None and grad_w.dtype != w.dtype:
            grad_w = grad_w.to(w.dtype)
        if grad_b is not None:
            grad_b = grad_b.to(b.dtype)
        return grad_h, grad_w, grad_b

    @classmethod
    def _staged_finish(cls, s: _Shared, k, start, stop, logits, grad, denom, tw, stats, rows, z_rows):
        """A chunk after its logits, as separate steps around the gather (PyTorch ops, or the
        staged Triton passes: kernels/vocab_parallel_cross_entropy.py's PASSES): this shard's
        statistics, the merge (MERGED), the loss rows into `rows`/`z_rows` (None: not wanted) and
        the gradient into `grad` (None: not wanted). stats[k], where present, is the chunk's kept
        gather; otherwise the gather is made and appended."""
        eps, softcap, z = s.opts
        lt, own, cnt = s.local_t[start:stop], s.owned[start:stop], s.counted[start:stop]

        def fill(local):
            local[:-1] = _local_stats(logits, lt, own, s.cw, eps, softcap)
            local[-1] = s.layout_row

        gathered = _gathered(s, k, stats, stop - start, logits.device, fill)
        merged = cls.MERGED(gathered, stop - start, s.cw is not None, s.rank)
        valid = merged.owners == 1.0
        tw_c = None if tw is None else tw[start:stop]
        if rows is not None:
            rows[:], z_rows[:] = _rows(merged, cnt, valid, tw_c, eps, z)
        if grad is not None:
            _write_grad(logits, grad, merged, lt, own, cnt, valid, s.cw, tw_c, denom, s.opts)

    @classmethod
    def _fused_finish(cls, s: _Shared, k, start, stop, logits, grad, denom, tw, stats, rows, z_rows):
        """_staged_finish in two Triton kernels around the gather, the vocab-parallel cross
        entropy's fused path (kernels/vocab_parallel_passes.py): the statistics pass, which
        locates the targets itself, and the finishing kernel, whose program per row merges the
        ranks' statistics, stores the row's loss and writes its gradient. A chunk then costs the
        host a handful of launches, where the staged steps issue some 70 small ops (35 ms of host
        time a call at the Llama-3-8B head on one rank, against 60 ms of GPU time). It runs
        neither OWNS nor MERGED, so a variant replacing either sets FUSED = False."""
        eps, softcap, z = s.opts
        t_c = s.t[start:stop]

        def fill(local):
            passes.located_stats(logits, t_c, s.vocab_start, s.ignore_index, s.cw, eps, softcap, local)

        gathered = _gathered(s, k, stats, stop - start, logits.device, fill)
        if rows is None:  # backward's pass of reduction "none": the loss rows were stored in forward
            rows, z_rows = torch.empty(2, stop - start, dtype=torch.float32, device=logits.device)
        passes.finish(
            logits, grad, t_c, None if tw is None else tw[start:stop].contiguous(), gathered, denom, s.cw, rows,
            z_rows, None, vocab_start=s.vocab_start, ignore_index=s.ignore_index, label_smoothing=eps,
            softcap=softcap, z_loss_scale=z,
        )  # fmt: skip

    # apply's arguments by position (autograd.Function takes no keywords): this op's options, its own
    @classmethod
    def forward(cls, ctx, hidden, weight, bias, target, class_weight, token_weight, group, vocab_start, ignore_index,
                reduction, label_smoothing, softcap, z_loss_scale, chunk_bytes, chunk_tokens, grad_weight_accum,
                check_targets):  # fmt: skip
        _validate(hidden, weight, bias, target, class_weight, token_weight, reduction, label_smoothing, softcap)
        check_accum(grad_weight_accum)
        shape = target.shape
        h, w, b, tw, cw = flat_inputs(hidden, weight, bias, token_weight, class_weight)
        t = target.reshape(-1).long()
        dev, n, v_local = h.device, h.shape[0], w.shape[0]
        if vocab_start is None:
            vocab_start, _ = shard_offsets(v_local, group, dev)
        counted, local_t, owned = locate_targets(t, vocab_start, v_local, ignore_index, cls.OWNS)
        rank, _ = group_rank_size(group)
        row = _layout_row(v_local, vocab_start, cw, local_t, owned, dev)
        layout = all_gather(row, group)  # [world, N_STATS]
        tiling = SimpleNamespace(widths=layout[:, 0], starts=layout[:, 1])
        check_layout(check_targets, tiling, t, ignore_index)
        denom = None
        if reduction == "mean":
            denom = layout[:, 3].sum() if cw is not None else counted.sum(dtype=torch.float32)
        widest = v_local if chunk_tokens is not None else int(layout[:, 0].max())  # the one host sync
        chunk, accum = plan(n, widest, h.shape[1], SHARED_LOGIT_BYTES, chunk_bytes, chunk_tokens, grad_weight_accum)
        shared = _Shared(h, w, b, t, local_t, owned, counted, cw, tw, row, group, rank,
                         (label_smoothing, softcap, z_loss_scale), vocab_start=vocab_start,
                         ignore_index=ignore_index)  # fmt: skip
        need = tuple(bool(ctx.needs_input_grad[i]) for i in range(3))
        in_forward = reduction != "none"
        loss_rows = torch.empty(n, dtype=torch.float32, device=dev)
        zloss_rows = torch.empty_like(loss_rows)
        stats: list[torch.Tensor] = []
        grads = cls._chunks(
            shared, chunk=chunk, denom=denom, tw=tw, need=need if in_forward else (False, False, False),
            accum=accum, loss_rows=loss_rows, zloss_rows=zloss_rows, stats=stats,
        )  # fmt: skip
        return finish_chunked_forward(ctx, loss_rows, zloss_rows, reduction, denom, grads,
                                      (shared, chunk, accum, stats), shape, hidden.shape)  # fmt: skip

    @classmethod
    def backward(cls, ctx, grad_loss, _grad_zloss):
        start_chunked_backward(ctx, "vocab_parallel_fused_linear_cross_entropy")
        if ctx.recompute is not None:
            shared, chunk, accum, stats = ctx.recompute
            ctx.recompute = None
            # the upstream joins the token weights: each row scaled exactly once, in float32
            up = grad_loss.reshape(-1).float()
            tw_up = up if shared.tw is None else shared.tw * up
            need = tuple(bool(ctx.needs_input_grad[i]) for i in range(3))
            grad_h, grad_w, grad_b = cls._chunks(
                shared, chunk=chunk, denom=None, tw=tw_up, need=need, accum=accum,
                loss_rows=None, zloss_rows=None, stats=stats,
            )  # fmt: skip
        else:
            grad_h, grad_w, grad_b = take_kept_grads(ctx, grad_loss)
        if grad_h is not None:
            grad_h = grad_h.view(ctx.hidden_shape)
        return (grad_h, grad_w, grad_b) + (None,) * 14


def vocab_parallel_fused_linear_cross_entropy(
    hidden: torch.Tensor,
    weight_shard: torch.Tensor,
    target: torch.Tensor,
    *,
    group=None,
    vocab_start: int | None = None,
    bias_shard: torch.Tensor | None = None,
    ignore_index: int = -100,
    reduction: Reduction = "mean",
    label_smoothing: float = 0.0,
    softcap: float | None = None,
    z_loss_scale: float = 0.0,
    class_weight_shard: torch.Tensor | None = None,
    token_weight: torch.Tensor | None = None,
    return_z_loss: bool = False,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    chunk_tokens: int | None = None,
    grad_weight_accum: GradWeightAccum = "auto",
    check_targets: CheckTargets = True,
):
    """Cross entropy of hidden @ weight.T (+ bias) with the weight sharded on the vocab dim (module
    docstring: semantics, design, collectives, memory). `hidden` [N, H] or [B, T, H] and `target`
    [N] or [B, T] (GLOBAL class ids) are the same on every rank; `weight_shard` [V_local, H] holds
    global classes [vocab_start, vocab_start + V_local), `bias_shard` and `class_weight_shard`
    [V_local] the same classes' bias and weights; `token_weight` the per-token weights (the same
    on every rank). hidden, weight_shard and bias_shard share one dtype (float32, bfloat16 or
    float16). Returns the float32 loss (the same on every rank), or (loss, z_loss) with
    return_z_loss=True. chunk_bytes, chunk_tokens, grad_weight_accum: as in
    fused_linear_cross_entropy (the same on every rank). check_targets: as in
    vocab_parallel_cross_entropy (the shards tile [0, V) and the targets lie in it)."""
    loss, zloss = VocabParallelFusedLinearCrossEntropyFunction.apply(
        hidden, weight_shard, bias_shard, target, class_weight_shard, token_weight, group, vocab_start,
        ignore_index, reduction, label_smoothing, softcap, z_loss_scale, chunk_bytes, chunk_tokens,
        grad_weight_accum, check_targets,
    )  # fmt: skip  # fmt: skip
    return (loss, zloss) if return_z_loss else loss
