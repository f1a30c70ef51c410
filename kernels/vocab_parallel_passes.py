"""The two per-shard passes of the vocab-parallel losses, in Triton (the GPU path).

kernels/vocab_parallel_cross_entropy.py (and the fused linear one, through it) makes two passes
over a rank's logits shard [N, V_local] with the one all_gather of row statistics between them:

  pass 1  `shard_stats`: per row, this shard's max m, sum of exp(x - m) over the non-target
          classes s_o, the (capped) target logit where the target lives here, an ownership flag,
          the target's class weight, and the smoothing sum sum_j w_j (m - x_j): the [N, 6] float32
          statistics the ranks exchange (columns as N_STATS there);
  pass 2  `shard_grad`: from the merged global per-row quantities (m, log s, the factor a on
          every probability, the target's own gradient g_y, the row scale), the gradient of
          this shard, written into `grad` (which may be the logits themselves).

One program per row; each pass reads the row once in blocks, accumulating in float32. The
global statistics are only known after the gather, so the row cannot stay in L2 between the
passes as in the single-GPU kernel: the floor is read, read, write (3 * N * V_local * bytes).
The same formulas as the PyTorch passes in that file (the CPU path, and the truth these are
tested against, through Triton's interpreter): tests/test_vp_passes.py.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .cross_entropy import _INTERPRETED, _launch_config, _row_stats, _zero_row
from .triton_math import cap_block, softcap_and_slope, target_nll, to_store
from .triton_mode import device_function


@device_function
def _shard_row_stats(x_row, t_here, V, w_ptr, cap, BLOCK_V: tl.constexpr, SOFTCAP: tl.constexpr,
                     SMOOTH: tl.constexpr, HAS_CLASS_W: tl.constexpr):  # fmt: skip
    """One read of a row of the shard: (max m, sum of exp(x - m) over the classes but the one at
    local id t_here (-1: none here), the smoothing sum sum_j w_j (m - x_j)), in float32: the
    single-GPU kernel's pass 1 (kernels/cross_entropy.py's _row_stats), no L2 hint (the row
    is not read again before every row has been: the gather comes between)."""
    m, s_o, gap, _ = _row_stats(x_row, w_ptr, t_here, V, cap, BLOCK_V, SOFTCAP, SMOOTH, HAS_CLASS_W, "", 0)
    return m, s_o, gap


@device_function
def _store_row_stats(x_row, out, lt, own, m, s_o, gap, w_ptr, cap, SOFTCAP: tl.constexpr, HAS_CLASS_W: tl.constexpr):
    """The row's 6 statistics (columns as N_STATS) at `out`: the target's (capped) logit and
    class weight only where this shard owns the target."""
    x_y = tl.load(x_row + lt, mask=own, other=0.0).to(tl.float32)
    if SOFTCAP:
        x_y, _ = softcap_and_slope(x_y, cap)
    if HAS_CLASS_W:
        w_y = tl.load(w_ptr + lt, mask=own, other=0.0).to(tl.float32)
    else:
        w_y = 1.0
    tl.store(out, m)
    tl.store(out + 1, s_o)
    tl.store(out + 2, tl.where(own, x_y, 0.0))
    tl.store(out + 3, tl.where(own, 1.0, 0.0))
    tl.store(out + 4, tl.where(own, w_y, 0.0))
    tl.store(out + 5, gap)


@device_function
def _write_row_grad(x_row, g_row, t_here, V, m, log_s, a, g_y, scale, w_ptr, eps_v, cap, BLOCK_V: tl.constexpr,
                    SOFTCAP: tl.constexpr, SMOOTH: tl.constexpr, HAS_CLASS_W: tl.constexpr,
                    ROUND_BY_HAND: tl.constexpr, SYNC: tl.constexpr):  # fmt: skip
    """One read of a row, one write of its gradient: (p_j * a - eps_v * w_j, or g_y at the
    target) * scale, times the softcap's slope. The row is walked from its first block, so a
    16-bit gradient may lie under float32 logits (fp32_products.grad_under_logits) with SYNC: a
    barrier before each block's store, since a warp ahead would otherwise store over logits a
    warp behind has yet to load (docs/bugs.md, bug 9)."""
    offs = tl.arange(0, BLOCK_V)
    for b in range(0, tl.cdiv(V, BLOCK_V)):
        cols = b * BLOCK_V + offs
        in_row = cols < V
        x_raw = tl.load(x_row + cols, mask=in_row, other=0.0)
        x, dx = cap_block(x_raw, in_row, cap, SOFTCAP)
        g = tl.exp((x - m) - log_s) * a
        if SMOOTH:
            if HAS_CLASS_W:
                w = tl.load(w_ptr + cols, mask=in_row, other=0.0).to(tl.float32)
            else:
                w = 1.0
            g -= eps_v * w
        g = tl.where(cols == t_here, g_y, g) * scale
        if SOFTCAP:
            g = g * dx
        if SYNC:
            tl.debug_barrier()
        tl.store(g_row + cols, to_store(g, g_row.dtype.element_ty, ROUND_BY_HAND), mask=in_row)


# ----------------------------------------------------------------------------- the staged passes


@triton.jit
def _stats_kernel(
    x_ptr,
    stride_x,
    lt_ptr,  # local target id, clamped into [0, V_local) (read only where owned)
    own_ptr,  # int8: 1 where this shard holds the row's (counted) target
    w_ptr,  # class weights of the shard (read only if HAS_CLASS_W)
    stats_ptr,  # [N, 6] float32, rows 6 apart
    V, cap,
    BLOCK_V: tl.constexpr, SOFTCAP: tl.constexpr, SMOOTH: tl.constexpr, HAS_CLASS_W: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_x
    own = tl.load(own_ptr + row) != 0
    lt = tl.load(lt_ptr + row).to(tl.int64)
    m, s_o, gap = _shard_row_stats(x_row, tl.where(own, lt, -1), V, w_ptr, cap, BLOCK_V, SOFTCAP, SMOOTH, HAS_CLASS_W)
    _store_row_stats(x_row, stats_ptr + row * 6, lt, own, m, s_o, gap, w_ptr, cap, SOFTCAP, HAS_CLASS_W)


# the shard's rows and options as _stats_kernel takes them: each kernel's launch takes them as arguments of its own
@triton.jit
def _grad_kernel(
    x_ptr, stride_x, g_ptr, stride_g, lt_ptr, own_ptr,
    counted_ptr,  # int8: 0 for an ignored row (its gradient is 0)
    m_ptr, log_s_ptr, a_ptr, gy_ptr, scale_ptr, w_ptr,
    eps_v_ptr,  # [1] float32: label smoothing / global V (read only if SMOOTH)
    V, cap,
    BLOCK_V: tl.constexpr, SOFTCAP: tl.constexpr, SMOOTH: tl.constexpr, HAS_CLASS_W: tl.constexpr,
    ROUND_BY_HAND: tl.constexpr, SYNC: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_x
    g_row = g_ptr + row * stride_g
    if tl.load(counted_ptr + row) != 0:
        own = tl.load(own_ptr + row) != 0
        t_here = tl.where(own, tl.load(lt_ptr + row).to(tl.int64), -1)
        eps_v = 0.0
        if SMOOTH:
            eps_v = tl.load(eps_v_ptr)
        _write_row_grad(
            x_row, g_row, t_here, V, tl.load(m_ptr + row), tl.load(log_s_ptr + row), tl.load(a_ptr + row),
            tl.load(gy_ptr + row), tl.load(scale_ptr + row), w_ptr, eps_v, cap, BLOCK_V, SOFTCAP, SMOOTH,
            HAS_CLASS_W, ROUND_BY_HAND, SYNC,
        )  # fmt: skip
    else:
        _zero_row(g_row, V, g_ptr, BLOCK_V, True, 0)


# ----------------------------------------------------------------------------- the fused path


@triton.jit
def _located_stats_kernel(
    x_ptr,
    stride_x,
    t_ptr,  # GLOBAL target ids [N]
    w_ptr,  # class weights of the shard (read only if HAS_CLASS_W)
    stats_ptr,  # [N + 1, 6] float32: the rows' statistics, then the shard's row
    n_rows,
    vocab_start,
    ignore_index,
    V,
    cap,
    BLOCK_V: tl.constexpr,
    SOFTCAP: tl.constexpr,
    SMOOTH: tl.constexpr,
    HAS_CLASS_W: tl.constexpr,
):
    """Pass 1 with the targets located here (counted, local id, owned) rather than by PyTorch
    ops; program 0 also writes the shard's row: width, vocab_start, class-weight sum."""
    row = tl.program_id(0).to(tl.int64)
    if row < n_rows:  # (one program runs when there are no rows, for the shard's row)
        x_row = x_ptr + row * stride_x
        t = tl.load(t_ptr + row).to(tl.int64)
        lt = t - vocab_start
        own = (t != ignore_index) & (lt >= 0) & (lt < V)
        lt = tl.minimum(tl.maximum(lt, 0), tl.maximum(V - 1, 0))
        m, s_o, gap = _shard_row_stats(
            x_row, tl.where(own, lt, -1), V, w_ptr, cap, BLOCK_V, SOFTCAP, SMOOTH, HAS_CLASS_W
        )  # fmt: skip
        _store_row_stats(x_row, stats_ptr + row * 6, lt, own, m, s_o, gap, w_ptr, cap, SOFTCAP, HAS_CLASS_W)
    if row == 0:
        w_sum = 0.0
        if HAS_CLASS_W:
            offs = tl.arange(0, BLOCK_V)
            for b in range(0, tl.cdiv(V, BLOCK_V)):
                cols = b * BLOCK_V + offs
                w_sum += tl.sum(tl.load(w_ptr + cols, mask=cols < V, other=0.0).to(tl.float32), 0)
        shard = stats_ptr + n_rows * 6
        tl.store(shard, V + 0.0)  # (+ 0.0: an int argument equal to 1 arrives as a constant)
        tl.store(shard + 1, vocab_start + 0.0)
        tl.store(shard + 2, w_sum)
        tl.store(shard + 3, 0.0)
        tl.store(shard + 4, 0.0)
        tl.store(shard + 5, 0.0)


