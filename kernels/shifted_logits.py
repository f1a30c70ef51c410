"""A chunk of logits kept in 2 bytes a logit, for the fused linear cross entropy: float16 values
shifted by the max of their block, beside float32 statistics of each block.

Why (kernels/NOTES.md, "the chunk in 2 bytes a logit"): the fused kernel's weight-gradient product
is formed per chunk of tokens, with K = the chunk's tokens, and each pass reads and writes the whole
[V, H] gradient; so the fewer bytes a chunk's logit costs, the more tokens a chunk holds and the
fewer passes. A logit must not be rounded to 16 bits before the loss is formed (a confident row's
loss moves by percent: docs/bugs.md, "What the careful yardstick found in our own kernels"), and the
loss here is not formed from the 16-bit values:

- `pack_slice`: a vocabulary slice's logits come out of the matmul in float32 (a small buffer);
  per (row, block of BLOCK columns) this kernel keeps, in float32, the block's max m_b and the
  sum s_b of exp(x - m_b) over its non-target columns, and the target's own logit x_y; it
  stores y = x - m_b in float16 into the chunk, in the column's place.
- `rows_loss_grad`: the row's max, sum and lse from the blocks' statistics (so the loss is that
  of the float32 logits, as exact as kernels/cross_entropy's), and, per block, the gradient of a
  column from its stored y: p = exp(y + m_b - lse). The gradient is written in the inputs'
  16-bit dtype over the same 2 bytes (each element is read and written by the same thread, and
  the target's logit comes from the statistics, never from the chunk: no barrier needed).

The only extra rounding is that of y: y <= 0, and the columns that carry gradient have y within
a few units of their block's max, where float16 keeps 11 bits (relative error of p at most
|y| * 2**-11, against the 2**-9 of the bfloat16 gradient itself). So this store is for
bfloat16 inputs only (a float16 gradient keeps 11 bits too, and would see the shift's error),
and without label smoothing, z-loss or softcap (their terms are not written here; the float32
chunk of kernels/fused_linear_cross_entropy.py has them). Targets outside [0, V) that are not
ignore_index give NaN rows, as in kernels/cross_entropy.py.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .row_tiles import clamp_rows, lanes, programs, row_max, row_sum, rows_per_program, tile_rows, within
from .triton_math import target_nll, to_store  # decides the Triton mode

# Columns per block (each block's statistics are two floats per row) and of the float32 slice
# (a multiple of the block; the float32 buffer is [chunk tokens, slice]). On the GPU: 4096-column
# blocks, 8 warps a program; 16384-column slices (H100, Llama-3-8B head: 2048-column blocks cost
# 0.3 ms more a step in the rows kernel, 32768-column slices gained nothing; kernels/NOTES.md). On
# CPU (Triton's interpreter; the verify grids' vocabularies are 100-257) small ones, so every CPU
# case runs several blocks, several slices and a partial last one of each.
BLOCK = {"cuda": 4096, "cpu": 32}
SLICE = {"cuda": 16384, "cpu": 64}


def block_size(device: torch.device) -> int:
    return BLOCK["cuda" if device.type == "cuda" else "cpu"]


def slice_width(n_cols: int, device: torch.device) -> int:
    """Columns of one float32 slice, or the whole vocabulary when it is smaller."""
    return min(SLICE["cuda" if device.type == "cuda" else "cpu"], n_cols)


def chunk_row_bytes(n_cols: int, device: torch.device) -> int:
    """Bytes a token of a chunk costs: its 2-byte logits and its row of the float32 slice."""
    return 2 * n_cols + 4 * slice_width(n_cols, device)


@triton.jit(do_not_specialize=["N"])  # N bounds the last tile's rows only
def _pack_kernel(
    x_ptr,  # float32 slice [rows, n_cols], rows stride_x apart
    stride_x,
    y_ptr,  # float16 chunk [rows, V], rows stride_y apart (the slice goes to columns col0..)
    stride_y,
    tgt_ptr,
    m_ptr,  # float32 [rows, NB] block maxima and sums, rows stride_st apart
    s_ptr,
    stride_st,
    xt_ptr,  # float32 [rows]: the target's logit (written by the block that holds it)
    col0,
    n_cols,
    N,
    BLOCK: tl.constexpr,
    ROWS: tl.constexpr,  # 0: one row a program; else a tile of rows (kernels/row_tiles.py)
):
    """Program (row or tile of rows, block): each row's block statistics, its shifted float16
    values and, from the block that holds it, its target's logit. A tile's rows past N read the
    last row; their stores are masked off."""
    rows = tile_rows(tl.program_id(0).to(tl.int64), ROWS)
    in_n = rows < N
    rows_c = clamp_rows(rows, N, ROWS)
    b = tl.program_id(1)
    offs = lanes(BLOCK, ROWS)
    cols = b * BLOCK + offs
    inside = cols < n_cols
    x = tl.load(x_ptr + rows_c * stride_x + cols, mask=inside, other=float("-inf")).to(tl.float32)
    t = tl.load(tgt_ptr + rows_c).to(tl.int64)
    gcols = col0 + cols
    m = row_max(x, ROWS)
    s = row_sum(tl.where(inside & (gcols != t), tl.exp(x - m), 0.0), ROWS)
    tl.store(y_ptr + rows * stride_y + gcols, (x - m).to(tl.float16), mask=within(in_n, inside, ROWS))
    blk = col0 // BLOCK + b
    tl.store(m_ptr + rows * stride_st + blk, m, mask=in_n)
    tl.store(s_ptr + rows * stride_st + blk, s, mask=in_n)
    lo = col0 + b * BLOCK
    hit = (t >= lo) & (t < lo + BLOCK) & (t < col0 + n_cols)
    x_t = row_sum(tl.where(gcols == t, x, 0.0), ROWS)
    tl.store(xt_ptr + rows, x_t, mask=in_n & hit)


@triton.jit(do_not_specialize=["NB", "ignore_index", "stride_tw", "N"])  # read once a row
def _rows_kernel(
    y_ptr,  # float16 chunk [rows, V] (pack_slice), rows stride_y apart; the gradient goes over it
    stride_y,
    g_ptr,  # the same storage in the gradient's dtype
    tgt_ptr,
    m_ptr,
    s_ptr,
    stride_st,
    xt_ptr,
    token_w_ptr,
    stride_tw,
    class_w_ptr,
    denom_ptr,
    loss_ptr,
    lse_ptr,
    V,
    NB,
    ignore_index,
    N,
    HAS_CLASS_W: tl.constexpr,
    HAS_TOKEN_W: tl.constexpr,
    MEAN: tl.constexpr,
    WRITE_GRAD: tl.constexpr,
    BLOCK: tl.constexpr,
    NB_P2: tl.constexpr,
    ROUND_BY_HAND: tl.constexpr,
    ROWS: tl.constexpr,  # 0: one row a program; else a tile of rows (kernels/row_tiles.py)
):
    """Program (row or tile of rows, block): each row's statistics from its blocks'; block 0
    stores the loss and lse; with WRITE_GRAD each program writes its block's gradient (upstream
    gradient 1). A tile's rows past N read the last row; their stores are masked off."""
    rows = tile_rows(tl.program_id(0).to(tl.int64), ROWS)
    in_n = rows < N
    rows_c = clamp_rows(rows, N, ROWS)
    b = tl.program_id(1)
    t = tl.load(tgt_ptr + rows_c).to(tl.int64)
    ignored = t == ignore_index
    valid = (t >= 0) & (t < V)
    j = lanes(NB_P2, ROWS)
    mb = tl.load(m_ptr + rows_c * stride_st + j, mask=j < NB, other=float("-inf"))
    sb = tl.load(s_ptr + rows_c * stride_st + j, mask=j < NB, other=0.0)
    m = row_max(mb, ROWS)
    s_o = row_sum(tl.where(j < NB, sb * tl.exp(mb - m), 0.0), ROWS)
    x_y = tl.load(xt_ptr + rows_c)  # NaN when no block held the target
    e_y = tl.exp(x_y - m)
    s = s_o + e_y
    log_s = tl.log(s)
    if HAS_CLASS_W:
        w_y = tl.load(class_w_ptr + t, mask=valid, other=float("nan")).to(tl.float32)
    else:
        w_y = 1.0
    if HAS_TOKEN_W:
        tw = tl.load(token_w_ptr + rows_c * stride_tw).to(tl.float32)
    else:
        tw = 1.0
    if b == 0:
        loss = tw * w_y * target_nll(m, s_o, x_y, log_s)
        tl.store(loss_ptr + rows, tl.where(ignored, 0.0, loss), mask=in_n)
        tl.store(lse_ptr + rows, tl.where(ignored, 0.0, m + log_s), mask=in_n)
    if WRITE_GRAD:
        scale = tw
        if MEAN:
            scale = scale / tl.load(denom_ptr).to(tl.float32)
        scale = tl.where(valid, scale, float("nan"))
        offs = lanes(BLOCK, ROWS)
        cols = b * BLOCK + offs
        inside = cols < V
        y = tl.load(y_ptr + rows_c * stride_y + cols, mask=inside, other=float("-inf")).to(tl.float32)
        m_b = tl.load(m_ptr + rows_c * stride_st + b)
        g = tl.exp((y + (m_b - m)) - log_s) * w_y
        # p_y - 1 = -s_o / s exactly: no cancellation on confident rows (docs/bugs.md, bug 6)
        g = tl.where(cols == t, w_y * (-s_o / s), g) * scale
        g = tl.where(ignored, 0.0, g)
        tl.store(
            g_ptr + rows * stride_y + cols, to_store(g, g_ptr.dtype.element_ty, ROUND_BY_HAND),
            mask=within(in_n, inside, ROWS),
        )  # fmt: skip


