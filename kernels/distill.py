"""Distillation divergences per token between a student's and a teacher's next-token
distributions, from logits, in Triton (`kd`; the fused head form is kernels/fused_linear_distill.py).

    import torch
    from ligerbench.kernels.distill import distill_loss
    student = torch.randn(8, 1000, requires_grad=True)     # on a GPU: device="cuda", bf16
    teacher = torch.randn(8, 1000)
    loss = distill_loss(student, teacher, divergence="jsd", beta=0.5, temperature=2.0)
    loss.backward()

Semantics (this op and the fused one; suites/families/distill.py restates them in float64):
    p = softmax(student / T)                      the student, over the whole vocabulary
    q = softmax(teacher / T)                      a full teacher [.., V] (logits), or
    q = softmax_K(teacher_logp / T) on teacher_ids, 0 elsewhere
                                                  a top-K teacher: its K log-probs [.., K] and
                                                  their vocabulary ids, renormalised over the K
    forward_kl   KL(q || p) = sum q (log q - log p)          (mode-covering; F.kl_div(log p, q))
    reverse_kl   KL(p || q) = sum p (log p - log q)          (mode-seeking)
    jsd, beta    beta KL(q || m) + (1 - beta) KL(p || m),  m = beta q + (1 - beta) p
                 beta = 0 is forward_kl and beta = 1 is reverse_kl (taken as those, exactly): the
                 convention of TRL's GKD `generalized_jsd_loss` and DistillationTrainer ("0.0 =
                 forward KL, 1.0 = reverse KL", mixture (1 - beta) p_student + beta p_teacher)
                 and of Liger's LigerJSD (M = beta P + (1 - beta) Q, P the teacher), and Eq. 1 of
                 the GKD paper; between the ends the mixture tends to p (beta -> 0) or q (-> 1),
                 so the interior value goes to 0 there: the ends are defined, not limits.
    tvd          0.5 * sum |p - q|
- temperature T divides both sides' logits (a top-K teacher's log-probs: the same thing, since
  renormalising over the K removes the log-normaliser). No T**2 factor.
- labels (optional, the row shape): a row whose label is ignore_index contributes 0 and gets no
  gradient; labels are read for nothing else.
- reductions: none (per row, the row shape), sum, mean (sum / counted rows; 0 when none is
  counted, as TRL's GKD loss clamps its count: a micro-batch with no completion token gives 0,
  not NaN), batchmean (sum / all rows N, counted or not: PyTorch's F.kl_div(reduction=
  "batchmean") on the [N, V] rows). NB: TRL's and Liger's JSD/TVD "batchmean" with labels
  divide by the counted rows, i.e. are this op's "mean".
- A top-K teacher gives q = 0 off its ids, so reverse_kl (and jsd at beta = 1) is infinite
  there: refused. Its ids must be distinct (a top-K is), in [0, V).
- gradients: the student's always; the teacher's only when teacher_grad=True (the teacher is
  a constant by default even when it requires grad: a self-distilled teacher shares the
  student's weights, and a gradient through it trains the student twice).
- float32 math from the inputs as given (16-bit logits are never rounded on the way); the loss
  is float32, the gradients have their inputs' dtypes.

Design (one program per row; cost: forward reads both rows twice (the second pass needs both
normalisers for every term), backward reads both once and writes the gradient(s) once):
- pass 1 keeps for each side the running max m and r = s - 1 (s = sum exp(z - m), the max's own
  1 left out, so log s = log1p(r) keeps its digits for confident rows: docs/bugs.md, bug 6);
  pass 2 sums the divergence's terms with log p = (z - m) - log1p(r). It stores per row (m, r)
  of both sides and the two sums backward needs (`_terms`'s aux_s, aux_t).
- backward forms, per column, dL/dz for the student (and the teacher) from the same terms
  (`_grads`), times the row's upstream scale and 1 / T; a p or q that underflows to 0
  contributes exactly 0 (never 0 * -inf).
- a top-K teacher: pass 2 is over its K entries (the student's log-probs gathered at the ids),
  and the terms off the support come in closed form from the student's mass there, 1 - sum_K p
  (jsd: (1 - beta) p log(1 / (1 - beta)) each; tvd: p / 2 each; forward_kl: 0); backward finds
  each column's q by comparing it with the K ids.
- any strides for both logits ([N, V], [B, T, V], a column slice of a padded vocabulary,
  transposed storage): no copy is made of them. Row offsets in int64. No host sync anywhere
  (the counts of the reductions stay on the device).
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from .compile_boundary import opaque
from .cross_entropy import _INTERPRETED, _launch_config
from .log_probs import _col_offsets, _row_base, _view_3d
from .row_tiles import blocks_per_program, multiprocessors
from .triton_math import log1p, to_store  # decides the Triton mode
from .triton_mode import device_function

DIVERGENCES = ("forward_kl", "reverse_kl", "jsd", "tvd")
REDUCTIONS = ("none", "sum", "mean", "batchmean")
FKL, RKL, JSD, TVD = 0, 1, 2, 3
N_STATS = 6  # per row, float64: student (m, r), teacher (m, r), aux_s, aux_t (see _terms)


@device_function
def _merge(m, r, z):
    """The running (max m, r = sum exp(z - m) - 1) of a row after one more block z ([BLOCK],
    float32, -inf in masked lanes). r leaves out one copy of the max, so it carries no 1 to
    round against; the block's own r counts its other copies of its max."""
    # -3e38: a finite stand-in for a max of -inf (nothing seen): exp(-inf - it) = 0, never NaN
    # r is summed in float64: log s must hold to float32's ulp of the KL, not of log s (~7),
    # and the block's exponentials (float32) are what a float32 sum would round
    bm = tl.max(z, 0)
    e = tl.exp(z - tl.maximum(bm, -3.0e38))
    top = z == bm
    rb = tl.sum(tl.where(top, 0.0, e).to(tl.float64), 0) + (tl.sum(top.to(tl.float64), 0) - 1.0)
    rb = tl.where(bm > float("-inf"), rb, 0.0)
    shrink = tl.exp(tl.minimum(m, bm) - tl.maximum(tl.maximum(m, bm), -3.0e38)).to(tl.float64)
    r = tl.where(bm > m, rb + (1.0 + r) * shrink, r + (1.0 + rb) * shrink)
    return tl.maximum(m, bm), r


