"""Per-token log-probabilities and entropy at a temperature, from logits, in Triton.

    import torch
    from ligerbench.kernels.log_probs import log_probs
    logits = torch.randn(8, 1000, requires_grad=True)   # on a GPU: device="cuda", bf16
    target = torch.randint(0, 1000, (8,))
    logp, entropy = log_probs(logits, target, temperature=0.7)
    (logp.sum() + 0.01 * entropy.sum()).backward()

Semantics (this op and kernels/fused_linear_log_probs.py, where x = hidden @ weight.T + bias):
    z = logit_scale * x
    z = softcap * tanh(z / softcap)        when softcap is set; a -inf logit stays -inf
    z = z / temperature
    logp    = log_softmax(z)[target]        float32, target's shape
    entropy = -(p * log p).sum(-1)          float32, the row shape; p = softmax(z), 0 log 0 = 0
- target is [...] (one token per row) or [..., K] (K tokens per row, e.g. a teacher's top-K).
- ignore_index: an ignored target entry gives logp 0 and no gradient through it. A row's
  entropy is 0 (no gradient) only when ALL its targets are ignored (with one target: when it
  is); a row with some targets left keeps its entropy.
- A target outside [0, V) that is not ignore_index gives NaN (its logp), never a silent number.
- A -inf logit (a padded vocabulary column) has zero probability and gets zero gradient, also
  with a softcap (tanh would map it to -softcap, giving padding mass: unsloth #10616).
- All math is float32 from the logits as given (never rounded to 16 bits on the way); the
  gradient has the logits' dtype. logit_scale and temperature must be > 0; the kernels divide
  by the temperature as a product with 1 / temperature.

Design (cost model: forward reads the logits once, backward reads them once and writes the
gradient once: 3 passes over N * V):
- forward, one program per row (on a GPU; a tile of rows under the interpreter:
  kernels/row_tiles.py): an online softmax over vocabulary blocks keeps the max m, the
  sum of exp(z - m) over all columns but one copy of the max (r, so log sum = log1p(r) keeps
  its digits for confident rows: docs/bugs.md, bug 6) and u = sum exp(z - m) (m - z), which
  has no cancellation (every term >= 0). m is the row's, one cross-warp max a block; the sums
  stay per lane and the columns equal to m are counted, not summed. A block below m (nearly
  every block after a row's first few) costs an exponential and two sums an element; a block
  that reaches m rescales the sums by a scalar. Then entropy = log s + u / s. It
  stores (m, r, u / s) per row: all backward needs besides the logits and the targets. A row
  may also come in vocabulary slices, one launch each (the fused linear op): the running
  (m, r, u) and the targets' z then carry over between launches.
- backward, one program per row (the same; on a GPU with few rows, a row's blocks over several
  programs: each column's gradient is its own), from the upstream gradients dlogp [.., K] and
  dH (either may be None): with p = softmax(z), D_j = sum of dlogp_k over the targets equal to
  j, S = sum_k dlogp_k,
      dL/dz_j = D_j (1 - p_j) - (S - D_j) p_j - dH p_j ((z_j - m) + u / s)
  where (z_j - m) + u / s = log p_j + H with log s cancelled exactly, 1 - p_j at the max is
  r / (1 + r) (no cancellation when p -> 1) and a p_j that underflows to 0 contributes
  exactly 0 (never 0 * -inf). Then chained through / temperature, the softcap's slope
  (1 - tanh^2 as 4e / (1 + e)^2, triton_math.softcap_and_slope) and logit_scale.
- logits of any strides (a column slice of a padded vocabulary, transposed storage, [B, T, V]
  views): the kernels take the strides; no copy of the logits is made. Row offsets in int64.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from .compile_boundary import opaque
from .cross_entropy import _INTERPRETED, _launch_config, _sync_level
from .row_tiles import (
    all_zero,
    any_row,
    blocks_per_program,
    clamp_rows,
    lane_full,
    lanes,
    multiprocessors,
    programs,
    row_max,
    row_sum,
    rows_per_program,
    store_rows,
    tile_rows,
    within,
)
from .triton_math import log1p, softcap_and_slope, to_store  # decides the Triton mode
from .triton_mode import device_function

N_STATS = 3  # per-row statistics forward saves: max m, r = s - 1, u / s (see the module docstring)


@device_function
def _to_z(x_raw, scale, cap, inv_t, SOFTCAP: tl.constexpr):
    """z from raw logits (float32), and the softcap's slope d capped / d (scale * x).
    / temperature is * inv_t (1 / temperature rounded once on the host): an IEEE division per
    logit costs more than the rest of the forward's arithmetic."""
    x = x_raw.to(tl.float32)
    if SOFTCAP:
        capped, slope = softcap_and_slope(x * scale, cap)
        z = tl.where(x == float("-inf"), x, capped) * inv_t  # padding stays padding
    else:
        slope = tl.full([1], 1.0, tl.float32)  # a tensor either way: jit functions return tensors
        z = x * (scale * inv_t)
    return z, slope


