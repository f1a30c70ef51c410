"""Vocab-parallel cross entropy: logits sharded on the class (vocab) dim over a process group.

    import torch.distributed as dist
    from ligerbench.kernels.vocab_parallel_cross_entropy import vocab_parallel_cross_entropy
    # rank r holds logits[:, lo_r:hi_r] (shards may be uneven, even empty) and the whole target
    loss = vocab_parallel_cross_entropy(logits_shard, target, group=tp_group, vocab_start=lo_r)
    loss.backward()   # logits_shard.grad: the gradient of the GLOBAL loss for this shard

Semantics: exactly those of `cross_entropy` (kernels/cross_entropy.py) on the unsharded logits
[N, V], V = the sum of the shard widths, with every option: any `ignore_index` (one equal to a
valid class id included: a row is ignored by its GLOBAL target id), label smoothing over the
GLOBAL vocab (eps / V with the global V; a known bug elsewhere averages over the local shard),
softcap, z-loss on the global log-sum-exp, class weights sharded with the vocab
(`class_weight_shard` [V_local], the mean's denominator is the sum of the counted targets'
weights wherever they live), token weights, reductions none/mean/sum, `none` with any upstream
gradient. Every rank returns the same loss, in float32; `loss.backward()` on each rank leaves in
its shard the gradient of that global loss. A target outside [0, V) gives NaN, as on one GPU.

Collectives: ONE all_gather of a float32 [N + 1, 6] statistics tensor per rank (per row: local
max m_r, local sum of exp over the non-target classes, the target's logit and class weight where
the target lives, an ownership flag, and the smoothing sum sum_j w_j (m_r - x_j); one more row
with the shard width, its vocab_start and its class-weight sum), merged identically on every
rank. Label smoothing's term W * lse - sum_j w_j x_j is taken as W * log s + sum_j w_j (m - x_j)
(each rank's smoothing sum moved to the global max m): sums of terms >= 0, no cancellation (as
in kernels/cross_entropy.py; the subtraction loses every digit when the two are close). When
`vocab_start` is not given it is derived from one more all_gather of the shard widths (rank order
is vocab order): pass it to keep one collective. None in backward.

Memory: the gradient is formed in forward into a buffer of the shard's size and dtype
([N, V_local]; `inplace_backward=True` writes it into `logits_shard` instead, destroying it),
plus the gathered statistics (world * (N + 1) * 6 floats) and the loss rows (2 * N floats); the
PyTorch path adds float32 temporaries of at most _CHUNK_ELEMENTS elements (rows in chunks).
Backward rescales the rows in place by the upstream gradient (kernels/cross_entropy.py's
scale_rows_: rows whose factor is 1 are not touched, decided on the device), so one backward per
forward. With reduction="none" (per-row upstream gradients) forward keeps the shard and the
gathered statistics instead, and backward forms the gradient from them: a 16-bit gradient is
then rounded once, not twice.

`group`: a torch.distributed ProcessGroup, None for the default group (or a single process when
torch.distributed is not initialized), or any object with `rank()`, `size()` and
`all_gather_into_tensor(out, inp)` (an in-process simulation of ranks, for tests). A DTensor
sharded on its last dim over a 1-D mesh may be passed instead of a shard and a group.

On a GPU (`PASSES` "fused") the op is two Triton kernels around the collective
(kernels/vocab_parallel_passes.py): the statistics pass, which also locates the targets in the
shard, and a finishing kernel whose program per row merges every rank's statistics of the row,
stores the row's loss and z-loss, checks the layout (a flag, then one torch._assert_async) and
writes the gradient row. Apart from them a forward issues the all_gather, the mean's
denominator and the final sums: about a dozen launches, none of them a host sync. Elsewhere the
passes are PyTorch ops in float32 ("torch"); "triton" stages the two Triton passes with the
merge in PyTorch ops between them (as the vocab-parallel FLCE runs each of its chunks).
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from . import vocab_parallel_passes as passes
from .cross_entropy import (
    CheckTargets,
    Reduction,
    check_logits_and_target,
    finish_forward,
    resolve_check,
    scale_rows_,
    take_formed_grad,
    validate_loss_options,
)

N_STATS = 6  # columns of the per-rank statistics: m, s_o, x_y, owned, w_y, sum_j w_j (m - x_j)
_CHUNK_ELEMENTS = 1 << 22  # float32 temporaries per chunk of rows (16 MiB)
# Which implementation makes the per-shard passes: "fused" (Triton: the statistics pass, then one
# finishing kernel that merges, stores the loss rows and writes the gradient), "triton" (the two
# Triton passes with the merge and the loss rows in PyTorch ops between them), "torch" (PyTorch
# ops), or "auto": "fused" on a GPU, "torch" elsewhere (Triton's interpreter costs a program per
# row).
PASSES = "auto"
PASSES_CHOICES = ("auto", "fused", "triton", "torch")


def _passes(x: torch.Tensor) -> str:
    """ "fused", "triton" or "torch" for logits `x` (module docstring)."""
    if PASSES not in PASSES_CHOICES:
        raise ValueError(f"PASSES must be one of {PASSES_CHOICES}, got {PASSES!r}")
    if PASSES == "auto":
        return "fused" if x.is_cuda else "torch"
    return PASSES


def _triton_passes(x: torch.Tensor) -> bool:
    """The per-shard passes in Triton (the fused path's, for the callers that stage them)."""
    return _passes(x) != "torch"


# ----------------------------------------------------------------------------- the group


def _is_torch_group(group) -> bool:
    return group is None or isinstance(group, dist.ProcessGroup)


def group_rank_size(group) -> tuple[int, int]:
    """(rank, world size) of `group`; (0, 1) when torch.distributed is not initialized."""
    if not _is_torch_group(group):
        return group.rank(), group.size()
    if not dist.is_available() or not dist.is_initialized():
        return 0, 1
    return dist.get_rank(group), dist.get_world_size(group)


def all_gather(inp: torch.Tensor, group) -> torch.Tensor:
    """[world, *inp.shape]: every rank's `inp`, in rank order."""
    _, world = group_rank_size(group)
    out = torch.empty((world, *inp.shape), dtype=inp.dtype, device=inp.device)
    if world == 1:
        out[0] = inp
    elif _is_torch_group(group):
        # flat buffers: gloo wants the output as the inputs concatenated on dim 0
        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        gather(out.view(-1), inp.contiguous().view(-1), group=group)
    else:
        group.all_gather_into_tensor(out, inp.contiguous())
    return out


def all_reduce_(t: torch.Tensor, group) -> torch.Tensor:
    """`t` summed over the group, in place, on every rank (a contiguous tensor); returns it."""
    _, world = group_rank_size(group)
    if world == 1:
        return t
    if _is_torch_group(group):
        dist.all_reduce(t, group=group)
    else:
        group.all_reduce(t)
    return t


def shard_offsets(v_local: int, group, device) -> tuple[int, int]:
    """(vocab_start of this rank, global V) from one all_gather of the shard widths."""
    rank, _ = group_rank_size(group)
    widths = all_gather(torch.tensor([v_local], dtype=torch.int64, device=device), group).reshape(-1).tolist()
    return int(sum(widths[:rank])), int(sum(widths))


# ----------------------------------------------------------------------------- per-shard passes


def _chunks(n_rows: int, n_cols: int):
    step = max(1, _CHUNK_ELEMENTS // max(n_cols, 1))
    for r0 in range(0, n_rows, step):
        yield r0, min(n_rows, r0 + step)


def _capped(x: torch.Tensor, softcap: float | None) -> torch.Tensor:
    x = x.float()
    return softcap * torch.tanh(x / softcap) if softcap else x


def _local_stats(x_shard, local_t, owned, w, label_smoothing, softcap) -> torch.Tensor:
    """Pass 1 over this shard: [N, N_STATS] float32 statistics."""
    n_rows, n_cols = x_shard.shape
    stats = torch.zeros(n_rows, N_STATS, dtype=torch.float32, device=x_shard.device)
    stats[:, 0] = float("-inf")
    if n_cols == 0:
        return stats
    if _triton_passes(x_shard):
        passes.shard_stats(x_shard, local_t, owned, w, label_smoothing, softcap, stats)
        return stats
    for r0, r1 in _chunks(n_rows, n_cols):
        x = _capped(x_shard[r0:r1], softcap)
        rows = torch.arange(r1 - r0, device=x.device)
        own, lt = owned[r0:r1], local_t[r0:r1]
        m = x.amax(dim=1)
        # a row wholly -inf on this shard (a sampler's mask): its max is -inf, and exp(x - m) would
        # be exp(-inf - -inf) = NaN; about 0 instead its terms are 0 (elsewhere m, bit for bit)
        e = torch.exp(x - torch.where(m > float("-inf"), m, 0.0)[:, None])
        x_y = x[rows, lt]
        # the target's term is left out of the sum rather than subtracted from it: p_y - 1 =
        # -s_o / s stays exact when p_y is close to 1 (docs/bugs.md, bug 6)
        e[rows, lt] = torch.where(own, 0.0, e[rows, lt])
        stats[r0:r1, 0] = m
        stats[r0:r1, 1] = e.sum(dim=1)
        stats[r0:r1, 2] = torch.where(own, x_y, 0.0)
        stats[r0:r1, 3] = own.float()
        stats[r0:r1, 4] = torch.where(own, w[lt] if w is not None else 1.0, 0.0)
        if label_smoothing > 0.0:
            gap = m[:, None] - x  # >= 0: the smoothing sum without cancellation (module docstring)
            stats[r0:r1, 5] = (gap * w).sum(dim=1) if w is not None else gap.sum(dim=1)
    return stats


class _Merged:
    """The global per-row quantities, identical on every rank, from the gathered statistics
    ([world, N + 1, N_STATS]); `rank` is this rank's index in them."""

    def __init__(self, gathered: torch.Tensor, n_rows: int, has_w: bool, rank: int):
        self.rank = rank
        self.rows, extra = gathered[:, :n_rows], gathered[:, n_rows]
        m_r = self.rows[..., 0]
        self.m = m_r.amax(dim=0)
        # a shard wholly -inf in a row adds nothing (its own sum may be NaN: the Triton pass's
        # exp(-inf - -inf)); elsewhere the same product, bit for bit
        self.s_o = torch.where(m_r > float("-inf"), self.rows[..., 1] * torch.exp(m_r - self.m), 0.0).sum(dim=0)
        self.x_y = self.rows[..., 2].sum(dim=0)
        self.owners = self.rows[..., 3].sum(dim=0)
        self.w_y = self.rows[..., 4].sum(dim=0)
        self.widths = extra[:, 0]
        self.starts = extra[:, 1]
        self.v = extra[:, 0].sum()  # global V, a device scalar
        w_r = extra[:, 2] if has_w else self.widths  # each shard's class-weight sum
        self.w_all = w_r.sum()
        # sum_j w_j (m - x_j) over the global vocab: each rank's sum about its own max, moved to
        # the global max (every term >= 0; an empty shard adds nothing)
        lift = torch.where(w_r[:, None] > 0, w_r[:, None] * (self.m - m_r), 0.0)
        self.gap_w = (self.rows[..., 5] + lift).sum(dim=0)
        self.derive()

    def derive(self) -> None:
        self.e_y = torch.exp(self.x_y - self.m)
        self.s = self.s_o + self.e_y
        self.log_s = torch.log(self.s)
        self.lse = self.m + self.log_s


def owns(local_t: torch.Tensor, n_cols: int, counted: torch.Tensor) -> torch.Tensor:
    """Rows whose (counted) target lives in this shard."""
    return counted & (local_t >= 0) & (local_t < n_cols)


def locate_targets(t: torch.Tensor, vocab_start: int, n_cols: int, ignore_index: int, owns_fn=owns):
    """(counted, local ids clamped into the shard, owned) of the global targets `t` for the shard
    of `n_cols` classes starting at `vocab_start`; `owns_fn` is `owns` unless a planted bug
    replaces it."""
    counted = t != ignore_index
    local_t = t - vocab_start
    owned = owns_fn(local_t, n_cols, counted)
    return counted, local_t.clamp(0, max(n_cols - 1, 0)), owned


def check_layout(check_targets, tiling, target: torch.Tensor, ignore_index: int) -> None:
    """The shards tile [0, V) and the targets lie in it: on the host, on the device (no sync) or
    not at all, as `check_targets` resolves on the targets' device."""
    check = resolve_check(check_targets, target.device)
    if check == "host":
        _check_layout(tiling, target, ignore_index)
    elif check == "device":
        _check_layout_on_device(tiling, target, ignore_index)


def _check_layout(merged: _Merged, target: torch.Tensor, ignore_index: int) -> None:
    """Shards must tile [0, V) and targets lie in it (or be ignore_index): one host sync."""
    starts, widths = merged.starts.tolist(), merged.widths.tolist()
    pos = 0.0
    for start, width in sorted(zip(starts, widths, strict=True)):
        if start != pos:
            raise ValueError(f"vocab shards do not tile [0, V): starts {starts}, widths {widths}")
        pos += width
    bad = ((target < 0) | (target >= pos)) & (target != ignore_index)
    if bool(bad.any()):
        first = int(target[bad][0])
        raise ValueError(f"target holds {first}, outside [0, {int(pos)}) and not ignore_index={ignore_index}")


LAYOUT_ERROR = "vocab shards do not tile [0, V), or a target is outside it and not ignore_index"


def _check_layout_on_device(merged: _Merged, target: torch.Tensor, ignore_index: int) -> None:
    """The same checks with no host sync (torch._assert_async: on a GPU the error comes back at
    the next CUDA call, on CPU it raises RuntimeError)."""
    order = torch.argsort(merged.starts)
    starts, widths = merged.starts[order], merged.widths[order]
    tiles = (starts == torch.cumsum(widths, 0) - widths).all()
    v = widths.sum()
    bad = (((target < 0) | (target >= v)) & (target != ignore_index)).any()
    torch._assert_async(tiles & ~bad, LAYOUT_ERROR)


def _rows(merged: _Merged, counted, valid, token_weight, label_smoothing, z_loss_scale):
    """Per-row float32 (loss, z_loss), as kernels/cross_entropy.py's _row_finish."""
    eps = label_smoothing
    # lse - x_y as log1p(s_o * exp(m - x_y)) below a gap of 30: no cancellation on confident rows
    # (kernels/triton_math.py, target_nll)
    gap = merged.m - merged.x_y
    nll = torch.where(gap < 30.0, torch.log1p(merged.s_o * torch.exp(gap.clamp(max=30.0))), gap + merged.log_s)
    loss = merged.w_y * nll
    if eps > 0.0:
        # W * lse - sum_j w_j x_j = W * log s + sum_j w_j (m - x_j): two sums of terms >= 0
        loss = (1.0 - eps) * loss + eps / merged.v * (merged.w_all * merged.log_s + merged.gap_w)
    zl = z_loss_scale * merged.lse * merged.lse if z_loss_scale else torch.zeros_like(loss)
    tw = token_weight if token_weight is not None else 1.0
    loss, zl = tw * (loss + zl), tw * zl
    nan = torch.full_like(loss, float("nan"))
    loss = torch.where(counted, torch.where(valid, loss, nan), 0.0)
    zl = torch.where(counted, torch.where(valid, zl, nan), 0.0)
    return loss, zl


def _write_grad(x_shard, grad, merged, local_t, owned, counted, valid, w, token_weight, denom, opts) -> None:
    """Pass 2 over this shard: the gradient of sum(loss) (or sum(loss) / denom) into `grad`."""
    eps, softcap, z = opts
    n_rows, n_cols = x_shard.shape
    if n_cols == 0:
        return
    w_y, lse, s = merged.w_y, merged.lse, merged.s
    p_y = merged.e_y / s
    a = w_y.clone()
    g_y = w_y * (-merged.s_o / s)  # p_y - 1 = -s_o / s, exact (docs/bugs.md, bug 6)
    if eps > 0.0:
        a = (1.0 - eps) * w_y + eps * merged.w_all / merged.v
        g_y = (1.0 - eps) * g_y + eps / merged.v * (merged.w_all * p_y - w_y)
    if z:
        a = a + 2.0 * z * lse
        g_y = g_y + 2.0 * z * lse * p_y
    scale = token_weight if token_weight is not None else torch.ones_like(lse)
    if denom is not None:
        scale = scale / denom
    scale = torch.where(valid, scale, float("nan"))
    if _triton_passes(x_shard):
        rows = {"m": merged.m, "log_s": merged.log_s, "a": a, "g_y": g_y, "scale": scale}
        eps_v = (eps / merged.v).float().reshape(1) if eps > 0.0 else None
        passes.shard_grad(x_shard, grad, local_t, owned, counted, rows, w, eps_v, softcap)
        return
    for r0, r1 in _chunks(n_rows, n_cols):
        raw = x_shard[r0:r1].float()
        x = _capped(raw, softcap)
        rows = torch.arange(r1 - r0, device=x.device)
        g = torch.exp((x - merged.m[r0:r1, None]) - merged.log_s[r0:r1, None]) * a[r0:r1, None]
        if eps > 0.0:
            g = g - eps / merged.v * (w[None, :] if w is not None else 1.0)
        own, lt = owned[r0:r1], local_t[r0:r1]
        g[rows, lt] = torch.where(own, g_y[r0:r1], g[rows, lt])
        g = g * scale[r0:r1, None]
        if softcap:
            # sech^2 = 4e / (1 + e)^2, e = exp(-2|u|): 1 - tanh^2 loses its digits where |tanh|
            # -> 1 (2e-5 relative on large fp32 logits against a limit of 7e-7), as the Triton
            # passes' softcap_and_slope already knew
            e = torch.exp(-2.0 * (raw / softcap).abs())
            g = g * (4.0 * e / ((1.0 + e) * (1.0 + e)))
        g = torch.where(counted[r0:r1, None], g, 0.0)
        grad[r0:r1] = g.to(grad.dtype)


def _scale_rows(grad: torch.Tensor, upstream: torch.Tensor) -> None:
    """grad[i] *= upstream[i] in place, in float32 and rounded once. On a GPU our Triton
    kernel (rows whose factor is 1 untouched, decided on the device); on CPU PyTorch ops in
    chunks of rows (Triton's interpreter would cost a program launch per row)."""
    if grad.numel() == 0:
        return
    if grad.is_cuda:
        scale_rows_(grad, upstream)
        return
    up = upstream.reshape(-1).float()
    up = up.expand(grad.shape[0]) if up.numel() == 1 else up
    for r0, r1 in _chunks(*grad.shape):
        grad[r0:r1] = (grad[r0:r1].float() * up[r0:r1, None]).to(grad.dtype)


class Tiling:
    """Every rank's shard (width, vocab_start), read from the gathered statistics' last row."""

    def __init__(self, gathered: torch.Tensor, n_rows: int):
        self.widths = gathered[:, n_rows, 0]
        self.starts = gathered[:, n_rows, 1]


def _fused_forward(x, want_grad, t, w, tw, group, vocab_start, ignore_index, reduction, opts, check_targets):
    """The fused path (PASSES "fused", the default on a GPU): the statistics pass, the one
    all_gather, then one finishing kernel per row that merges the ranks' statistics, stores the
    loss rows and writes the gradient (kernels/vocab_parallel_passes.py). `want_grad`: None,
    "buffer" (a new buffer, allocated once the statistics are freed: the peak holds the gradient
    and the gathered statistics, not both statistics) or "inplace" (into `x`). Returns (loss
    rows, z-loss rows, the mean's denominator or None, the gradient or None)."""
    eps, softcap, z = opts
    n_rows, _ = x.shape
    t = t.contiguous()
    stats = torch.empty(n_rows + 1, N_STATS, dtype=torch.float32, device=x.device)
    passes.located_stats(x, t, vocab_start, ignore_index, w, eps, softcap, stats)
    gathered = all_gather(stats, group)  # the one collective
    del stats
    check = resolve_check(check_targets, x.device)
    if check == "host":
        _check_layout(Tiling(gathered, n_rows), t, ignore_index)
    denom = None
    if reduction == "mean":  # counted rows, or the sum of their class weights (0 where ignored)
        counted_w = gathered[:, :n_rows, 4]
        denom = counted_w.sum() if w is not None else (t != ignore_index).sum(dtype=torch.float32)
    grad = x if want_grad == "inplace" else (torch.empty_like(x) if want_grad == "buffer" else None)
    loss_rows = torch.empty(n_rows, dtype=torch.float32, device=x.device)
    z_rows = torch.empty_like(loss_rows)
    bad = torch.zeros(1, dtype=torch.int32, device=x.device) if check == "device" else None
    if n_rows:
        passes.finish(
            x, grad, t, tw.contiguous() if tw is not None else None, gathered, denom, w, loss_rows, z_rows, bad,
            vocab_start=vocab_start, ignore_index=ignore_index, label_smoothing=eps, softcap=softcap, z_loss_scale=z,
        )  # fmt: skip
    if bad is not None:
        torch._assert_async(bad[0] == 0, LAYOUT_ERROR)

    def regrad(tw_up: torch.Tensor) -> torch.Tensor:  # reduction "none": from the kept statistics
        out, scratch = torch.empty_like(x), torch.empty(2, n_rows, dtype=torch.float32, device=x.device)
        if n_rows:
            passes.finish(
                x, out, t, tw_up.contiguous(), gathered, None, w, scratch[0], scratch[1], None,
                vocab_start=vocab_start, ignore_index=ignore_index, label_smoothing=eps, softcap=softcap,
                z_loss_scale=z,
            )  # fmt: skip
        return out

    return loss_rows, z_rows, denom, grad, regrad


# ----------------------------------------------------------------------------- autograd


def _validate(logits, target, class_weight, token_weight, reduction, label_smoothing, softcap):
    check_logits_and_target(logits, target, "logits_shard", "V_local")
    validate_loss_options(
        logits.shape[-1], target, class_weight, token_weight, reduction, label_smoothing, softcap,
        device=logits.device, names=("class_weight_shard", "logits_shard"),
    )  # fmt: skip


class VocabParallelCrossEntropyFunction(torch.autograd.Function):
    """The op's autograd Function. Its replaceable parts are class attributes, so a variant (a
    planted bug in suites/vp_ce/mutants.py) is a subclass that overrides them, and says so:
      OWNS     which rows' targets this shard holds (`owns`);
      MERGED   the merge of the ranks' gathered statistics (`_Merged`);
      FUSED    whether a GPU may take the fused Triton path (True). The fused kernels do OWNS's
               and MERGED's work inside Triton, so a subclass that replaces either sets it False
               and runs on the staged path, where those parts run."""

    OWNS = staticmethod(owns)
    MERGED = _Merged
    FUSED = True

    # apply's arguments by position (autograd.Function takes no keywords): this op's options, its own
    @classmethod
    def forward(cls, ctx, logits, target, class_weight, token_weight, group, vocab_start, ignore_index, reduction,
                label_smoothing, softcap, z_loss_scale, inplace_backward, check_targets):  # fmt: skip
        _validate(logits, target, class_weight, token_weight, reduction, label_smoothing, softcap)
        shape = logits.shape
        n_cols = shape[-1]
        x = logits.reshape(target.numel(), n_cols)
        if x.stride(-1) != 1 and n_cols > 0:
            x = x.contiguous()
        dev = x.device
        tw = token_weight.reshape(-1).float() if token_weight is not None else None
        w = class_weight.float() if class_weight is not None else None
        if vocab_start is None:
            vocab_start, _ = shard_offsets(n_cols, group, dev)
        opts = (label_smoothing, softcap, z_loss_scale)
        # reduction="none" with a fresh buffer: the gradient is formed in backward, where each
        # row's upstream is known, so a 16-bit gradient is rounded once (kernels/cross_entropy.py)
        deferred = ctx.needs_input_grad[0] and reduction == "none" and not inplace_backward
        want = ("inplace" if inplace_backward else "buffer") if ctx.needs_input_grad[0] and not deferred else None
        loss_rows, z_rows, denom, grad, regrad = cls._run(
            x, target.reshape(-1), w, tw, group, vocab_start, ignore_index, reduction, opts, check_targets, want
        )
        ctx.regrad = regrad if deferred else None
        if deferred:
            ctx.save_for_backward(tw)
        return finish_forward(ctx, loss_rows, z_rows, reduction, denom, grad, shape)

    @classmethod
    def _run(cls, x, target, w, tw, group, vocab_start, ignore_index, reduction, opts, check_targets, want):
        """(loss rows, z-loss rows, the mean's denominator or None, the gradient or None, regrad)
        of the flattened call; `want`: None, "buffer" or "inplace" (into `x`), as _fused_forward.
        regrad(token_weight) forms the gradient of reduction "none" again from the statistics
        this call gathered, with no collective: backward may run on another thread (autograd's
        CUDA worker), where a collective of simulated ranks could not meet its peers."""
        if cls.FUSED and _passes(x) == "fused":
            return _fused_forward(
                x, want, target, w, tw, group, vocab_start, ignore_index, reduction, opts, check_targets
            )
        t = target.long()
        n_rows, n_cols = x.shape
        dev = x.device
        label_smoothing, _, z_loss_scale = opts
        counted, local_t, owned = locate_targets(t, vocab_start, n_cols, ignore_index, cls.OWNS)

        stats = torch.zeros(n_rows + 1, N_STATS, dtype=torch.float32, device=dev)
        stats[:n_rows] = _local_stats(x, local_t, owned, w, label_smoothing, opts[1])
        stats[n_rows, 0] = float(n_cols)
        stats[n_rows, 1] = float(vocab_start)
        if w is not None:
            stats[n_rows, 2] = w.sum()
        rank, _ = group_rank_size(group)
        merged = cls.MERGED(all_gather(stats, group), n_rows, w is not None, rank)  # the one collective
        check_layout(check_targets, merged, t, ignore_index)
        valid = merged.owners == 1.0
        loss_rows, z_rows = _rows(merged, counted, valid, tw, label_smoothing, z_loss_scale)
        denom = None
        if reduction == "mean":
            denom = torch.where(counted, merged.w_y, 0.0).sum() if w is not None else counted.sum(dtype=torch.float32)
        grad = None
        if want is not None:
            grad = x if want == "inplace" else torch.empty_like(x)
            _write_grad(x, grad, merged, local_t, owned, counted, valid, w, tw, denom, opts)

        def regrad(tw_up: torch.Tensor) -> torch.Tensor:
            out = torch.empty_like(x)
            _write_grad(x, out, merged, local_t, owned, counted, valid, w, tw_up, None, opts)
            return out

        return loss_rows, z_rows, denom, grad, regrad

    @staticmethod
    def backward(ctx, grad_loss, _grad_zloss):
        if ctx.regrad is not None:
            (tw,) = ctx.saved_tensors
            up = grad_loss.reshape(-1).float()
            grad = ctx.regrad(up if tw is None else tw * up)
        else:
            grad = take_formed_grad(ctx, "vocab_parallel_cross_entropy")
            _scale_rows(grad, grad_loss)
        return (grad.view(ctx.grad_shape),) + (None,) * 12


def _from_dtensors(logits, target, group, vocab_start, class_weight, token_weight):
    try:
        from torch.distributed.tensor import DTensor, Shard
    except ImportError:  # a torch without DTensor
        return logits, target, group, vocab_start, class_weight, token_weight
    if not isinstance(logits, DTensor):
        return logits, target, group, vocab_start, class_weight, token_weight
    mesh, placements = logits.device_mesh, logits.placements
    last = logits.dim() - 1
    if mesh.ndim != 1 or not (isinstance(placements[0], Shard) and placements[0].dim in (last, -1)):
        raise ValueError(f"a DTensor logits must be sharded on its last dim over a 1-D mesh, got {placements}")
    if group is not None or vocab_start is not None:
        raise ValueError("with DTensor logits the group and vocab_start come from the DTensor: leave them out")

    def local(t):
        return t.to_local() if isinstance(t, DTensor) else t

    return local(logits), local(target), mesh.get_group(), None, local(class_weight), local(token_weight)


def vocab_parallel_cross_entropy(
    logits_shard: torch.Tensor,
    target: torch.Tensor,
    *,
    group=None,
    vocab_start: int | None = None,
    ignore_index: int = -100,
    reduction: Reduction = "mean",
    label_smoothing: float = 0.0,
    softcap: float | None = None,
    z_loss_scale: float = 0.0,
    class_weight_shard: torch.Tensor | None = None,
    token_weight: torch.Tensor | None = None,
    return_z_loss: bool = False,
    inplace_backward: bool = False,
    check_targets: CheckTargets = True,
):
    """Cross entropy of logits sharded on the vocab dim (module docstring: semantics,
    collectives, memory). `logits_shard` [N, V_local] or [B, T, V_local] holds global classes
    [vocab_start, vocab_start + V_local); `target` [N] or [B, T] holds GLOBAL class ids, the same
    on every rank; `class_weight_shard` [V_local] the class weights of this shard; `token_weight`
    the per-token weights (the same on every rank). Returns the float32 loss (the same on every
    rank), or (loss, z_loss) with return_z_loss=True. check_targets (as in cross_entropy: True is
    "device" on a GPU, no host sync, and "host" elsewhere, which raises a ValueError naming the
    value) checks that the shards tile [0, V) and the targets lie in it; False skips it (bad
    targets then give NaN).

    `logits_shard` may also be a DTensor on a 1-D device mesh, sharded on its last dim: its
    local shard, the mesh's group and the derived offsets are used (`group` and `vocab_start`
    must then be left out); `target`, `token_weight` and `class_weight_shard` may be DTensors
    too (replicated, replicated, and sharded like the logits)."""
    logits_shard, target, group, vocab_start, class_weight_shard, token_weight = _from_dtensors(
        logits_shard, target, group, vocab_start, class_weight_shard, token_weight
    )
    loss, zloss = VocabParallelCrossEntropyFunction.apply(
        logits_shard, target, class_weight_shard, token_weight, group, vocab_start, ignore_index, reduction,
        label_smoothing, softcap, z_loss_scale, inplace_backward, check_targets,
    )  # fmt: skip
    return (loss, zloss) if return_z_loss else loss