@device_function
def _log_mix(lp, lq, log_1mb, log_b):
    # log m = log((1 - beta) p + beta q) from the logs: top + log1p(exp(-|a - b|)), no overflow,
    # -inf (never NaN) where both are -inf, and exactly log p where p == q (a self-distilled
    # teacher: the divergence and its gradient are then exactly 0, not rounding noise)
    a = lp + log_1mb
    b = lq + log_b
    top = tl.maximum(a, b)
    gap = tl.where(a == b, 0.0, tl.abs(a - b))
    return tl.where(lp == lq, lp, top + log1p(tl.exp(-gap)))


@device_function
def _half_sign(p, q):
    # d (|p - q| / 2) / dp, 0 where p == q (torch.abs's subgradient there)
    return tl.where(p > q, 0.5, tl.where(p < q, -0.5, 0.0))


@device_function
def _gap(xs, xt, inv_t, c):
    # log p - log q as (xs - xt) / T - c, c = (m_s + log s_s) - (m_t + log s_t) formed in float64
    # (_row_gap) and rounded once: lp - lq in float32 rounds each side to |log p|'s ulp first,
    # a shift common to the whole row (a KL of 0.25 from a row of log p ~ -7 lost 8 ulps so)
    return (xs - xt) * inv_t - c


@device_function
def _row_gap(m_s, ls_s, m_t, ls_t):
    return ((m_s - m_t).to(tl.float64) + (ls_s - ls_t)).to(tl.float32)


@device_function
def _zero64(BLOCK: tl.constexpr):
    # a float64 scalar 0 (a loop-carried float64 sum must start as one)
    return tl.sum(tl.zeros([BLOCK], tl.float64), 0)


@device_function
def _terms(lp, lq, d, log_1mb, log_b, beta, DIV: tl.constexpr):
    """Per column: (the divergence's term, aux_s's term, aux_t's term) from log p, log q and
    d = log p - log q formed from the logits' difference (_gap: the KLs keep their digits).
    aux_s / aux_t are the row sums backward needs: reverse_kl: the divergence / -; forward_kl:
    - / the divergence; jsd: KL(p || m) / KL(q || m); tvd: sum p g / sum q g, g = sign(p - q) / 2."""
    p = tl.exp(lp)
    q = tl.exp(lq)
    if DIV == 0:  # forward KL
        t = tl.where(q > 0.0, -q * d, 0.0)
        return t, t, t
    elif DIV == 1:  # reverse KL
        t = tl.where(p > 0.0, p * d, 0.0)
        return t, t, t
    elif DIV == 2:  # generalized JSD
        lm = _log_mix(lp, lq, log_1mb, log_b)
        ks = tl.where(p > 0.0, p * (lp - lm), 0.0)
        kt = tl.where(q > 0.0, q * (lq - lm), 0.0)
        return beta * kt + (1.0 - beta) * ks, ks, kt
    else:  # TVD
        g = _half_sign(p, q)
        return 0.5 * tl.abs(p - q), p * g, q * g