@device_function
def _tiling_is_bad(shards_ptr, world, rank_stride):
    """1 unless the shards (width, start at shards_ptr + r * rank_stride) tile [0, V): each
    start equals the widths of the shards that start before it, and no two non-empty shards
    start at the same class."""
    bad = 0
    for r in range(0, world):
        w_r = tl.load(shards_ptr + r * rank_stride)
        s_r = tl.load(shards_ptr + r * rank_stride + 1)
        before = 0.0
        twins = 0
        for q in range(0, world):
            w_q = tl.load(shards_ptr + q * rank_stride)
            s_q = tl.load(shards_ptr + q * rank_stride + 1)
            before += tl.where(s_q < s_r, w_q, 0.0)
            twins += tl.where((q != r) & (s_q == s_r) & (w_q > 0) & (w_r > 0), 1, 0)
        bad = tl.where((before != s_r) | (twins > 0), 1, bad)
    return bad


@triton.jit
def _finish_kernel(
    x_ptr,
    stride_x,
    g_ptr,
    stride_g,
    t_ptr,  # GLOBAL target ids [N]
    tw_ptr,  # token weights [N] float32 (read only if HAS_TW)
    gath_ptr,  # [world, N + 1, 6] float32: every rank's statistics, in rank order
    denom_ptr,  # [1] float32: the mean's denominator (read only if HAS_DENOM)
    w_ptr,  # class weights of the shard (read only if HAS_CLASS_W)
    loss_ptr,  # [N] float32 out: the rows' loss
    z_ptr,  # [N] float32 out: the rows' z-loss
    bad_ptr,  # [1] int32: set to 1 by a target outside [0, V) or shards not tiling (if CHECK)
    world,
    n_rows,
    vocab_start,
    ignore_index,
    V,
    eps,
    z_scale,
    cap,
    BLOCK_V: tl.constexpr,
    SOFTCAP: tl.constexpr,
    SMOOTH: tl.constexpr,
    HAS_CLASS_W: tl.constexpr,
    HAS_TW: tl.constexpr,
    HAS_DENOM: tl.constexpr,
    Z_LOSS: tl.constexpr,
    WRITE_GRAD: tl.constexpr,
    CHECK: tl.constexpr,
    ROUND_BY_HAND: tl.constexpr,
    SYNC: tl.constexpr,
):
    """After the all_gather: per row, merge every rank's statistics, store the row's loss and
    z-loss, and write this shard's gradient row (one more read of the row, one write)."""
    row = tl.program_id(0).to(tl.int64)
    rank_stride = (n_rows + 1) * 6
    shards = gath_ptr + n_rows * 6
    t = tl.load(t_ptr + row).to(tl.int64)
    counted = t != ignore_index
    lt = t - vocab_start
    own = counted & (lt >= 0) & (lt < V)
    # the global V and class-weight sum, from the shards' rows
    v_all = 0.0
    w_all = 0.0
    for r in range(0, world):
        v_all += tl.load(shards + r * rank_stride)
        w_all += tl.load(shards + r * rank_stride + 2)
    if not HAS_CLASS_W:
        w_all = v_all
    # merge: the global max first, then every rank's sums moved to it
    m = float("-inf")
    for r in range(0, world):
        m = tl.maximum(m, tl.load(gath_ptr + r * rank_stride + row * 6))
    s_o = 0.0
    x_y = 0.0
    owners = 0.0
    w_y = 0.0
    gap = 0.0  # sum_j w_j (m - x_j) over the global vocab
    for r in range(0, world):
        st = gath_ptr + r * rank_stride + row * 6
        m_r = tl.load(st)
        # a shard wholly -inf in this row (a sampler's mask) has max -inf and a sum of
        # exp(-inf - -inf) = NaN: it adds nothing (elsewhere the same product, bit for bit)
        s_o += tl.where(m_r > float("-inf"), tl.load(st + 1) * tl.exp(m_r - m), 0.0)
        x_y += tl.load(st + 2)
        owners += tl.load(st + 3)
        w_y += tl.load(st + 4)
        if SMOOTH:
            if HAS_CLASS_W:  # the shard's class-weight sum, or its width
                w_r = tl.load(shards + r * rank_stride + 2)
            else:
                w_r = tl.load(shards + r * rank_stride)
            gap += tl.load(st + 5) + tl.where(w_r > 0.0, w_r * (m - m_r), 0.0)
    valid = owners == 1.0
    e_y = tl.exp(x_y - m)
    s = s_o + e_y
    log_s = tl.log(s)
    lse = m + log_s
    eps_v = eps / v_all
    loss = w_y * target_nll(m, s_o, x_y, log_s)  # lse - x_y, no cancellation on confident rows
    if SMOOTH:  # W * lse - sum_j w_j x_j, as W * log s + sum_j w_j (m - x_j): no cancellation
        loss = (1.0 - eps) * loss + eps_v * (w_all * log_s + gap)
    zl = 0.0
    if Z_LOSS:
        zl = z_scale * lse * lse
    tw = 1.0
    if HAS_TW:
        tw = tl.load(tw_ptr + row)
    nan = float("nan")
    tl.store(loss_ptr + row, tl.where(counted, tl.where(valid, tw * (loss + zl), nan), 0.0))
    tl.store(z_ptr + row, tl.where(counted, tl.where(valid, tw * zl, nan), 0.0))
    if CHECK:
        bad = counted & ((t < 0) | (t.to(tl.float32) >= v_all))
        if row == 0:
            bad = bad | (_tiling_is_bad(shards, world, rank_stride) != 0)
        if bad:
            tl.store(bad_ptr, 1)
    if WRITE_GRAD:
        x_row = x_ptr + row * stride_x
        g_row = g_ptr + row * stride_g
        if counted:
            p_y = e_y / s
            a = w_y
            g_y = w_y * (-s_o / s)  # p_y - 1 = -s_o / s, exact
            if SMOOTH:
                a = (1.0 - eps) * w_y + eps * w_all / v_all
                g_y = (1.0 - eps) * g_y + eps_v * (w_all * p_y - w_y)
            if Z_LOSS:
                a = a + 2.0 * z_scale * lse
                g_y = g_y + 2.0 * z_scale * lse * p_y
            scale = tw
            if HAS_DENOM:
                scale = scale / tl.load(denom_ptr)
            scale = tl.where(valid, scale, nan)
            t_here = tl.where(own, lt, -1)
            _write_row_grad(
                x_row, g_row, t_here, V, m, log_s, a, g_y, scale, w_ptr, eps_v, cap, BLOCK_V, SOFTCAP, SMOOTH,
                HAS_CLASS_W, ROUND_BY_HAND, SYNC,
            )  # fmt: skip
        else:
            _zero_row(g_row, V, g_ptr, BLOCK_V, True, 0)


