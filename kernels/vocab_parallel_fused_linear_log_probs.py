"""Vocab-parallel per-token log-probs and entropy from a column-parallel lm_head: the weight
sharded on the vocab dim over a process group, the hidden states replicated, the logits never
stored whole.

    from ligerbench.kernels.vocab_parallel_fused_linear_log_probs import vocab_parallel_fused_linear_log_probs
    # rank r holds weight[lo_r:hi_r] (shards may be uneven, even empty), the whole hidden and target
    logp, entropy = vocab_parallel_fused_linear_log_probs(h, w_shard, target, group=tp, vocab_start=lo_r,
                                                         temperature=0.7)
    (logp * adv).sum().backward()  # hidden.grad: the FULL gradient, already summed over the group
                                   # (the same on every rank); w_shard.grad: this shard's rows of
                                   # the gradient of the global result

Semantics: exactly those of `fused_linear_log_probs` (kernels/fused_linear_log_probs.py, whose
docstring refers to kernels/log_probs.py's) on the unsharded weight [V, H], V = the sum of the
shard widths: z = softcap-capped (logit_scale * (hidden @ weight.T + bias)) / temperature,
logp = log_softmax(z)[target] ([N] or [N, K] targets, GLOBAL vocabulary ids), entropy = -(p log p)
summed over the GLOBAL vocabulary, both float32 and the same on every rank; ignore_index entries
give 0 and no gradient (a row's entropy only when all its targets are ignored). A target outside
[0, V) that is not ignored gives NaN, as on one GPU (no rank owns it, or shards that overlap own
it twice).

Design, per rank (the single-GPU op's vocabulary-slice design on this rank's shard):
- forward: the shard is cut into vocabulary slices of every row [N, cols] (sized by
  `chunk_bytes`, or `chunk_cols`); each slice's logits are one float32 product, never rounded to
  16 bits, into one reused buffer, and log_probs's forward kernel carries the row's online
  softmax across the slices (its `slices` mode, never finishing): this shard's max m_r, r_r = the
  sum of exp(z - m_r) over all its columns but one copy of its max (s_r = 1 + r_r), and
  u_r = sum exp(z - m_r) (m_r - z) >= 0; and the z of every target this shard owns (the
  kernel locates GLOBAL target ids with the slice's first id, vocab_start + c0; NaN elsewhere).
- ONE all_gather of [N, 3 + K] float32 per rank, then the merge, identical on every rank
  (`merge`): the global max M; s = sum_r s_r e^(m_r - M), kept as R = s - 1 with the global max's
  own 1 left out of the sum (log s = log1p(R) keeps its digits on a confident row); and
  U = sum_r e^(m_r - M) (u_r + (M - m_r) s_r): each rank's sum moved from its own max to the
  global max. Entropy = lse - sum p z = log s + U / s: sums of terms >= 0, nothing cancels (the
  plain difference lse - sum p z loses every digit when the two are close; docs/bugs.md, the
  vp_flce smoothing note, is the same trap). logp = (z_t - M) - log s with z_t from the ONE rank
  that owns the target (how many ranks hold it is counted from the gathered NaNs: not exactly
  one gives NaN). The merged (M, R, U / s) are exactly the row statistics the single-GPU
  backward kernel reads.
- backward recomputes each slice's logits (the same products, so bit for bit the logits the
  statistics came from) and log_probs's backward kernel writes dL/dz of the slice with the
  GLOBAL statistics and the slice's first GLOBAL id; then grad_weight[slice] = dz.T @ h (one
  product, float32 accumulation inside it), grad_bias[slice] = dz.sum(0), and this shard's part
  of the hidden gradient dz @ W_slice into a float32 [N, H] accumulator, which ONE all_reduce
  sums over the group (in float32: each rank's part is not rounded to 16 bits before the sum)
  before its one rounding to the hidden dtype.

What the caller gets: `hidden.grad` is the FULL gradient of the global (logp, entropy), summed
over the group, the same on every rank: the all_reduce a column-parallel layer's backward makes
on its input gradient is already done here (do not add another one). `weight_shard.grad` and
`bias_shard.grad` are this shard's rows of the global gradients.

Collectives: forward one all_gather of N * (3 + K) floats (plus one of the shard widths when
`vocab_start` is left to the op: a host sync; pass it); backward one all_reduce of N * H floats
(only when hidden requires grad). Every rank must make the same calls: the same hidden shape and
requires_grad, the same targets and options, and the same upstream gradients (a loss used the
same way on every rank gives them). Cost per rank: 8 * N * H * V_local FLOPs (the logits made
twice, then the two gradient products), as the single-GPU op on a V_local head. Memory per rank
beyond the gradients: one slice's float32 logits (their gradient in the same storage) within
`chunk_bytes`, the float32 [N, H] accumulator, and N * (3 + K) * (world + 2) floats of
statistics. No host sync (with `vocab_start` given).

`group`: a torch.distributed ProcessGroup, None for the default group (or a single process when
torch.distributed is not initialized), or any object with `rank()`, `size()`,
`all_gather_into_tensor(out, inp)` and `all_reduce(t)` (sum, in place): an in-process
simulation of ranks, for tests.
"""