@device_function
def _grads(lp, lq, d, log_1mb, log_b, beta, aux_s, aux_t, DIV: tl.constexpr):
    """Per column: (dL/dz_student, dL/dz_teacher), z = logits / T, through each softmax."""
    p = tl.exp(lp)
    q = tl.exp(lq)
    if DIV == 0:
        return p - q, tl.where(q > 0.0, q * (-d - aux_t), 0.0)
    elif DIV == 1:
        return tl.where(p > 0.0, p * (d - aux_s), 0.0), q - p
    elif DIV == 2:
        lm = _log_mix(lp, lq, log_1mb, log_b)
        gs = (1.0 - beta) * tl.where(p > 0.0, p * ((lp - lm) - aux_s), 0.0)
        gt = beta * tl.where(q > 0.0, q * ((lq - lm) - aux_t), 0.0)
        return gs, gt
    else:
        g = _half_sign(p, q)
        return p * (g - aux_s), q * (aux_t - g)


@device_function
def _off_support(loss, aux_s, off, beta, log_1mb, DIV: tl.constexpr):
    # a top-K teacher: the columns off its ids (q = 0, m = (1 - beta) p) hold `off` = 1 - sum_K p
    # of the student; each adds (1 - beta) p log(1 / (1 - beta)) to jsd, p / 2 to tvd
    if DIV == 2:
        loss += (1.0 - beta) * (-log_1mb) * off
        aux_s += -log_1mb * off
    elif DIV == 3:
        loss += 0.5 * off
        aux_s += 0.5 * off
    return loss, aux_s


@device_function
def _topk_stats(t_row, kk, K, inv_t):
    # a top-K teacher's K log-probs as given (-inf past K), and (m, r) of their softmax at T
    lt = tl.load(t_row + kk, mask=kk < K, other=float("-inf")).to(tl.float32)
    m, r = _merge(float("-inf"), 0.0, lt * inv_t)
    return lt, m, r


@triton.jit
def _kd_fwd_kernel(
    # student logits [B, T, V], any strides (2-D: B = 1)
    s_ptr, T, s_sb, s_st, s_sv,
    # teacher: logits [B, T, V] with its own strides, or (TOPK) log-probs [N, K] contiguous
    t_ptr, t_sb, t_st, t_sv,
    ids_ptr,  # TOPK: the teacher's vocabulary ids [N, K], contiguous
    K,
    lbl_ptr,  # HAS_LABELS: labels [N], contiguous
    ignore_index,
    # outputs, float32: the divergence per row [N], statistics [N, N_STATS]
    loss_ptr, stats_ptr,
    V, inv_t, beta, log_1mb, log_b,
    DIV: tl.constexpr, TOPK: tl.constexpr, HAS_LABELS: tl.constexpr, UNIT_S: tl.constexpr, UNIT_T: tl.constexpr,
    BLOCK_V: tl.constexpr, BLOCK_K: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0).to(tl.int64)
    ignored = False
    if HAS_LABELS:
        ignored = tl.load(lbl_ptr + row) == ignore_index
    if ignored:
        tl.store(loss_ptr + row, 0.0)
        for i in range(0, 6):
            tl.store(stats_ptr + row * 6 + i, 0.0)
    else:
        s_row = _row_base(s_ptr, row, T, s_sb, s_st)
        offs = tl.arange(0, BLOCK_V)
        m_s = float("-inf")
        r_s = _zero64(BLOCK_K)
        m_t = float("-inf")
        r_t = _zero64(BLOCK_K)
        for b in range(0, tl.cdiv(V, BLOCK_V)):  # pass 1: both normalisers
            cols = b * BLOCK_V + offs
            zs = tl.load(s_row + _col_offsets(cols, s_sv, UNIT_S), mask=cols < V, other=float("-inf"))
            m_s, r_s = _merge(m_s, r_s, zs.to(tl.float32) * inv_t)
            if not TOPK:
                t_row = _row_base(t_ptr, row, T, t_sb, t_st)
                zt = tl.load(t_row + _col_offsets(cols, t_sv, UNIT_T), mask=cols < V, other=float("-inf"))
                m_t, r_t = _merge(m_t, r_t, zt.to(tl.float32) * inv_t)
        ls_s = log1p(r_s)  # float64
        loss = _zero64(BLOCK_K)
        aux_s = _zero64(BLOCK_K)
        aux_t = _zero64(BLOCK_K)
        if TOPK:  # pass 2 over the teacher's K entries, the rest of the row in closed form
            kk = tl.arange(0, BLOCK_K)
            xt, m_t, r_t = _topk_stats(t_ptr + row * K, kk, K, inv_t)
            ls_t = log1p(r_t)
            ids = tl.load(ids_ptr + row * K + kk, mask=kk < K, other=0).to(tl.int64)
            xs = tl.load(s_row + ids * s_sv, mask=kk < K, other=float("-inf")).to(tl.float32)
            lp = (xs * inv_t - m_s) - ls_s.to(tl.float32)
            lq = (xt * inv_t - m_t) - ls_t.to(tl.float32)
            d = _gap(xs, xt, inv_t, _row_gap(m_s, ls_s, m_t, ls_t))
            t, a, c = _terms(lp, lq, d, log_1mb, log_b, beta, DIV)
            off = 1.0 - tl.sum(tl.exp(lp).to(tl.float64), 0)
            loss, aux_s = _off_support(tl.sum(t.to(tl.float64), 0), tl.sum(a.to(tl.float64), 0), off, beta, log_1mb,
                                       DIV)  # fmt: skip
            aux_t = tl.sum(c.to(tl.float64), 0)
        else:  # pass 2 over the row
            t_row = _row_base(t_ptr, row, T, t_sb, t_st)
            ls_t = log1p(r_t)
            c_row = _row_gap(m_s, ls_s, m_t, ls_t)
            ls_s32 = ls_s.to(tl.float32)
            ls_t32 = ls_t.to(tl.float32)
            for b in range(0, tl.cdiv(V, BLOCK_V)):
                cols = b * BLOCK_V + offs
                xs = tl.load(s_row + _col_offsets(cols, s_sv, UNIT_S), mask=cols < V, other=float("-inf"))
                xt = tl.load(t_row + _col_offsets(cols, t_sv, UNIT_T), mask=cols < V, other=float("-inf"))
                xs = xs.to(tl.float32)
                xt = xt.to(tl.float32)
                lp = (xs * inv_t - m_s) - ls_s32
                lq = (xt * inv_t - m_t) - ls_t32
                t, a, c = _terms(lp, lq, _gap(xs, xt, inv_t, c_row), log_1mb, log_b, beta, DIV)
                loss += tl.sum(t, 0).to(tl.float64)
                aux_s += tl.sum(a, 0).to(tl.float64)
                aux_t += tl.sum(c, 0).to(tl.float64)
        tl.store(loss_ptr + row, loss)
        tl.store(stats_ptr + row * 6, m_s)
        tl.store(stats_ptr + row * 6 + 1, r_s)
        tl.store(stats_ptr + row * 6 + 2, m_t)
        tl.store(stats_ptr + row * 6 + 3, r_t)
        tl.store(stats_ptr + row * 6 + 4, aux_s)
        tl.store(stats_ptr + row * 6 + 5, aux_t)