_INTERPRETED = type(_pack_kernel).__name__ == "InterpretedFunction"


class Stats:
    """Per-row statistics of one chunk: block maxima and sums [rows, NB], the target's logit."""

    def __init__(self, rows: int, n_cols: int, device: torch.device):
        self.block = block_size(device)
        self.nb = triton.cdiv(n_cols, self.block)
        self.m = torch.empty(rows, self.nb, dtype=torch.float32, device=device)
        self.s = torch.empty_like(self.m)
        self.xt = torch.empty(rows, dtype=torch.float32, device=device)

    def start(self, rows: int) -> None:
        """Before a chunk of `rows` rows: the target logit is NaN until a block holds it."""
        self.xt[:rows].fill_(float("nan"))


def pack_slice(x32: torch.Tensor, y16: torch.Tensor, target: torch.Tensor, stats: Stats, col0: int) -> None:
    """x32 [rows, w] float32 logits of columns col0..col0+w (col0 a multiple of stats.block)
    -> y16[:, col0:col0+w] (float16, shifted by each block's max) and the blocks' statistics."""
    rows, n_cols = x32.shape
    if rows == 0 or n_cols == 0:
        return
    if col0 % stats.block:
        raise ValueError(f"slice start {col0} is not a multiple of the block ({stats.block})")
    tile = rows_per_program(rows, stats.block, x32.device)
    _pack_kernel[programs(rows, tile) + (triton.cdiv(n_cols, stats.block),)](
        x32, x32.stride(0), y16, y16.stride(0), target, stats.m, stats.s, stats.m.stride(0), stats.xt,
        col0, n_cols, rows, BLOCK=stats.block, ROWS=tile, num_warps=8 if x32.is_cuda else 4,
    )  # fmt: skip