from __future__ import annotations

import torch

from .chunking import DEFAULT_CHUNK_BYTES
from .compile_boundary import opaque
from .fp32_products import logits_fp32
from .fused_linear_log_probs import _backward_vocab, _spans, _validate, plan_cols
from .log_probs import N_STATS, log_probs_rows, upstream_2d
from .vocab_parallel_cross_entropy import all_gather, all_reduce_, group_rank_size, shard_offsets


def _validate_shard(hidden, weight, bias, target, temperature, softcap, logit_scale) -> torch.Tensor:
    """The single-GPU op's checks, with an empty shard allowed (more ranks than classes): those
    want V >= 1, so an empty shard is checked as a one-row stand-in of its dtype and device."""
    if weight.dim() == 2 and weight.shape[0] == 0:
        weight = weight.new_empty((1, weight.shape[1]))
        bias = None if bias is None or bias.shape != (0,) else bias.new_empty(1)
    return _validate(hidden, weight, bias, target, temperature, softcap, logit_scale)


def merge(gathered: torch.Tensor, valid: torch.Tensor, rank: int):
    """(logp [N, K], entropy [N], stats [N, N_STATS]) of the global rows from every rank's
    [N, 3 + K] statistics gathered in rank order ([world, N, 3 + K]: m_r, r_r, u_r, then the
    targets' z where that rank owns them, NaN elsewhere); `valid` [N, K] marks the targets that
    are not ignore_index. PyTorch ops on the device, no host sync. `rank` is unused here (every
    rank merges the same way); a planted bug may look at it."""
    m_r, r_r, u_r, zt = gathered[..., 0], gathered[..., 1], gathered[..., 2], gathered[..., N_STATS:]
    seen = m_r > float("-inf")  # an empty shard, or a row no rank looked at (all ignored)
    m = m_r.amax(dim=0)
    m_safe = torch.where(m > float("-inf"), m, 0.0)
    shift = torch.where(seen, m_safe - m_r, 0.0)  # >= 0: how far each rank's max is below the global
    alpha = torch.where(seen, torch.exp(-shift), 0.0)
    s_r = torch.where(seen, 1.0 + r_r, 0.0)
    # the global max's own 1 is left out of R (one copy: the first rank that holds it); every
    # other rank's whole sum s_r moves down by alpha. All terms >= 0.
    top = seen & (shift == 0.0)
    first_top = top & (torch.cumsum(top.to(torch.int32), dim=0) == 1)
    big_r = torch.where(first_top, r_r, alpha * s_r).sum(dim=0)
    big_u = (alpha * (u_r + shift * s_r)).sum(dim=0)  # each rank's sum moved to the global max
    log_s = torch.log1p(big_r)
    mean_gap = big_u / (1.0 + big_r)
    row_valid = valid.any(dim=1)
    entropy = torch.where(row_valid, log_s + mean_gap, 0.0)
    owners = (~torch.isnan(zt)).sum(dim=0)  # [N, K]: the ranks that found the target in their shard
    z_t = torch.where(torch.isnan(zt), 0.0, zt).sum(dim=0)
    logp = (z_t - m_safe[:, None]) - log_s[:, None]  # z_t - M first: exact for the max
    logp = torch.where(valid, torch.where(owners == 1, logp, float("nan")), 0.0)
    stats = torch.stack((m_safe, big_r, mean_gap), dim=1).contiguous()
    return logp, entropy, stats


