"""The two per-shard passes of the vocab-parallel losses, in Triton (the GPU path).

kernels/vocab_parallel_cross_entropy.py (and the fused linear one, through it) makes two passes
over a rank's logits shard [N, V_local] with the one all_gather of row statistics between them:

  pass 1  `shard_stats`: per row, this shard's max m, sum of exp(x - m) over the non-target
          classes s_o, the (capped) target logit where the target lives here, an ownership flag,
          the target's class weight, and the smoothing sum sum_j w_j x_j: the [N, 6] float32
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

from .cross_entropy import _INTERPRETED, _launch_config
from .triton_math import cap_block, softcap_and_slope, to_store


@triton.jit
def _stats_kernel(
    x_ptr,
    stride_x,
    lt_ptr,  # local target id, clamped into [0, V_local) (read only where owned)
    own_ptr,  # int8: 1 where this shard holds the row's (counted) target
    w_ptr,  # class weights of the shard (read only if HAS_CLASS_W)
    stats_ptr,  # [N, 6] float32, rows 6 apart
    V,
    cap,
    BLOCK_V: tl.constexpr,
    SOFTCAP: tl.constexpr,
    SMOOTH: tl.constexpr,
    HAS_CLASS_W: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_x
    own = tl.load(own_ptr + row) != 0
    lt = tl.load(lt_ptr + row).to(tl.int64)
    t_here = tl.where(own, lt, -1)
    offs = tl.arange(0, BLOCK_V)
    m = float("-inf")
    s_o = 0.0
    swx = 0.0
    for b in range(0, tl.cdiv(V, BLOCK_V)):
        cols = b * BLOCK_V + offs
        in_row = cols < V
        x_raw = tl.load(x_row + cols, mask=in_row, other=float("-inf"))
        x, _ = cap_block(x_raw, in_row, cap, SOFTCAP)
        m_new = tl.maximum(m, tl.max(x, 0))
        e = tl.where(cols == t_here, 0.0, tl.exp(x - m_new))
        s_o = s_o * tl.exp(m - m_new) + tl.sum(e, 0)
        if SMOOTH:
            if HAS_CLASS_W:
                w = tl.load(w_ptr + cols, mask=in_row, other=0.0).to(tl.float32)
            else:
                w = tl.where(in_row, 1.0, 0.0)
            swx += tl.sum(tl.where(in_row, w * x, 0.0), 0)
        m = m_new
    x_y = tl.load(x_row + lt, mask=own, other=0.0).to(tl.float32)
    if SOFTCAP:
        x_y, _ = softcap_and_slope(x_y, cap)
    if HAS_CLASS_W:
        w_y = tl.load(w_ptr + lt, mask=own, other=0.0).to(tl.float32)
    else:
        w_y = 1.0
    out = stats_ptr + row * 6
    tl.store(out, m)
    tl.store(out + 1, s_o)
    tl.store(out + 2, tl.where(own, x_y, 0.0))
    tl.store(out + 3, tl.where(own, 1.0, 0.0))
    tl.store(out + 4, tl.where(own, w_y, 0.0))
    tl.store(out + 5, swx)


@triton.jit
def _grad_kernel(
    x_ptr,
    stride_x,
    g_ptr,
    stride_g,
    lt_ptr,
    own_ptr,
    counted_ptr,  # int8: 0 for an ignored row (its gradient is 0)
    m_ptr,
    log_s_ptr,
    a_ptr,
    gy_ptr,
    scale_ptr,
    w_ptr,
    eps_v_ptr,  # [1] float32: label smoothing / global V (read only if SMOOTH)
    V,
    cap,
    BLOCK_V: tl.constexpr,
    SOFTCAP: tl.constexpr,
    SMOOTH: tl.constexpr,
    HAS_CLASS_W: tl.constexpr,
    ROUND_BY_HAND: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_x
    g_row = g_ptr + row * stride_g
    offs = tl.arange(0, BLOCK_V)
    n_blocks = tl.cdiv(V, BLOCK_V)
    if tl.load(counted_ptr + row) != 0:
        own = tl.load(own_ptr + row) != 0
        t_here = tl.where(own, tl.load(lt_ptr + row).to(tl.int64), -1)
        m = tl.load(m_ptr + row)
        log_s = tl.load(log_s_ptr + row)
        a = tl.load(a_ptr + row)
        g_y = tl.load(gy_ptr + row)
        scale = tl.load(scale_ptr + row)
        for b in range(0, n_blocks):
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
                g -= tl.load(eps_v_ptr) * w
            g = tl.where(cols == t_here, g_y, g) * scale
            if SOFTCAP:
                g = g * dx
            tl.store(g_row + cols, to_store(g, g_ptr.dtype.element_ty, ROUND_BY_HAND), mask=in_row)
    else:
        for b in range(0, n_blocks):
            cols = b * BLOCK_V + offs
            tl.store(g_row + cols, tl.zeros([BLOCK_V], dtype=g_ptr.dtype.element_ty), mask=cols < V)


def _flags(t: torch.Tensor) -> torch.Tensor:
    return t.to(torch.int8)


def shard_stats(x, local_t, owned, w, label_smoothing: float, softcap, out: torch.Tensor) -> None:
    """Pass 1 into `out` [N, 6] float32 (row stride 6); x [N, V_local], last dim contiguous."""
    n_rows, n_cols = x.shape
    block_v, num_warps = _launch_config(n_cols, x.device)
    _stats_kernel[(n_rows,)](
        x,
        x.stride(0),
        local_t,
        _flags(owned),
        w if w is not None else out,
        out,
        n_cols,
        float(softcap) if softcap else 1.0,
        BLOCK_V=block_v,
        SOFTCAP=bool(softcap),
        SMOOTH=label_smoothing > 0.0,
        HAS_CLASS_W=w is not None,
        num_warps=num_warps,
    )


def shard_grad(x, grad, local_t, owned, counted, rows: dict, w, eps_v, softcap) -> None:
    """Pass 2 into `grad` [N, V_local] (may be `x`). `rows` holds float32 [N] vectors m, log_s,
    a, g_y, scale; `eps_v` a float32 [1] tensor (smoothing / global V) or None."""
    n_rows, n_cols = x.shape
    block_v, num_warps = _launch_config(n_cols, x.device)
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
        BLOCK_V=block_v,
        SOFTCAP=bool(softcap),
        SMOOTH=eps_v is not None,
        HAS_CLASS_W=w is not None,
        ROUND_BY_HAND=_INTERPRETED,
        num_warps=num_warps,
    )