# the rows _kd_fwd_kernel reads, in its order: each kernel's launch takes them as arguments of its own
@triton.jit
def _kd_bwd_kernel(
    # student logits [B, T, V] any strides; teacher as in forward
    s_ptr, T, s_sb, s_st, s_sv,
    t_ptr, t_sb, t_st, t_sv, ids_ptr, K, lbl_ptr, ignore_index,
    stats_ptr,  # forward's [N, N_STATS]
    scale_ptr,  # float32 [N]: each row's upstream times the reduction's 1 / count
    # gradients: the student's [N, V] rows (unit column stride); the teacher's [N, V] or
    # (TOPK) [N, K] float32, written only if TEACHER_GRAD
    gs_ptr, stride_gs, gt_ptr, stride_gt,
    V,
    col_start,  # the vocabulary id of column 0 (the fused op's vocabulary slices)
    inv_t, beta, log_1mb, log_b,
    # program (i, j) writes the blocks [j * blocks_per_program, (j + 1) * blocks_per_program) of
    # row i (each column's gradient is its own); program (i, 0) also the top-K teacher's K
    blocks_per_program,
    DIV: tl.constexpr, TOPK: tl.constexpr, HAS_LABELS: tl.constexpr, TEACHER_GRAD: tl.constexpr,
    UNIT_S: tl.constexpr, UNIT_T: tl.constexpr, BLOCK_V: tl.constexpr, BLOCK_K: tl.constexpr,
    ROUND_BY_HAND: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0).to(tl.int64)
    # a block index (under cdiv(V, BLOCK_V)): formed in 64 bits as every offset's factors are, held in 32
    b_lo = (tl.program_id(1).to(tl.int64) * blocks_per_program).to(tl.int32)
    b_hi = tl.minimum(b_lo + blocks_per_program, tl.cdiv(V, BLOCK_V))
    offs = tl.arange(0, BLOCK_V)
    gs_row = gs_ptr + row * stride_gs
    gt_row = gt_ptr + row * stride_gt
    s_ty = gs_ptr.dtype.element_ty
    t_ty = gt_ptr.dtype.element_ty
    ignored = False
    if HAS_LABELS:
        ignored = tl.load(lbl_ptr + row) == ignore_index
    if ignored:
        for b in range(b_lo, b_hi):
            cols = b * BLOCK_V + offs
            tl.store(gs_row + cols, tl.zeros([BLOCK_V], dtype=s_ty), mask=cols < V)
            if TEACHER_GRAD and not TOPK:
                tl.store(gt_row + cols, tl.zeros([BLOCK_V], dtype=t_ty), mask=cols < V)
        if TEACHER_GRAD and TOPK:
            kk = tl.arange(0, BLOCK_K)
            tl.store(gt_row + kk, tl.zeros([BLOCK_K], dtype=t_ty), mask=kk < tl.where(b_lo == 0, K, 0))
    else:
        s_row = _row_base(s_ptr, row, T, s_sb, s_st)
        m_s = tl.load(stats_ptr + row * 6).to(tl.float32)
        ls_s = log1p(tl.load(stats_ptr + row * 6 + 1))  # float64
        m_t = tl.load(stats_ptr + row * 6 + 2).to(tl.float32)
        ls_t = log1p(tl.load(stats_ptr + row * 6 + 3))
        aux_s = tl.load(stats_ptr + row * 6 + 4).to(tl.float32)
        aux_t = tl.load(stats_ptr + row * 6 + 5).to(tl.float32)
        chain = tl.load(scale_ptr + row) * inv_t
        c_row = _row_gap(m_s, ls_s, m_t, ls_t)
        ls_s = ls_s.to(tl.float32)
        ls_t = ls_t.to(tl.float32)
        for b in range(b_lo, b_hi):
            cols = b * BLOCK_V + offs
            in_row = cols < V
            xs = tl.load(s_row + _col_offsets(cols, s_sv, UNIT_S), mask=in_row, other=float("-inf")).to(tl.float32)
            if TOPK:  # the teacher at this column: its entry whose id it is, else -inf (q = 0)
                xt = tl.full([BLOCK_V], float("-inf"), tl.float32)
                for k in range(0, K):
                    lt_k = tl.load(t_ptr + row * K + k).to(tl.float32)
                    xt = tl.where(cols + col_start == tl.load(ids_ptr + row * K + k), lt_k, xt)
            else:
                t_row = _row_base(t_ptr, row, T, t_sb, t_st)
                xt = tl.load(t_row + _col_offsets(cols, t_sv, UNIT_T), mask=in_row, other=float("-inf"))
                xt = xt.to(tl.float32)
            lp = (xs * inv_t - m_s) - ls_s
            lq = (xt * inv_t - m_t) - ls_t
            gs, gt = _grads(lp, lq, _gap(xs, xt, inv_t, c_row), log_1mb, log_b, beta, aux_s, aux_t, DIV)
            tl.store(gs_row + cols, to_store(gs * chain, s_ty, ROUND_BY_HAND), mask=in_row)
            if TEACHER_GRAD and not TOPK:
                tl.store(gt_row + cols, to_store(gt * chain, t_ty, ROUND_BY_HAND), mask=in_row)
        if TEACHER_GRAD and TOPK:  # the teacher's K log-probs
            kk = tl.arange(0, BLOCK_K)
            xt = tl.load(t_ptr + row * K + kk, mask=kk < K, other=float("-inf")).to(tl.float32)
            ids = tl.load(ids_ptr + row * K + kk, mask=kk < K, other=0).to(tl.int64)
            xs = tl.load(s_row + ids * s_sv, mask=kk < K, other=float("-inf")).to(tl.float32)
            lp = (xs * inv_t - m_s) - ls_s
            lq = (xt * inv_t - m_t) - ls_t
            _, gt = _grads(lp, lq, _gap(xs, xt, inv_t, c_row), log_1mb, log_b, beta, aux_s, aux_t, DIV)
            tl.store(gt_row + kk, to_store(gt * chain, t_ty, ROUND_BY_HAND), mask=kk < tl.where(b_lo == 0, K, 0))