class VocabParallelFusedLinearLogProbsFunction(torch.autograd.Function):
    """autograd wrapper; forward(...) returns (logp, entropy), both differentiable."""

    # the parts a planted bug (suites/vp_flp/mutants.py) may replace, by subclassing
    MERGE = staticmethod(merge)
    REDUCE = staticmethod(all_reduce_)  # the hidden gradient's sum over the group
    # the GLOBAL id of a slice's first column, as forward's target lookup sees it
    TARGET_START = staticmethod(lambda vocab_start, c0: vocab_start + c0)

    # apply's arguments by position (autograd.Function takes no keywords): this op's options, its own
    @classmethod
    def forward(cls, ctx, hidden, weight, bias, target, group, vocab_start, temperature, softcap, logit_scale,
                ignore_index, chunk_bytes, chunk_cols):  # fmt: skip
        t2 = _validate_shard(hidden, weight, bias, target, temperature, softcap, logit_scale)
        if (chunk_cols is not None and chunk_cols < 1) or chunk_bytes < 1:
            raise ValueError(f"chunk_cols must be None or >= 1 and chunk_bytes >= 1, got {chunk_cols}, {chunk_bytes}")
        h = hidden.reshape(-1, hidden.shape[-1])  # a view where the strides allow
        n_rows, k = t2.shape
        v_local, dev = weight.shape[0], hidden.device
        if vocab_start is None:
            vocab_start, _ = shard_offsets(v_local, group, dev)  # a host sync: pass vocab_start
        rank, _ = group_rank_size(group)
        opts = dict(temperature=temperature, softcap=softcap, logit_scale=logit_scale, ignore_index=ignore_index)
        b32 = None if bias is None else bias.float()
        logp = torch.empty(n_rows, k, dtype=torch.float32, device=dev)
        entropy = torch.empty(n_rows, dtype=torch.float32, device=dev)
        # this rank's statistics (m, r, u) and its targets' z, which the kernel carries between
        # the slices (contiguous [N, 3] and [N, K]); rows it never writes (all targets ignored,
        # an empty shard) keep "nothing seen": m = -inf, z NaN
        stats = torch.zeros(n_rows, N_STATS, dtype=torch.float32, device=dev)
        stats[:, 0] = float("-inf")
        zt = torch.full((n_rows, k), float("nan"), dtype=torch.float32, device=dev)
        span = plan_cols(n_rows, v_local, chunk_bytes, chunk_cols)
        if v_local > 0 and n_rows > 0:
            buf = torch.empty(n_rows * min(span, v_local), dtype=torch.float32, device=dev)
            for c0, c1 in _spans(v_local, span):
                x = buf[: n_rows * (c1 - c0)].view(n_rows, c1 - c0)
                logits_fp32(h, weight[c0:c1], None if b32 is None else b32[c0:c1], x)
                start = cls.TARGET_START(vocab_start, c0)
                # never the last slice: the row is finished by the merge, over every rank
                log_probs_rows(x, t2, **opts, out=(logp, entropy, stats), slices=(start, c0 == 0, False, zt))
            del buf
        local = torch.cat((stats, zt), dim=1)  # [N, 3 + K]: the one tensor the ranks exchange
        gathered = all_gather(local, group)  # [world, N, 3 + K]: the one collective of forward
        valid = t2 != ignore_index
        logp_m, entropy_m, merged = cls.MERGE(gathered, valid, rank)
        logp.copy_(logp_m)
        entropy.copy_(entropy_m)
        ctx.save_for_backward(hidden, weight, bias)  # the caller's tensors, no copies
        ctx.t2, ctx.stats, ctx.opts = t2, merged, opts
        ctx.vocab_start, ctx.span, ctx.group = vocab_start, span, group
        # an output that gets no gradient arrives as None: its term is skipped, not added as zeros
        ctx.set_materialize_grads(False)
        return logp.view(target.shape), entropy.view(hidden.shape[:-1])

    @classmethod
    def backward(cls, ctx, dlogp, dentropy):
        hidden, weight, bias = ctx.saved_tensors
        need_h, need_w, need_b = (bool(ctx.needs_input_grad[i]) for i in range(3))
        none = (None,) * 12
        if not (need_h or need_w or need_b) or (dlogp is None and dentropy is None):
            return none
        h = hidden.reshape(-1, hidden.shape[-1])
        (n_rows, n_hidden), v_local, dev, dtype = h.shape, weight.shape[0], h.device, h.dtype
        dl, de = upstream_2d(dlogp, dentropy, n_rows, ctx.t2.shape[1])
        if v_local > 0 and n_rows > 0:
            b32 = None if bias is None else bias.float()
            grad_h, grad_w, grad_b = _backward_vocab(h, weight, b32, ctx.t2, ctx.stats, dl, de, ctx.opts, ctx.span,
                                                     (need_h, need_w, need_b), vocab_start=ctx.vocab_start)  # fmt: skip
        else:  # no slice to fill them: the shard's gradients are 0
            grad_h = torch.zeros(n_rows, n_hidden, dtype=torch.float32, device=dev) if need_h else None
            grad_w = torch.zeros(weight.shape, dtype=dtype, device=dev) if need_w else None
            grad_b = torch.zeros(v_local, dtype=torch.float32, device=dev) if need_b else None
        if need_h:
            cls.REDUCE(grad_h, ctx.group)  # the one collective of backward, in float32
            grad_h = grad_h.to(hidden.dtype).view(hidden.shape)
        if grad_b is not None:
            grad_b = grad_b.to(bias.dtype)
        return (grad_h, grad_w, grad_b) + none[3:]