def rows_loss_grad(
    y16: torch.Tensor,
    grad: torch.Tensor | None,
    target: torch.Tensor,
    stats: Stats,
    *,
    ignore_index: int,
    class_weight: torch.Tensor | None,
    token_weight: torch.Tensor | None,
    denom: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row float32 (loss, lse) of a packed chunk [rows, V]; with `grad` (the same storage
    viewed in the 16-bit gradient dtype) also the gradient of sum(loss) (/ denom when given)."""
    rows, n_cols = y16.shape
    loss = torch.empty(rows, dtype=torch.float32, device=y16.device)
    lse = torch.empty_like(loss)
    if rows == 0:
        return loss, lse
    if grad is not None and (grad.untyped_storage().data_ptr() != y16.untyped_storage().data_ptr()
                             or grad.stride() != y16.stride() or grad.element_size() != 2):  # fmt: skip
        raise ValueError("the gradient must be the packed chunk's own 2-byte storage")
    tile = rows_per_program(rows, stats.block, y16.device)
    _rows_kernel[programs(rows, tile) + (stats.nb if grad is not None else 1,)](
        y16, y16.stride(0), grad if grad is not None else y16, target,
        stats.m, stats.s, stats.m.stride(0), stats.xt,
        token_weight if token_weight is not None else loss,
        token_weight.stride(0) if token_weight is not None else 0,
        class_weight if class_weight is not None else loss,
        denom if denom is not None else loss,
        loss, lse, n_cols, stats.nb, ignore_index, rows,
        HAS_CLASS_W=class_weight is not None, HAS_TOKEN_W=token_weight is not None, MEAN=denom is not None,
        WRITE_GRAD=grad is not None, BLOCK=stats.block, NB_P2=triton.next_power_of_2(stats.nb),
        ROUND_BY_HAND=_INTERPRETED, ROWS=tile, num_warps=8 if y16.is_cuda else 4,
    )  # fmt: skip
    return loss, lse