@device_function
def _row_base(x_ptr, row, T, stride_b, stride_t):
    # rows are (b, t) pairs of a [B, T, V] view (2-D logits: B = 1); int64 throughout
    return x_ptr + (row // T) * stride_b + (row % T) * stride_t


@device_function
def _col_offsets(cols, stride_v, UNIT_STRIDE: tl.constexpr):
    # int32 offsets when the row is contiguous (cols < V < 2**31); else int64: cols * stride_v
    # exceeds 2**31 for transposed storage at large N * V
    if UNIT_STRIDE:
        return cols
    else:
        return cols.to(tl.int64) * stride_v


@device_function
def _count_valid(tgt_rows, K, ignore_index, ROWS: tl.constexpr):
    """How many of each row's K targets are not ignore_index."""
    if ROWS == 0:
        n = 0
    else:  # a loop carries its variables' shapes: a tile's count is a column from the start
        n = tl.zeros([ROWS, 1], tl.int32)
    for k in range(0, K):
        n += (tl.load(tgt_rows + k) != ignore_index).to(tl.int32)
    return n


@device_function
def _store_ignored_rows(logp_ptr, ent_ptr, stats_ptr, rows, K, idle, ROWS: tl.constexpr):
    """A row whose every target is ignored (where `idle`): logp, entropy and statistics 0."""
    for k in range(0, K):
        store_rows(logp_ptr + rows * K + k, 0.0, idle, ROWS)
    store_rows(ent_ptr + rows, 0.0, idle, ROWS)
    for i in range(0, 3):
        store_rows(stats_ptr + rows * 3 + i, 0.0, idle, ROWS)


# Ints read once a row or compared with a target id (as cross_entropy's ignore_index) get no
# compiled variant of their own (Triton specialises each int on == 1 and on divisibility by 16):
# T (2-D logits: T is N, whatever the batch), K, col_start, ignore_index, and stride_v (read only
# where UNIT_STRIDE is False): count_variants.py, results/README.md#where-the-probes-went. The row
# strides and V stay specialised: they let rows be read in 16-byte vectors. Likewise the alignment
# of the pointers read or written a few elements a row: the fused op hands chunks of rows (views at
# a row offset), each chunk's alignment compiled a variant of its own (flp quick: 140 variants of
# these two kernels on a GPU, 66 without either specialisation; lp quick: 77, 46). N bounds the
# last tile's rows only.
_LP_NOT_SPECIALISED = ["T", "K", "col_start", "ignore_index", "stride_v", "N"]
_LP_BWD_NOT_SPECIALISED = _LP_NOT_SPECIALISED + ["blocks_per_program"]


@triton.jit(
    do_not_specialize=_LP_NOT_SPECIALISED,
    do_not_specialize_on_alignment=["tgt_ptr", "logp_ptr", "ent_ptr", "stats_ptr", "zt_ptr"],
)
def _lp_fwd_kernel(
    # logits [B, T, V] with any strides (2-D logits: B = 1)
    x_ptr,
    T,
    stride_b,
    stride_t,
    stride_v,
    # targets [N, K], contiguous (N = B * T)
    tgt_ptr,
    K,
    # outputs, float32: log-probs [N, K], entropy [N], row statistics [N, N_STATS]
    logp_ptr,
    ent_ptr,
    stats_ptr,
    # the targets' z [N, K], float32, carried between the launches of a sliced row
    zt_ptr,
    # sizes and options; col_start: the vocabulary id of column 0 (a slice of the vocabulary)
    N,
    V,
    col_start,
    ignore_index,
    scale,
    cap,
    inv_t,
    SOFTCAP: tl.constexpr,
    UNIT_STRIDE: tl.constexpr,
    BLOCK_V: tl.constexpr,
    ROWS: tl.constexpr,  # 0: one row a program; else a tile of rows (kernels/row_tiles.py)
    FIRST: tl.constexpr,  # the row's first slice: start from nothing, else from stats (m, r, u)
    LAST: tl.constexpr,  # the row's last slice: finish (stats (m, r, u / s), logp, entropy)
    RAW: tl.constexpr,  # compare the raw logits (FIRST without a softcap), not z
):
    # a tile's rows past N read the last row; their stores are masked off
    rows = tile_rows(tl.program_id(0).to(tl.int64), ROWS)
    in_n = rows < N
    rows_c = clamp_rows(rows, N, ROWS)
    x_row = _row_base(x_ptr, rows_c, T, stride_b, stride_t)
    tgt_rows = tgt_ptr + rows_c * K
    n_valid = _count_valid(tgt_rows, K, ignore_index, ROWS)
    live = in_n & (n_valid > 0)
    if all_zero(n_valid, ROWS):  # every target ignored
        if LAST:
            _store_ignored_rows(logp_ptr, ent_ptr, stats_ptr, rows, K, in_n, ROWS)
    else:
        if LAST and ROWS > 0:  # the tile's other rows
            _store_ignored_rows(logp_ptr, ent_ptr, stats_ptr, rows, K, in_n & (n_valid == 0), ROWS)
        offs = lanes(BLOCK_V, ROWS)
        lane0 = offs == 0
        # The running max m is the row's, one cross-warp max a block; the sums stay per lane:
        # r_v, exp(z - m) over the columns below m, and u_v, exp(z - m) (m - z); c counts the
        # columns equal to m (exactly 1 each, kept out of r so that log s = log1p(r) keeps its
        # digits). A block wholly below m (after the row's first blocks, nearly every one) takes
        # the short path: no rescale, no tie. (The per-lane (m, r, u) this replaced had each
        # element pay both branches of a rise: instruction-bound at 58% of an H200's copy rate.)
        # The columns are compared as w: the raw logits where z = c x (c = scale / T > 0, so w's
        # max is z's and m = c max(x) exactly as z rounds it), which saves the product an element
        # and leaves m_w - w exact for 16-bit logits; z itself with a softcap, or where a row's
        # earlier slices hand over m as z. Gaps are in w's units (u = unit * sum e gap) and the
        # exponentials exp2(gap * nk), nk = -unit * log2(e): the bits of exp2(-(gap * k)), a
        # rounding being symmetric in sign, without the negation an element it compiled to.
        unit = scale * inv_t if RAW else 1.0
        nk = -(unit * 1.4426950408889634)
        r_v = lane_full(0.0, BLOCK_V, ROWS)
        u_v = lane_full(0.0, BLOCK_V, ROWS)
        if FIRST:
            if ROWS == 0:
                m = float("-inf")
                c = 0.0
            else:  # a loop carries its variables' shapes: a tile's are columns from the start
                m = tl.full([ROWS, 1], float("-inf"), tl.float32)
                c = tl.zeros([ROWS, 1], tl.float32)
        else:  # the row's state from its earlier slices: m, r (lane 0), u (lane 0), the max's copy
            m = tl.load(stats_ptr + rows_c * 3)
            r_v = tl.where(lane0, tl.load(stats_ptr + rows_c * 3 + 1), 0.0)
            u_v = tl.where(lane0, tl.load(stats_ptr + rows_c * 3 + 2), 0.0)
            c = tl.where(m > float("-inf"), 1.0, 0.0)
        x_next = tl.load(x_row + _col_offsets(offs, stride_v, UNIT_STRIDE), mask=offs < V, other=float("-inf"))
        for b in range(0, tl.cdiv(V, BLOCK_V)):
            # the next block's load goes out before this block's arithmetic
            x_raw = x_next
            cols_next = (b + 1) * BLOCK_V + offs
            x_next = tl.load(
                x_row + _col_offsets(cols_next, stride_v, UNIT_STRIDE), mask=cols_next < V, other=float("-inf")
            )
            if RAW:
                w = x_raw.to(tl.float32)
            else:
                w, _ = _to_z(x_raw, scale, cap, inv_t, SOFTCAP)
            m_b = row_max(w, ROWS)
            if any_row(m_b >= m, ROWS):  # the block reaches the running max: a rise, ties, or both
                m_new = tl.maximum(m, m_b)
                rise = (m_new > m) & (m > float("-inf"))  # nothing finite seen yet: nothing to move
                gap = tl.where(rise, m_new - m, 0.0)
                alpha = tl.exp2(gap * nk)
                # what was seen moves down by alpha, its gaps up by the rise; the old max's copies
                # (c of them, 1 each) become ordinary columns at alpha, entered in lane 0
                moved = tl.where(rise, c, 0.0)
                u_v = alpha * (u_v + gap * r_v) + tl.where(lane0, alpha * gap * moved, 0.0)
                r_v = alpha * r_v + tl.where(lane0, alpha * moved, 0.0)
                c = tl.where(m_new > m, 0.0, c)
                m = m_new
                # -inf on either side (padding, lanes past V) gives e = 0 and e * d = 0
                d = tl.minimum(tl.maximum(m, -3.0e38) - w, 3.0e38)
                e = tl.exp2(d * nk)
                tie = w == tl.where(m > float("-inf"), m, float("nan"))
                c += row_sum(tie.to(tl.float32), ROWS)
                e = tl.where(tie, 0.0, e)
                r_v += e
                u_v = tl.fma(e, d, u_v)  # as the short path: the same bits for a row whichever it takes
            else:  # every column below m (so m is finite): no rescale, no tie
                d = tl.minimum(m - w, 3.0e38)
                e = tl.exp2(d * nk)
                r_v += e
                u_v = tl.fma(e, d, u_v)
        r = row_sum(r_v, ROWS) + (c - 1.0)
        r = tl.where(m > float("-inf"), r, 0.0)  # nothing finite seen yet: nothing to carry
        u = row_sum(u_v, ROWS) * unit
        m = m * unit  # as _to_z rounds the max's z: the same product of the same two numbers
        store_rows(stats_ptr + rows * 3, m, live, ROWS)
        store_rows(stats_ptr + rows * 3 + 1, r, live, ROWS)
        if LAST:
            log_s = log1p(r)
            mean_gap = u / (1.0 + r)
            store_rows(stats_ptr + rows * 3 + 2, mean_gap, live, ROWS)
            store_rows(ent_ptr + rows, log_s + mean_gap, live, ROWS)
        else:
            store_rows(stats_ptr + rows * 3 + 2, u, live, ROWS)
        for k in range(0, K):
            t = tl.load(tgt_rows + k).to(tl.int64)
            valid = t != ignore_index
            here = valid & (t >= col_start) & (t < col_start + V)
            x_t = tl.load(x_row + (t - col_start) * stride_v, mask=here, other=float("nan"))
            z_t, _ = _to_z(x_t, scale, cap, inv_t, SOFTCAP)
            if LAST:
                if not FIRST:  # a target in an earlier slice: its z from then (NaN: in none)
                    z_t = tl.where(here, z_t, tl.load(zt_ptr + rows_c * K + k))
                # (z_t - m) - log s: exact for the max, where z_t - lse would round lse first
                store_rows(logp_ptr + rows * K + k, tl.where(valid, (z_t - m) - log_s, 0.0), live, ROWS)
            else:
                tl.store(zt_ptr + rows * K + k, z_t, mask=within(live, here, ROWS))


@triton.jit(
    do_not_specialize=_LP_BWD_NOT_SPECIALISED,
    do_not_specialize_on_alignment=["tgt_ptr", "stats_ptr", "dlogp_ptr", "dent_ptr"],
)
def _lp_bwd_kernel(
    # logits [B, T, V] with any strides (2-D logits: B = 1)
    x_ptr,
    T,
    stride_b,
    stride_t,
    stride_v,
    # targets [N, K] contiguous; forward's row statistics [N, N_STATS]
    tgt_ptr,
    K,
    stats_ptr,
    # upstream gradients, float32, contiguous: dlogp [N, K], dentropy [N] (read only if HAS_*)
    dlogp_ptr,
    dent_ptr,
    # gradient of the logits [N, V], rows stride_g apart, unit column stride (may be the logits)
    grad_ptr,
    stride_g,
    # sizes and options; col_start: the vocabulary id of column 0 (a slice of the vocabulary)
    N,
    V,
    col_start,
    ignore_index,
    scale,
    cap,
    inv_t,
    # program (i, j) writes the blocks [j * blocks_per_program, (j + 1) * blocks_per_program)
    # of its rows: a row over several programs where rows alone would leave the GPU part idle
    blocks_per_program,
    HAS_DLOGP: tl.constexpr,
    HAS_DENT: tl.constexpr,
    SOFTCAP: tl.constexpr,
    UNIT_STRIDE: tl.constexpr,
    BLOCK_V: tl.constexpr,
    ROWS: tl.constexpr,  # 0: one row a program; else a tile of rows (kernels/row_tiles.py)
    ROUND_BY_HAND: tl.constexpr,
    ONE_TARGET: tl.constexpr,  # K == 1: the target's id and upstream read once a row, not once a block
    SYNC: tl.constexpr,  # the gradient lies over the logits with another element size (a barrier a block)
):
    # a tile's rows past N read the last row; their stores are masked off
    rows = tile_rows(tl.program_id(0).to(tl.int64), ROWS)
    in_n = rows < N
    rows_c = clamp_rows(rows, N, ROWS)
    x_row = _row_base(x_ptr, rows_c, T, stride_b, stride_t)
    g_row = grad_ptr + rows * stride_g
    tgt_rows = tgt_ptr + rows_c * K
    offs = lanes(BLOCK_V, ROWS)
    out_ty = grad_ptr.dtype.element_ty
    n_valid = _count_valid(tgt_rows, K, ignore_index, ROWS)
    live = in_n & (n_valid > 0)
    # a block index (under cdiv(V, BLOCK_V)): formed in 64 bits as every offset's factors are, held in 32
    b_lo = (tl.program_id(1).to(tl.int64) * blocks_per_program).to(tl.int32)
    b_hi = tl.minimum(b_lo + blocks_per_program, tl.cdiv(V, BLOCK_V))
    if all_zero(n_valid, ROWS):  # every target ignored: a zero gradient
        for b in range(b_lo, b_hi):
            cols = b * BLOCK_V + offs
            zeros = tl.zeros_like(cols).to(out_ty)
            tl.store(g_row + cols, zeros, mask=within(in_n, cols < V, ROWS))
    else:
        m = tl.load(stats_ptr + rows_c * 3)
        r = tl.load(stats_ptr + rows_c * 3 + 1)
        mean_gap = tl.load(stats_ptr + rows_c * 3 + 2)
        log_s = log1p(r)
        one_minus_p_max = r / (1.0 + r)  # 1 - 1/s, exact when s -> 1
        if ROWS == 0:  # S: sum of the upstream over the row's counted targets
            s_up = 0.0
            d_ent = 0.0
        else:
            s_up = tl.zeros([ROWS, 1], tl.float32)
            d_ent = tl.zeros([ROWS, 1], tl.float32)
        if HAS_DLOGP:
            for k in range(0, K):
                valid = tl.load(tgt_rows + k) != ignore_index
                s_up += tl.where(valid, tl.load(dlogp_ptr + rows_c * K + k), 0.0)
        if HAS_DENT:
            d_ent = tl.load(dent_ptr + rows_c)
        chain = scale * inv_t
        if ONE_TARGET or not HAS_DLOGP:
            # Every column but the target's: dL/dz_j = -p_j (S + dH ((z_j - m) + u / s)), a
            # product and a sum an element; the target's own column (1 - p there, r / (1 + r) at
            # the max) is formed once a row from its logit and put in its place. (The general form
            # below, D_j and both terms at every column, ran an H200's backward at 79% of its
            # copy rate, instruction-bound without multiply-add fusion.)
            neg_s = -s_up
            neg_d = -d_ent
            if HAS_DLOGP:
                t0 = tl.load(tgt_rows).to(tl.int64)
                valid0 = t0 != ignore_index
                d0 = tl.where(valid0, tl.load(dlogp_ptr + rows_c), 0.0)
                t_col = tl.where(valid0, t0 - col_start, -1)  # outside these columns: no column's
                # read only by the program that writes its column (the rest would load it for nothing)
                here = (t_col >= b_lo * BLOCK_V) & (t_col < tl.minimum(b_hi * BLOCK_V, V))
                x_t = tl.load(x_row + tl.where(here, t_col, 0) * stride_v, mask=here, other=0.0)
                z_t, _ = _to_z(x_t, scale, cap, inv_t, SOFTCAP)
                zm_t = z_t - m
                p_t = tl.exp(zm_t - log_s)
                g_t = d0 * tl.where(zm_t == 0.0, one_minus_p_max, 1.0 - p_t) - (s_up - d0) * p_t
                if HAS_DENT:
                    g_t -= d_ent * p_t * tl.where(p_t > 0.0, zm_t + mean_gap, 0.0)
        for b in range(b_lo, b_hi):
            cols = b * BLOCK_V + offs
            in_row = cols < V
            x_raw = tl.load(x_row + _col_offsets(cols, stride_v, UNIT_STRIDE), mask=in_row, other=float("-inf"))
            z, slope = _to_z(x_raw, scale, cap, inv_t, SOFTCAP)
            zm = z - m
            p = tl.exp(zm - log_s)
            if ONE_TARGET or not HAS_DLOGP:
                if HAS_DENT:  # a p that underflows to 0 contributes exactly 0, never 0 * -inf
                    g = tl.where(p > 0.0, p * (neg_s + neg_d * (zm + mean_gap)), 0.0)
                else:
                    g = p * neg_s
                if HAS_DLOGP:
                    g = tl.where(cols == t_col, g_t, g)
            else:
                d_at = lane_full(0.0, BLOCK_V, ROWS)  # D_j
                for k in range(0, K):
                    t = tl.load(tgt_rows + k).to(tl.int64)
                    d_k = tl.load(dlogp_ptr + rows_c * K + k)
                    d_at += tl.where((cols == t - col_start) & (t != ignore_index), d_k, 0.0)
                q = tl.where(zm == 0.0, one_minus_p_max, 1.0 - p)
                g = d_at * q - (s_up - d_at) * p
                if HAS_DENT:
                    g -= d_ent * p * tl.where(p > 0.0, zm + mean_gap, 0.0)
            g = g * slope * chain
            if ROWS > 0:  # a row of the tile whose every target is ignored
                g = tl.where(live, g, 0.0)
            # A 16-bit gradient laid under float32 logits (fp32_products.grad_under_logits) lands
            # on logits of this block and earlier ones; a program's warps run apart, so without
            # the barrier a warp ahead could store over logits a warp behind has yet to load
            # (cross_entropy's pass 2 met that race on an H100: docs/bugs.md, bug 9).
            if SYNC:
                tl.debug_barrier()
            tl.store(g_row + cols, to_store(g, out_ty, ROUND_BY_HAND), mask=within(in_n, in_row, ROWS))


# ----------------------------------------------------------------------------- launchers


# _NO_FP_FUSION: both kernels compile without multiply-add fusion. With it, compiled Triton
# fused the product that makes the target's z with the subtraction of m, the rounded max of the
# same z: z_t - m came out -1.2e-6 instead of 0 for a confident row at temperature 0.6 on an H100
# (logp -1.2e-6 where the truth is -6e-18), and the backward's z - m for the max missed its
# exact 1 - p. Every z must be rounded once, the same way everywhere (as the interpreter and
# the float64 reference do). Its cost was not measured apart (the kernels are memory-bound).
# The forward's u, a sum of terms >= 0 and no z, takes an explicit tl.fma: one rounding a term.


# Launch configs on a GPU, measured on an H200 (lp_cfg.py, lp_var.py, lp_cfg2.py: results/README.md
# #where-the-probes-went). The forward, with one cross-warp max a block, runs best on 4 warps and
# 4 KiB of logits a block: on the raw logits (lp_cfg2.py, ms at bf16 V=151936, N = 2048 / 4096 /
# 8192) 2048 columns 0.185 / 0.348 / 0.713 against 1024 columns 0.201 / 0.374 / 0.731 and 4096
# columns 0.231 / 0.443 / 0.878; float32 8192 x 8192, a fused head's slice, 1024 columns 0.077
# against 2048 columns 0.088. (The per-lane forward before it ran 1.010 at N=8192 at 2048 over 8
# warps; loads two blocks ahead ran slower.) The backward, one product an element, runs near the
# copy rate: 4096 over 8, 0.336 / 1.215 at N = 2048 / 8192 and 0.141 at float32 8192 x 8192
# (8192 over 16: 0.318 / 1.211 / 0.159; loading a block ahead changed it by under the noise of
# one process, ~5%). Splitting every row's backward into programs of 4 blocks did not help (1.97 ms
# at N=8192, the older kernel; lp_split.py); splitting rows only where they are few does (below).
# The interpreter keeps ce's. The backward's
# best config differed by GPU before its rewrite: on an H100 (bwd_config_probe.py) 4096 over 16
# ran 1.79 ms against 1.95 over 8, though on a second H100 the two were equal (1.797, 1.794); not
# re-measured since. The backward writes each column from that column alone, so its config
# changes no bit; the forward's lanes and block max follow its config, so its bits do.
_GPU_FWD_BLOCK_BYTES = 4096  # a forward block's bytes of logits: 2048 bf16 columns, 1024 float32
_GPU_FWD_WARPS = 4
_GPU_BWD = (4096, 8)
_GPU_BWD_BY_NAME = (("H100", (4096, 16)),)  # (part of torch.cuda.get_device_name, config)


# The backward's programs wanted a multiprocessor: with fewer rows, a row's blocks go to several
# programs (each column's gradient is its own, so no bit moves). On an H200 (lp_bwd_split.py, bf16
# V=151936, 4096 over 8, ms at N = 1024 / 2048 / 4096 / 8192): one program a row 0.177 / 0.334 /
# 0.629 / 1.227, 64 a multiprocessor 0.161 / 0.310 / 0.612 / 1.216 (16 and 32 between them; float32
# alike, 0.354 -> 0.312 at 1024). 16 warps ran 1.195-1.201 at 8192, but the fused heads' float32
# slices, where a row stays whole (below), ran best over 8.
_GPU_BWD_PROGRAMS_PER_SM = 64
_CPU_BWD_PROGRAMS = 0  # under the interpreter a row stays whole (tests raise it to split rows)


@functools.cache
def _gpu_bwd(index: int) -> tuple[int, int]:
    name = torch.cuda.get_device_name(index)
    return next((config for part, config in _GPU_BWD_BY_NAME if part in name), _GPU_BWD)


# The forward's registers a thread where rows are few: the compiler's 93 (bf16, 16 columns a
# thread) leave 5 programs a multiprocessor, so 1024 rows make 1.6 waves of a row's 75 dependent
# blocks. Capped at 72 (6 spilled) 7 fit. On an H200 (lp_regs.py, bf16 V=151936, ms at N = 1024 /
# 2048 / 8192): no cap 0.115 / 0.184 / 0.653, 72 0.095 / 0.175 / 0.665, 80 and 96 no better,
# 64 and below slower (16-46 spilled); float32 alike at every cap to 56. A cap moves no bit (the
# same code, allocated otherwise), so a row's numbers do not depend on the rows beside it. Only
# the variant measured takes it: 16-bit logits on the raw-logit path (float32 blocks hold 8
# columns a thread, 62 registers; a softcap's variant was not measured).
_GPU_FWD_FEW_ROWS = 16  # rows a multiprocessor, or fewer: the cap below
_GPU_FWD_FEW_ROWS_MAXNREG = 72


def _fwd_register_cap(n_rows: int, x: torch.Tensor, raw: bool) -> dict:
    """The forward's launch option capping a thread's registers on a GPU, where rows are few."""
    if x.device.type != "cuda" or x.element_size() != 2 or not raw:
        return {}
    return {"maxnreg": _GPU_FWD_FEW_ROWS_MAXNREG} if n_rows <= _GPU_FWD_FEW_ROWS * multiprocessors(x.device) else {}


def _config(n_cols: int, device: torch.device, gpu: tuple[int, int]) -> tuple[int, int]:
    """(BLOCK_V, num_warps): ce's on CPU, `gpu`'s block (or the next power of 2 of a short row)."""
    if device.type != "cuda":
        return _launch_config(n_cols, device)
    block, warps = gpu
    return min(triton.next_power_of_2(max(n_cols, 1)), block), warps


def _view_3d(x: torch.Tensor) -> torch.Tensor:
    return x if x.dim() == 3 else x.unsqueeze(0)


def _rows_args(x: torch.Tensor, target: torch.Tensor) -> tuple:
    """The rows as both kernels take them: the [B, T, V] logits, T and their three strides
    (_row_base, _col_offsets), then the [N, K] targets and K."""
    return x, x.shape[1], x.stride(0), x.stride(1), x.stride(2), target, target.shape[1]


def _z_args(n_cols: int, col_start: int, ignore_index: int, logit_scale: float, softcap, temperature: float) -> tuple:
    """The columns and the map from a logit to z (_to_z) as both kernels take them."""
    return n_cols, col_start, ignore_index, float(logit_scale), float(softcap) if softcap else 1.0, 1.0 / temperature


def log_probs_rows(
    logits: torch.Tensor,
    target: torch.Tensor,
    *,
    temperature: float,
    softcap: float | None,
    logit_scale: float,
    ignore_index: int,
    out: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
    slices: tuple[int, bool, bool, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Low-level forward over `logits` [N, V] or [B, T, V] (any strides) and `target` [N, K]
    (contiguous, N = rows of the logits). Returns float32 (logp [N, K], entropy [N], row
    statistics [N, N_STATS]), written into `out` when given (contiguous float32 tensors of those
    shapes). No validation, no host sync. Used by the fused linear op on chunks.

    A row may come in vocabulary slices, one launch each, in order: `slices` = (col_start,
    first, last, zt) says which columns these logits are, whether this is the row's first and
    last slice, and gives a float32 [N, K] tensor (NaN-filled before the first) that carries the
    targets' z between launches; stats carry the running (m, r, u) until the last."""
    x = _view_3d(logits)
    n_cols = x.shape[-1]
    n_rows, k = target.shape
    dev = logits.device
    if out is None:
        out = (
            torch.empty(n_rows, k, dtype=torch.float32, device=dev),
            torch.empty(n_rows, dtype=torch.float32, device=dev),
            torch.empty(n_rows, N_STATS, dtype=torch.float32, device=dev),
        )
    logp, ent, stats = out
    col_start, first, last, zt = (0, True, True, None) if slices is None else slices
    if n_rows == 0:
        return logp, ent, stats
    block_v, num_warps = _config(n_cols, dev, (_GPU_FWD_BLOCK_BYTES // x.element_size(), _GPU_FWD_WARPS))
    tile = rows_per_program(n_rows, block_v, dev)
    raw = first and not softcap
    _lp_fwd_kernel[programs(n_rows, tile)](
        *_rows_args(x, target),
        logp,
        ent,
        stats,
        logp if zt is None else zt,
        n_rows,
        *_z_args(n_cols, col_start, ignore_index, logit_scale, softcap, temperature),
        SOFTCAP=bool(softcap),
        UNIT_STRIDE=x.stride(2) == 1,
        BLOCK_V=block_v,
        ROWS=tile,
        FIRST=first,
        LAST=last,
        RAW=raw,
        num_warps=num_warps,
        enable_fp_fusion=False,  # see _NO_FP_FUSION
        **_fwd_register_cap(n_rows, x, raw),
    )
    return logp, ent, stats


def log_probs_grad_rows(
    logits: torch.Tensor,
    target: torch.Tensor,
    stats: torch.Tensor,
    dlogp: torch.Tensor | None,
    dentropy: torch.Tensor | None,
    grad: torch.Tensor,
    *,
    temperature: float,
    softcap: float | None,
    logit_scale: float,
    ignore_index: int,
    col_start: int = 0,
) -> torch.Tensor:
    """Low-level backward: writes d(sum dlogp * logp + sum dentropy * entropy) / d logits into
    `grad` ([N, V] rows, unit column stride, any float dtype; it may be `logits` itself, which
    is read block by block before the same block is written, or lie under float32 logits,
    fp32_products.grad_under_logits: then each block's store waits for every warp's load).
    dlogp [N, K] and dentropy [N] are float32 and contiguous, or None (no gradient through
    that output). `logits` may be the columns [col_start, col_start + V) of the vocabulary
    only (the statistics are the whole row's, the targets vocabulary ids). No host sync."""
    x = _view_3d(logits)
    n_cols = x.shape[-1]
    n_rows, k = target.shape
    if n_rows == 0:
        return grad
    g = grad.reshape(n_rows, n_cols)  # a view: grad is dense along its rows
    dev = logits.device
    sync = _sync_level(grad, logits)
    if dev.type == "cuda":
        gpu = _gpu_bwd(torch.cuda.current_device() if dev.index is None else dev.index)
        wanted = _GPU_BWD_PROGRAMS_PER_SM * multiprocessors(dev)
    else:
        gpu, wanted = _GPU_BWD, _CPU_BWD_PROGRAMS
    block_v, num_warps = _config(n_cols, dev, gpu)
    tile = rows_per_program(n_rows, block_v, dev)
    (n_programs,) = programs(n_rows, tile)
    n_blocks = triton.cdiv(n_cols, block_v)
    # a gradient over logits of another element size stores onto other blocks' logits: one
    # program a row, whose barrier orders them
    per_program = n_blocks if sync == 2 else blocks_per_program(n_programs, n_blocks, wanted)
    _lp_bwd_kernel[(n_programs, triton.cdiv(n_blocks, per_program))](
        *_rows_args(x, target),
        stats,
        dlogp if dlogp is not None else stats,
        dentropy if dentropy is not None else stats,
        g,
        g.stride(0),
        n_rows,
        *_z_args(n_cols, col_start, ignore_index, logit_scale, softcap, temperature),
        per_program,
        HAS_DLOGP=dlogp is not None,
        HAS_DENT=dentropy is not None,
        SOFTCAP=bool(softcap),
        UNIT_STRIDE=x.stride(2) == 1,
        BLOCK_V=block_v,
        ROWS=tile,
        ROUND_BY_HAND=_INTERPRETED,
        ONE_TARGET=k == 1,
        SYNC=sync == 2,
        num_warps=num_warps,
        enable_fp_fusion=False,  # see _NO_FP_FUSION
    )
    return grad


# ----------------------------------------------------------------------------- checks


def validate_options(temperature: float, softcap: float | None, logit_scale: float) -> None:
    if not temperature > 0 or temperature == float("inf"):
        raise ValueError(f"temperature must be positive and finite, got {temperature}")
    if softcap is not None and not softcap > 0:
        raise ValueError(f"softcap must be positive or None, got {softcap}")
    if not logit_scale > 0 or logit_scale == float("inf"):
        raise ValueError(f"logit_scale must be positive and finite, got {logit_scale}")


def targets_2d(target: torch.Tensor, row_shape: tuple[int, ...], name: str) -> torch.Tensor:
    """target [...rows] or [...rows, K] as a contiguous [N, K] tensor (a copy only if needed).
    `name` is the tensor whose leading dims give the rows, for the error message."""
    if target.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"target must be int64 or int32 token ids, got {target.dtype}")
    shape = tuple(target.shape)
    if shape == row_shape:
        k = 1
    elif len(shape) == len(row_shape) + 1 and shape[:-1] == row_shape and shape[-1] >= 1:
        k = shape[-1]
    else:
        raise ValueError(
            f"target shape {shape} must be {name}'s shape without its last dim {row_shape}, "
            f"or that with K >= 1 targets per row appended"
        )
    n_rows = 1
    for d in row_shape:
        n_rows *= d
    return target.reshape(n_rows, k).contiguous()


def _validate(logits, target, temperature, softcap, logit_scale) -> torch.Tensor:
    if logits.dim() not in (2, 3):
        raise ValueError(f"logits must be 2-D [N, V] or 3-D [B, T, V], got shape {tuple(logits.shape)}")
    if logits.dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise TypeError(f"logits must be float32, bfloat16 or float16, got {logits.dtype}")
    if logits.shape[-1] < 1:
        raise ValueError("logits must have at least one class")
    if target.device != logits.device:
        raise ValueError(f"target is on {target.device} but logits is on {logits.device}")
    validate_options(temperature, softcap, logit_scale)
    return targets_2d(target, tuple(logits.shape[:-1]), "logits")


def upstream_2d(dlogp, dentropy, n_rows: int, k: int):
    """The upstream gradients as the kernels read them: float32, contiguous, [N, K] and [N]."""
    dl = None if dlogp is None else dlogp.reshape(n_rows, k).float().contiguous()
    de = None if dentropy is None else dentropy.reshape(n_rows).float().contiguous()
    return dl, de


# ----------------------------------------------------------------------------- autograd


class LogProbsFunction(torch.autograd.Function):
    """autograd wrapper; forward(...) returns (logp, entropy), both differentiable."""

    @staticmethod
    def forward(ctx, logits, target, temperature, softcap, logit_scale, ignore_index):
        t2 = _validate(logits, target, temperature, softcap, logit_scale)
        opts = dict(temperature=temperature, softcap=softcap, logit_scale=logit_scale, ignore_index=ignore_index)
        logp, ent, stats = log_probs_rows(logits, t2, **opts)
        ctx.save_for_backward(logits)  # the caller's tensor, no copy; changed in place later, autograd says so
        ctx.t2, ctx.stats, ctx.opts = t2, stats, opts
        # an output that gets no gradient arrives as None: its term is skipped, not added as zeros
        ctx.set_materialize_grads(False)
        return logp.view(target.shape), ent.view(logits.shape[:-1])

    @staticmethod
    def backward(ctx, dlogp, dentropy):
        (logits,) = ctx.saved_tensors
        if not ctx.needs_input_grad[0] or (dlogp is None and dentropy is None):
            return (None,) * 6
        n_rows, k = ctx.t2.shape
        dl, de = upstream_2d(dlogp, dentropy, n_rows, k)
        grad = torch.empty(logits.shape, dtype=logits.dtype, device=logits.device)
        log_probs_grad_rows(logits, ctx.t2, ctx.stats, dl, de, grad, **ctx.opts)
        return (grad,) + (None,) * 5


@opaque  # torch.compile runs it as it is, outside the graph: kernels/compile_boundary.py
def log_probs(
    logits: torch.Tensor,
    target: torch.Tensor,
    *,
    temperature: float = 1.0,
    softcap: float | None = None,
    logit_scale: float = 1.0,
    ignore_index: int = -100,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(logp, entropy) of `target` under softmax(z), z = softcap-capped (logit_scale * logits)
    / temperature: the semantics in this module's docstring.

    logits [N, V] or [B, T, V] (float32, bfloat16 or float16; any strides, never copied or
    written); target [N] / [B, T] (one token per row) or [N, K] / [B, T, K] (K per row).
    Returns float32 logp (target's shape) and float32 entropy (the row shape); gradients flow
    into the logits through either or both (the gradient has the logits' dtype)."""
    return LogProbsFunction.apply(logits, target, temperature, softcap, logit_scale, ignore_index)