# the public signature: each op names its options itself, keyword for keyword where they mean the same
@opaque  # torch.compile runs it as it is, outside the graph: kernels/compile_boundary.py
def vocab_parallel_fused_linear_log_probs(
    hidden: torch.Tensor,
    weight_shard: torch.Tensor,
    target: torch.Tensor,
    *,
    bias: torch.Tensor | None = None,
    temperature: float = 1.0,
    softcap: float | None = None,
    logit_scale: float = 1.0,
    ignore_index: int = -100,
    group=None,
    vocab_start: int | None = None,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    chunk_cols: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(logp, entropy) of `target` under the softmax over the GLOBAL vocabulary of z =
    softcap-capped (logit_scale * (hidden @ weight.T + bias)) / temperature, with this rank
    holding weight rows [vocab_start, vocab_start + V_local) (module docstring: semantics,
    design, collectives, memory).

    hidden [N, H] or [B, T, H] (any strides) and target [N] / [B, T] or [N, K] / [B, T, K]
    (GLOBAL token ids) are the same on every rank; weight_shard [V_local, H] (V_local may be 0)
    and `bias` [V_local] or None (this shard's slice of the bias) share hidden's dtype (float32,
    bfloat16 or float16). Returns float32 logp (target's shape) and float32 entropy (the row
    shape), the same on every rank. Backward through either or both: hidden.grad is the full
    gradient, already summed over the group (the same on every rank); weight_shard.grad and
    bias.grad this shard's rows of the global gradients.
    vocab_start: this shard's first global id (None: derived from one more all_gather of the
    widths, rank order being vocab order, with a host sync). chunk_bytes: the budget of the
    per-slice buffers; chunk_cols forces the vocabulary columns per slice (they may differ
    between ranks: the collectives do not depend on them)."""
    return VocabParallelFusedLinearLogProbsFunction.apply(
        hidden, weight_shard, bias, target, group, vocab_start, temperature, softcap, logit_scale, ignore_index,
        chunk_bytes, chunk_cols,
    )  # fmt: skip  # fmt: skip