def _flags(t: torch.Tensor) -> torch.Tensor:
    return t.to(torch.int8)


def _laid_under(grad: torch.Tensor | None, x: torch.Tensor) -> bool:
    """Whether `grad` is a gradient of another dtype laid in x's own storage (a 16-bit gradient
    under float32 logits: fp32_products.grad_under_logits), which the row's walk must fence."""
    if grad is None or grad.dtype == x.dtype or grad.numel() == 0 or x.numel() == 0:
        return False
    return grad.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()


def _row_options(x: torch.Tensor, softcap, smooth: bool, w) -> dict:
    """The launch options every per-shard pass shares: cross entropy's block and warps for rows
    of x's width, and the softcap, smoothing and class-weight switches."""
    block_v, num_warps = _launch_config(x.shape[1], x.device)
    return dict(BLOCK_V=block_v, SOFTCAP=bool(softcap), SMOOTH=smooth, HAS_CLASS_W=w is not None, num_warps=num_warps)


def shard_stats(x, local_t, owned, w, label_smoothing: float, softcap, out: torch.Tensor) -> None:
    """Pass 1 into `out` [N, 6] float32 (row stride 6); x [N, V_local], last dim contiguous."""
    n_rows, n_cols = x.shape
    _stats_kernel[(n_rows,)](
        x,
        x.stride(0),
        local_t,
        _flags(owned),
        w if w is not None else out,
        out,
        n_cols,
        float(softcap) if softcap else 1.0,
        **_row_options(x, softcap, label_smoothing > 0.0, w),
    )