# ----------------------------------------------------------------------------- launchers


def _mode(divergence: str, beta: float) -> tuple[int, float, float, float]:
    """(DIV, beta, log(1 - beta), log beta): jsd's ends are the two KLs, taken exactly."""
    if divergence == "jsd" and beta == 0.0:
        return FKL, 0.0, 0.0, 0.0
    if divergence == "jsd" and beta == 1.0:
        return RKL, 1.0, 0.0, 0.0
    if divergence == "jsd":
        return JSD, float(beta), math.log1p(-beta), math.log(beta)
    return DIVERGENCES.index(divergence), 0.0, 0.0, 0.0


def _row_operands(s, teacher, teacher_ids, labels, ignore_index, unused):
    """What both kernels take first, in their order: the student's [B, T, V] view `s` and its
    strides, the teacher's logits and strides (a top-K teacher's log-probs [N, K], contiguous:
    strides 0), the top-K ids and K, the labels and ignore_index (`unused`: a pointer in place
    of ids or labels the call has none of); and the flags of the kernels those decide."""
    topk = teacher_ids is not None
    if topk:  # [N, K] contiguous (the op made it so)
        t, t_sb, t_st, t_sv = teacher, 0, 0, 0
    else:
        t = _view_3d(teacher)
        t_sb, t_st, t_sv = t.stride(0), t.stride(1), t.stride(2)
    k = teacher_ids.shape[1] if topk else 1
    operands = (
        s, s.shape[1], s.stride(0), s.stride(1), s.stride(2),
        t, t_sb, t_st, t_sv,
        teacher_ids if topk else unused, k,
        labels if labels is not None else unused, ignore_index,
    )  # fmt: skip
    flags = dict(TOPK=topk, HAS_LABELS=labels is not None, UNIT_S=s.stride(2) == 1, UNIT_T=topk or t_sv == 1,
                 BLOCK_K=triton.next_power_of_2(k))  # fmt: skip
    return operands, flags