def shard_grad(x, grad, local_t, owned, counted, rows: dict, w, eps_v, softcap) -> None:
    """Pass 2 into `grad` [N, V_local] (may be `x`). `rows` holds float32 [N] vectors m, log_s,
    a, g_y, scale; `eps_v` a float32 [1] tensor (smoothing / global V) or None."""
    n_rows, n_cols = x.shape
    f32 = {k: v.float().contiguous() for k, v in rows.items()}
    _grad_kernel[(n_rows,)](
        x,
        x.stride(0),
        grad,
        grad.stride(0),
        local_t,
        _flags(owned),
        _flags(counted),
        f32["m"],
        f32["log_s"],
        f32["a"],
        f32["g_y"],
        f32["scale"],
        w if w is not None else f32["m"],
        eps_v if eps_v is not None else f32["m"],
        n_cols,
        float(softcap) if softcap else 1.0,
        ROUND_BY_HAND=_INTERPRETED,
        SYNC=_laid_under(grad, x),
        **_row_options(x, softcap, eps_v is not None, w),
    )


def _held(t: torch.Tensor | None, stand_in: torch.Tensor) -> torch.Tensor:
    """`t`, or `stand_in` where `t` is None or holds no element (an empty shard: the kernels
    never dereference it, and an empty tensor has no memory for Triton to point at)."""
    return t if t is not None and t.numel() else stand_in