# The forward's launch config on a GPU (H100, V=152064, JSD; kd_config_sweep.py:
# results/README.md#where-the-probes-went): the kernel is bound by its arithmetic, not by reading
# the rows. For the 128-row float32 sub-chunks flkd hands it, 8192 columns over 16 warps ran 0.215
# ms against 0.283 at ce's 4096 over 16; for kd's 2048 bf16 rows 1024 over 4 ran 2.23 ms against
# 2.47. The block and the warps set the order a row's sums are taken in, so the config is the
# caller's (`sub_chunks`), never the row count's: picked by N, a row's bits depended on the batch
# around it (kd on an H200: 18 ulp of a loss, 65 of a gradient, between 2048 and 1024 rows).
_GPU_FWD = {True: (8192, 16), False: (1024, 4)}  # by sub_chunks


def _fwd_config(n_cols: int, device: torch.device, sub_chunks: bool) -> tuple[int, int]:
    if device.type != "cuda":
        return _launch_config(n_cols, device)
    block, warps = _GPU_FWD[sub_chunks]
    return min(triton.next_power_of_2(max(n_cols, 1)), block), warps


def distill_rows(
    student: torch.Tensor,
    teacher: torch.Tensor,
    teacher_ids: torch.Tensor | None,
    labels: torch.Tensor | None,
    *,
    divergence: str,
    beta: float,
    temperature: float,
    ignore_index: int,
    out: tuple[torch.Tensor, torch.Tensor] | None = None,
    sub_chunks: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Low-level forward: student [N, V] or [B, T, V] (any strides), teacher the same shape (its
    own strides) or, with `teacher_ids` [N, K] (int, contiguous), its log-probs [N, K] float32
    contiguous; labels [N] contiguous or None. Returns float32 (divergence per row [N],
    statistics [N, N_STATS]), into `out` when given; `sub_chunks`: the GPU launch config for
    the few-row sub-chunks of a fused head (the same for every row count, as kd's own). No
    validation, no host sync."""
    s = _view_3d(student)
    n_rows, n_cols = s.shape[0] * s.shape[1], s.shape[2]
    dev = student.device
    if out is None:
        out = (
            torch.empty(n_rows, dtype=torch.float32, device=dev),
            torch.empty(n_rows, N_STATS, dtype=torch.float64, device=dev),
        )
    loss, stats = out
    if n_rows == 0:
        return loss, stats
    div, beta, log_1mb, log_b = _mode(divergence, beta)
    rows, flags = _row_operands(s, teacher, teacher_ids, labels, ignore_index, unused=loss)
    block_v, num_warps = _fwd_config(n_cols, dev, sub_chunks)
    _kd_fwd_kernel[(n_rows,)](
        *rows,
        loss, stats,
        n_cols, 1.0 / temperature, beta, log_1mb, log_b,
        DIV=div, **flags, BLOCK_V=block_v, num_warps=num_warps,
        enable_fp_fusion=False,  # every z rounded once, as in kernels/log_probs.py (_NO_FP_FUSION)
    )  # fmt: skip
    return loss, stats


# The backward's programs wanted a multiprocessor: with fewer rows (flkd's sub-chunks), a row's
# blocks go to several programs; no bit moves. On an H200 (kd_bwd_split.py, JSD, V=152064, ms, one
# program a row against 8 a multiprocessor): float32 x 128 rows 0.0754 -> 0.0645, x 376 rows 0.182
# -> 0.163 (4 and 16 between, 32 slower); kd's 2048 bf16 rows, which fill the GPU, unmoved (0.760).
_GPU_BWD_PROGRAMS_PER_SM = 8
_CPU_BWD_PROGRAMS = 0  # under the interpreter a row stays whole (tests raise it to split rows)


def distill_grad_rows(
    student: torch.Tensor,
    teacher: torch.Tensor,
    teacher_ids: torch.Tensor | None,
    labels: torch.Tensor | None,
    stats: torch.Tensor,
    scale: torch.Tensor,
    grad_student: torch.Tensor,
    grad_teacher: torch.Tensor | None,
    *,
    divergence: str,
    beta: float,
    temperature: float,
    ignore_index: int,
    col_start: int = 0,
) -> None:
    """Low-level backward: writes scale[i] * dL_i/d student into grad_student ([N, V] rows, unit
    column stride, any float dtype) and, if grad_teacher is given, the teacher's ([N, V] rows,
    or [N, K] contiguous for a top-K teacher). `scale` is float32 [N] contiguous. The logits may
    be the columns [col_start, col_start + V) of the vocabulary only (the statistics are the
    whole rows'). No host sync."""
    s = _view_3d(student)
    n_rows, n_cols = s.shape[0] * s.shape[1], s.shape[2]
    if n_rows == 0:
        return
    div, beta, log_1mb, log_b = _mode(divergence, beta)
    rows, flags = _row_operands(s, teacher, teacher_ids, labels, ignore_index, unused=stats)
    gs = grad_student.reshape(n_rows, n_cols)
    gt = None if grad_teacher is None else grad_teacher.reshape(n_rows, -1)
    dev = student.device
    block_v, num_warps = _launch_config(n_cols, dev)
    n_blocks = triton.cdiv(n_cols, block_v)
    wanted = _GPU_BWD_PROGRAMS_PER_SM * multiprocessors(dev) if dev.type == "cuda" else _CPU_BWD_PROGRAMS
    per_program = blocks_per_program(n_rows, n_blocks, wanted)
    _kd_bwd_kernel[(n_rows, triton.cdiv(n_blocks, per_program))](
        *rows,
        stats, scale,
        gs, gs.stride(0),
        gs if gt is None else gt, 0 if gt is None else gt.stride(0),
        n_cols, col_start, 1.0 / temperature, beta, log_1mb, log_b,
        per_program,
        DIV=div, **flags, TEACHER_GRAD=gt is not None, BLOCK_V=block_v, ROUND_BY_HAND=_INTERPRETED,
        num_warps=num_warps,
        enable_fp_fusion=False,
    )  # fmt: skip


# ----------------------------------------------------------------------------- reductions


def validate_options(divergence: str, beta: float, temperature: float, reduction: str, topk: bool) -> None:
    if divergence not in DIVERGENCES:
        raise ValueError(f"divergence must be one of {DIVERGENCES}, got {divergence!r}")
    if not 0.0 <= beta <= 1.0:
        raise ValueError(f"beta must be in [0, 1], got {beta}")
    if not temperature > 0 or temperature == float("inf"):
        raise ValueError(f"temperature must be positive and finite, got {temperature}")
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}")
    if topk and (divergence == "reverse_kl" or (divergence == "jsd" and beta == 1.0)):
        raise ValueError("reverse KL against a top-K teacher is infinite (q = 0 off its K ids, where p > 0)")


def labels_1d(labels: torch.Tensor | None, row_shape: tuple[int, ...], device) -> torch.Tensor | None:
    if labels is None:
        return None
    if tuple(labels.shape) != row_shape:
        raise ValueError(f"labels must have the rows' shape {row_shape}, got {tuple(labels.shape)}")
    if labels.device != device:
        raise ValueError(f"labels are on {labels.device} but the logits on {device}")
    return labels.reshape(-1).contiguous()


def counted_rows(labels: torch.Tensor | None, ignore_index: int, n_rows: int, device) -> torch.Tensor:
    """float32 [N]: 1 for a counted row, 0 for an ignored one (no host sync)."""
    if labels is None:
        return torch.ones(n_rows, dtype=torch.float32, device=device)
    return (labels != ignore_index).float()


def reduce_rows(rows: torch.Tensor, counted: torch.Tensor, reduction: str, row_shape) -> torch.Tensor:
    """The loss from the per-row divergences (0 on ignored rows), on the device."""
    if reduction == "none":
        return rows.view(row_shape)
    total = rows.sum()
    if reduction == "sum":
        return total
    if reduction == "mean":
        return total / counted.sum().clamp_min(1.0)
    return total / max(rows.numel(), 1)  # batchmean: every row of the batch


def row_scale(dloss: torch.Tensor, counted: torch.Tensor, reduction: str) -> torch.Tensor:
    """float32 [N], contiguous: each row's share of the upstream gradient (0 on ignored rows)."""
    n = counted.numel()
    if reduction == "none":
        return (dloss.reshape(n).float() * counted).contiguous()
    up = dloss.float().reshape(())
    if reduction == "mean":
        up = up / counted.sum().clamp_min(1.0)
    elif reduction == "batchmean":
        up = up / max(n, 1)
    return (up * counted).contiguous()


# ----------------------------------------------------------------------------- autograd


def _validate(student, teacher, teacher_ids, labels, divergence, beta, temperature, reduction, ignore_index):
    if student.dim() not in (2, 3):
        raise ValueError(f"student logits must be [N, V] or [B, T, V], got shape {tuple(student.shape)}")
    for name, x in (("student", student), ("teacher", teacher)):
        if x.dtype not in (torch.float32, torch.bfloat16, torch.float16):
            raise TypeError(f"{name} must be float32, bfloat16 or float16, got {x.dtype}")
        if x.device != student.device:
            raise ValueError(f"{name} is on {x.device} but the student on {student.device}")
    rows = tuple(student.shape[:-1])
    topk = teacher_ids is not None
    validate_options(divergence, beta, temperature, reduction, topk)
    if topk:
        if tuple(teacher_ids.shape) != tuple(teacher.shape) or tuple(teacher.shape[:-1]) != rows:
            raise ValueError(
                f"a top-K teacher's log-probs and ids must both be {rows} + (K,), got "
                f"{tuple(teacher.shape)} and {tuple(teacher_ids.shape)}"
            )
        if teacher_ids.dtype not in (torch.int64, torch.int32):
            raise TypeError(f"teacher_ids must be int64 or int32, got {teacher_ids.dtype}")
    elif tuple(teacher.shape) != tuple(student.shape):
        raise ValueError(f"teacher logits must match the student's {tuple(student.shape)}, got {tuple(teacher.shape)}")
    return labels_1d(labels, rows, student.device)


class DistillFunction(torch.autograd.Function):
    """autograd wrapper; forward(...) returns the reduced loss (float32)."""

    @staticmethod
    def forward(ctx, student, teacher, teacher_ids, labels, divergence, beta, temperature, ignore_index,
                reduction, teacher_grad):  # fmt: skip
        lbl = _validate(student, teacher, teacher_ids, labels, divergence, beta, temperature, reduction, ignore_index)
        topk = teacher_ids is not None
        # a top-K teacher's small [N, K] tensors as the kernels read them (a copy of K values a row)
        t = teacher.reshape(-1, teacher.shape[-1]).float().contiguous() if topk else teacher
        ids = teacher_ids.reshape(t.shape).contiguous() if topk else None
        opts = dict(divergence=divergence, beta=beta, temperature=temperature, ignore_index=ignore_index)
        rows, stats = distill_rows(student, t, ids, lbl, **opts)
        counted = counted_rows(lbl, ignore_index, rows.numel(), student.device)
        ctx.save_for_backward(student, teacher)  # the caller's tensors, no copies
        ctx.kd = (t, ids, lbl, stats, counted, opts, reduction, teacher_grad)
        return reduce_rows(rows, counted, reduction, student.shape[:-1])

    @staticmethod
    def backward(ctx, dloss):
        student, teacher = ctx.saved_tensors
        t, ids, lbl, stats, counted, opts, reduction, teacher_grad = ctx.kd
        want_s = ctx.needs_input_grad[0]
        want_t = teacher_grad and ctx.needs_input_grad[1]
        if not (want_s or want_t):
            return (None,) * 10
        scale = row_scale(dloss, counted, reduction)
        gs = torch.empty(student.shape, dtype=student.dtype, device=student.device)
        gt = None
        if want_t:
            gt = torch.empty(t.shape if ids is not None else teacher.shape, dtype=torch.float32 if ids is not None
                             else teacher.dtype, device=teacher.device)  # fmt: skip
        distill_grad_rows(student, t if ids is not None else teacher, ids, lbl, stats, scale, gs, gt, **opts)
        if gt is not None:
            gt = gt.to(teacher.dtype).view(teacher.shape)
        return (gs if want_s else None), gt, *(None,) * 8


@opaque  # torch.compile runs it as it is, outside the graph: kernels/compile_boundary.py
def distill_loss(
    student: torch.Tensor,
    teacher: torch.Tensor,
    labels: torch.Tensor | None = None,
    *,
    teacher_ids: torch.Tensor | None = None,
    divergence: str = "forward_kl",
    beta: float = 0.5,
    temperature: float = 1.0,
    ignore_index: int = -100,
    reduction: str = "mean",
    teacher_grad: bool = False,
) -> torch.Tensor:
    """The divergence between softmax(student / T) and the teacher's distribution at T: the
    semantics in this module's docstring.

    student: logits [N, V] or [B, T, V] (float32, bfloat16 or float16; any strides, never copied
    or written). teacher: logits of the student's shape (its own strides), or with teacher_ids
    (int, [..., K], distinct ids) its top-K log-probs [..., K]. labels: the rows' shape, or None
    (every row counted). divergence: forward_kl, reverse_kl, jsd (with beta) or tvd. reduction:
    none (float32, the rows' shape), sum, mean (over counted rows) or batchmean (over all rows).
    teacher_grad: also give the teacher a gradient (off by default)."""
    return DistillFunction.apply(student, teacher, teacher_ids, labels, divergence, beta, temperature, ignore_index,
                                 reduction, teacher_grad)  # fmt: skip