def located_stats(x, t, vocab_start: int, ignore_index: int, w, label_smoothing: float, softcap, out) -> None:
    """Pass 1 of the fused path into `out` [N + 1, 6] float32: the rows' statistics with the
    targets located in the kernel, then the shard's row (width, vocab_start, class-weight sum)."""
    n_rows, n_cols = x.shape
    _located_stats_kernel[(max(n_rows, 1),)](
        _held(x, out),
        x.stride(0),
        _held(t, out),
        _held(w, out),
        out,
        n_rows,
        vocab_start,
        ignore_index,
        n_cols,
        float(softcap) if softcap else 1.0,
        **_row_options(x, softcap, label_smoothing > 0.0, w),
    )


def finish(x, grad, t, tw, gathered, denom, w, loss_rows, z_rows, bad, *, vocab_start: int, ignore_index: int,
           label_smoothing: float, softcap, z_loss_scale: float) -> None:  # fmt: skip
    """The fused path after the all_gather: the rows' loss and z-loss into `loss_rows`,
    `z_rows`, and (if `grad` is not None) the shard's gradient into `grad` (which may be `x`).
    `gathered` [world, N + 1, 6]; `denom` a float32 [1] tensor or None (no division); `bad` an
    int32 [1] tensor that a bad target or shard layout sets to 1, or None (no check)."""
    n_rows, n_cols = x.shape
    _finish_kernel[(n_rows,)](
        _held(x, loss_rows),
        x.stride(0),
        _held(grad, loss_rows),
        grad.stride(0) if grad is not None else x.stride(0),
        t,
        _held(tw, loss_rows),
        gathered,
        _held(denom, loss_rows),
        _held(w, loss_rows),
        loss_rows,
        z_rows,
        _held(bad, loss_rows),
        gathered.shape[0],
        n_rows,
        vocab_start,
        ignore_index,
        n_cols,
        float(label_smoothing),
        float(z_loss_scale),
        float(softcap) if softcap else 1.0,
        HAS_TW=tw is not None,
        HAS_DENOM=denom is not None,
        Z_LOSS=z_loss_scale != 0.0,
        WRITE_GRAD=grad is not None,
        CHECK=bad is not None,
        ROUND_BY_HAND=_INTERPRETED,
        SYNC=_laid_under(grad, x),
        **_row_options(x, softcap, label_smoothing > 0.0, w),
    )
