"""Cross entropy over logits, in Triton: one kernel computes the loss and the gradient.

    import torch
    from ligerbench.kernels.cross_entropy import cross_entropy
    logits = torch.randn(8, 1000, requires_grad=True)   # on a GPU: device="cuda", bf16
    target = torch.randint(0, 1000, (8,))
    cross_entropy(logits, target, reduction="mean").backward()

Design (the cost model is in docs/performance.md: read the logits once, write the gradient once):
- one program owns a row; pass 1 is an online softmax over the row (running max and sum),
  pass 2 walks the row backwards (the blocks pass 1 read last are the likeliest still in L2)
  and writes the gradient for an upstream gradient of 1;
- backward only rescales rows whose upstream gradient is not 1, deciding on the device, so
  `loss.backward()` costs one tiny launch and no host sync; with reduction="none" (per-row
  upstream gradients, rarely all 1) the gradient is formed in backward instead, from the saved
  logits, so a 16-bit gradient is rounded once, not once in forward and again when scaled;
- targets out of [0, V) (not ignore_index) are checked on the device on a GPU (a one-program-
  per-target kernel sets a flag and printf-names the value, then torch._assert_async): no host
  sync anywhere on the default path; on CPU the check is on the host (ValueError);
- accumulation is in float32 whatever the logits dtype; the sum of the non-target
  probabilities is kept apart so that the target's gradient, p_y - 1 = -sum_others / sum,
  stays exact when p_y is close to 1 (confident logits; docs/bugs.md, bug 6).

Output dtypes: the loss (and z-loss) is float32 for every logits dtype (PyTorch returns the
logits dtype); the gradient has the logits' dtype.
"""

from __future__ import annotations

import weakref
from typing import Literal

import torch
import triton
import triton.language as tl

from .row_tiles import (
    any_row,
    clamp_rows,
    lane_full,
    lanes,
    programs,
    row_max,
    row_sum,
    rows_per_program,
    store_rows,
    tile_rows,
    within,
)
from .triton_math import cap_block, load_block, softcap_and_slope, target_nll, to_store  # decides the Triton mode
from .triton_mode import device_function

Reduction = Literal["none", "mean", "sum"]
REDUCTIONS: tuple[str, ...] = ("none", "mean", "sum")


@device_function
def _row_stats(
    x_row,
    class_w_ptr,
    t,
    V,
    cap,
    BLOCK_V: tl.constexpr,
    SOFTCAP: tl.constexpr,
    SMOOTH: tl.constexpr,
    HAS_CLASS_W: tl.constexpr,
    POLICY: tl.constexpr,
    ROWS: tl.constexpr,
):
    """Pass 1 over one row of V columns: running max m, sum of exp(x - m) over the
    non-target classes s_o, and for label smoothing d = sum_j w_j (m - x_j) and sum_j w_j.
    ROWS 0: one row, x_row a pointer and t a scalar, scalars out; else a tile's rows (x_row and t
    [ROWS, 1] columns), [ROWS, 1] columns out (kernels/row_tiles.py).

    Smoothing needs sum_j w_j (lse - x_j) = W * log_s + d. Every term of d is >= 0, so nothing
    cancels: the older form W * lse - sum_j w_j x_j cancelled (catastrophically for large |x|),
    and a compiler's fused multiply-add turned it into the rounding error of w * x where the
    true value is exactly 0 (V=1: measured -1.7e-7 against an exact 0 on an H100)."""
    offs = lanes(BLOCK_V, ROWS)
    if ROWS == 0:
        m = float("-inf")
        d = 0.0
        sum_w = 0.0
    else:  # a loop carries its variables' shapes: a tile's are columns from the start
        m = tl.full([ROWS, 1], float("-inf"), tl.float32)
        d = tl.zeros([ROWS, 1], tl.float32)
        sum_w = tl.zeros([ROWS, 1], tl.float32)
    s_v = lane_full(0.0, BLOCK_V, ROWS)
    # Each iteration issues the next block's load before working on this one, so two blocks of
    # reads are in flight. Pass-1 reads ask L2 to keep the row: pass 2 reads it again.
    x_next = load_block(x_row, offs, V, POLICY)
    # One cross-warp reduction a block (the max); the sums stay per lane, rescaled by the block's
    # scalar factor, and are reduced once at the row's end (H100: 5-14% faster than a max and a
    # sum a block at N=4096-16384, V=32000-256000; kernels/NOTES.md, "Cross entropy").
    for b in range(0, tl.cdiv(V, BLOCK_V)):
        cols = b * BLOCK_V + offs
        in_row = cols < V
        x_raw = x_next
        x_next = load_block(x_row, cols + BLOCK_V, V, POLICY)
        x, _ = cap_block(x_raw, in_row, cap, SOFTCAP)
        m_new = tl.maximum(m, row_max(x, ROWS))
        s_v = s_v * tl.exp(m - m_new) + tl.where(cols == t, 0.0, tl.exp(x - m_new))
        if SMOOTH:
            if HAS_CLASS_W:
                w = tl.load(class_w_ptr + cols, mask=in_row, other=0.0).to(tl.float32)
            else:
                w = tl.where(in_row, 1.0, 0.0)
            # the columns seen so far move up by the max's rise (none seen yet: nothing to move)
            d = tl.where(sum_w > 0.0, d + sum_w * (m_new - m), 0.0)
            d += row_sum(w * tl.where(in_row, m_new - x, 0.0), ROWS)
            sum_w += row_sum(w, ROWS)
        m = m_new
    s_o = row_sum(s_v, ROWS)
    return m, s_o, d, sum_w


# _ce_fwd_kernel's arguments, passed through one by one as its launch takes them (do_not_specialize names them)
@device_function
def _row_finish(row, live, t, m, s_o, d, sum_w, x_row, g_row, grad_ptr, token_w_ptr, stride_tw, class_w_ptr, denom_ptr,
                loss_ptr, zloss_ptr, lse_ptr, V, smoothing, cap, z_scale, has_token_w, zloss, mean,
                HAS_CLASS_W: tl.constexpr, SMOOTH: tl.constexpr, SOFTCAP: tl.constexpr, WRITE_GRAD: tl.constexpr,
                BLOCK_V: tl.constexpr, ROUND_BY_HAND: tl.constexpr, POLICY: tl.constexpr,
                SYNC: tl.constexpr, ROWS: tl.constexpr):  # fmt: skip
    """From the pass-1 statistics of a program's rows (`row` their ids, `live` those to write:
    kernels/row_tiles.py): store each row's loss, z-loss and lse, then (WRITE_GRAD) pass 2,
    which writes its gradient for an upstream gradient of 1. SYNC (the gradient shares the
    logits' storage, _sync_level): 1, every warp has read the target's logit before any
    gradient is stored; 2, also every block before any warp stores its gradient."""
    offs = lanes(BLOCK_V, ROWS)
    n_blocks = tl.cdiv(V, BLOCK_V)
    # A target outside [0, V) gives NaN (loss and gradient), never a silent number.
    valid = (t >= 0) & (t < V)
    x_y = tl.load(x_row + t, mask=valid, other=float("nan")).to(tl.float32)
    if SOFTCAP:
        x_y, _ = softcap_and_slope(x_y, cap)
    # lse = m + log_s is kept in two parts: (x - m) - log_s loses nothing when |x| is large,
    # where x - lse would first round lse to the ulp of |x|
    e_y = tl.exp(x_y - m)
    s = s_o + e_y
    log_s = tl.log(s)
    lse = m + log_s
    if HAS_CLASS_W:
        w_y = tl.load(class_w_ptr + t, mask=valid, other=float("nan")).to(tl.float32)
    else:
        w_y = 1.0
    nll = target_nll(m, s_o, x_y, log_s)  # lse - x_y, no cancellation on confident rows
    if SMOOTH:
        # PyTorch: (1 - eps) * w_y * (lse - x_y) + eps / V * sum_j w_j * (lse - x_j), the last
        # sum being W * log_s + d (W = sum_j w_j: V without class weights)
        loss = (1.0 - smoothing) * w_y * nll + smoothing / V * (sum_w * log_s + d)
    else:
        loss = w_y * nll
    # has_token_w, zloss, mean: per-row options, runtime flags (0 or 1), not constexprs: each
    # constexpr doubles the variants a varied grid compiles, and these cost a row nothing
    zl = tl.where(zloss != 0, z_scale * lse * lse, 0.0)
    tw = tl.load(token_w_ptr + row * stride_tw, mask=tl.where(has_token_w != 0, live, False), other=1.0).to(tl.float32)
    store_rows(loss_ptr + row, tw * (loss + zl), live, ROWS)
    store_rows(zloss_ptr + row, tw * zl, live, ROWS)
    store_rows(lse_ptr + row, lse, live, ROWS)

    if WRITE_GRAD:
        # d loss / d x_j = p_j * A - eps / V * w_j  (j != y), with
        # A = (1 - eps) * w_y + eps * W / V + 2 * z * lse, W = sum_j w_j.
        p_y = e_y / s
        if SMOOTH:
            a = (1.0 - smoothing) * w_y + smoothing * sum_w / V
            # p_y - 1 = -s_o / s exactly: no cancellation when p_y -> 1 (docs/bugs.md, bug 6)
            g_y = (1.0 - smoothing) * w_y * (-s_o / s) + smoothing / V * (sum_w * p_y - w_y)
        else:
            a = w_y
            g_y = w_y * (-s_o / s)
        a = tl.where(zloss != 0, a + 2.0 * z_scale * lse, a)
        g_y = tl.where(zloss != 0, g_y + 2.0 * z_scale * lse * p_y, g_y)
        scale = tw / tl.load(denom_ptr, mask=mean != 0, other=1.0).to(tl.float32)
        scale = tl.where(valid, scale, float("nan"))
        # Pass 2 walks the row last block first (those are the likeliest still in L2); its
        # reads and the gradient stores ask L2 not to keep their lines. The fused linear kernel
        # relies on this order and on each block being read before its gradient is stored: it
        # lays a 16-bit gradient over the upper half of the float32 row (grad_over_logits).
        # A program's warps run apart (nothing in this loop waits for the others), so a warp
        # ahead could store over logits a warp behind has yet to load (seen on an H100:
        # docs/bugs.md, bug 9). SYNC 2 puts a barrier after each block's gradient is computed,
        # so every warp's loads of it and of earlier blocks are done before any store.
        if SYNC == 1:
            tl.debug_barrier()
        x_next = load_block(x_row, (n_blocks - 1) * BLOCK_V + offs, V, POLICY)
        for rb in range(0, n_blocks):
            cols = (n_blocks - 1 - rb) * BLOCK_V + offs
            in_row = cols < V
            x_raw = x_next
            x_next = load_block(x_row, cols - BLOCK_V, V, POLICY)
            x, dx = cap_block(x_raw, in_row, cap, SOFTCAP)
            g = tl.exp((x - m) - log_s) * a
            if SMOOTH:
                if HAS_CLASS_W:
                    w = tl.load(class_w_ptr + cols, mask=in_row, other=0.0).to(tl.float32)
                    g -= smoothing / V * w
                else:
                    g -= smoothing / V
            g = tl.where(cols == t, g_y, g) * scale
            if SOFTCAP:
                g = g * dx
            if SYNC == 2:
                tl.debug_barrier()
            tl.store(
                g_row + cols, to_store(g, grad_ptr.dtype.element_ty, ROUND_BY_HAND), mask=within(live, in_row, ROWS),
                eviction_policy=POLICY,
            )  # fmt: skip


@device_function
def _zero_row(g_row, V, grad_ptr, BLOCK_V: tl.constexpr, keep, ROWS: tl.constexpr):
    """Zeros over the gradient of the rows at g_row where `keep` holds (kernels/row_tiles.py)."""
    offs = lanes(BLOCK_V, ROWS)
    for b in range(0, tl.cdiv(V, BLOCK_V)):
        cols = b * BLOCK_V + offs
        zeros = tl.zeros_like(cols).to(grad_ptr.dtype.element_ty)
        tl.store(g_row + cols, zeros, mask=within(keep, cols < V, ROWS))


# Ints Triton need not compile a variant for (it specialises each int on == 1 and on divisibility
# by 16, one compiled variant each): read once a row, they gain nothing from it, and the verify
# grid's ignore_index (-100, -1, 0) and token-weight strides (0, 1, a column's) made 301 variants
# of this kernel in ce's quick verify, 233 without (count_variants.py:
# results/README.md#where-the-probes-went). The strides of the rows and V stay specialised: they let
# rows be read in 16-byte vectors. The per-row options (has_token_w, zloss, mean, only_rescaled: 0
# or 1) are runtime flags for the same reason: as constexprs they made 323 compiled variants of this
# kernel in ce's cold quick verify on an H100, ~0.25 s of Triton's compile each (cProfile:
# kernels/NOTES.md); on CPU's count 264 -> 118.
@triton.jit(do_not_specialize=["stride_tw", "ignore_index", "stride_only", "has_token_w", "zloss", "mean",
                               "only_rescaled", "N"])  # fmt: skip
def _ce_fwd_kernel(
    # logits [N, V] with rows `stride_x` elements apart; gradient [N, V] (may alias the logits)
    x_ptr,
    stride_x,
    grad_ptr,
    stride_g,
    # per-row inputs: target ids; token weights (only read if has_token_w), `stride_tw` apart: 0
    # for the upstream of loss.sum().backward() (a 1 expanded over the rows), or a column's stride
    tgt_ptr,
    token_w_ptr,
    stride_tw,
    # class weights [V] (only read if HAS_CLASS_W); the mean's denominator, a device scalar
    class_w_ptr,
    denom_ptr,
    # per-row outputs, float32: weighted loss (z-loss included), weighted z-loss, log-sum-exp
    loss_ptr,
    zloss_ptr,
    lse_ptr,
    # sizes and options
    V,
    ignore_index,
    smoothing,
    cap,
    z_scale,
    has_token_w,
    zloss,
    mean,
    HAS_CLASS_W: tl.constexpr,
    SMOOTH: tl.constexpr,
    SOFTCAP: tl.constexpr,
    WRITE_GRAD: tl.constexpr,
    BLOCK_V: tl.constexpr,
    ROUND_BY_HAND: tl.constexpr,
    POLICY_KEEP: tl.constexpr,  # L2 eviction hint for pass-1 reads ("evict_last" or "")
    POLICY_DROP: tl.constexpr,  # for pass-2 reads and gradient stores ("evict_first" or "")
    SYNC: tl.constexpr,  # barriers for a gradient that shares the logits' storage (_sync_level)
    ROWS: tl.constexpr,  # 0: one row a program; else a tile of rows (kernels/row_tiles.py)
    N,  # rows: bounds the last tile
    # only_rescaled: rows whose factor at only_ptr (`stride_only` apart) is exactly 1 are left as
    # they are (their gradient formed already); the others are formed anew (rescale_formed_grad)
    only_ptr,
    stride_only,
    only_rescaled,
):
    """One row a program, or a tile of rows (kernels/row_tiles.py): pass 1 (statistics), then
    loss and pass 2 (gradient). A tile's rows past N read the last row (their stores are masked
    off), so the loads need no row mask."""
    rows = tile_rows(tl.program_id(0).to(tl.int64), ROWS)  # int64: row * stride exceeds 2**31
    in_n = rows < N
    rows_c = clamp_rows(rows, N, ROWS)
    x_row = x_ptr + rows_c * stride_x
    g_row = grad_ptr + rows_c * stride_g
    t = tl.load(tgt_ptr + rows_c).to(tl.int64)
    # (a flag and a tile's column are combined with tl.where, not &: Triton's interpreter (3.9)
    # gives `column & scalar flag` int32 data under an int1 type, which a mask then refuses)
    factor = tl.load(only_ptr + rows_c * stride_only, mask=tl.where(only_rescaled != 0, in_n, False), other=0.0)
    work = tl.where(only_rescaled == 0, in_n, in_n & (factor.to(tl.float32) != 1.0) & (t != ignore_index))
    idle = work & (t == ignore_index)
    live = work & (t != ignore_index)
    if any_row(idle, ROWS):  # an ignored row: loss 0 and a zero gradient
        store_rows(loss_ptr + rows, 0.0, idle, ROWS)
        store_rows(zloss_ptr + rows, 0.0, idle, ROWS)
        store_rows(lse_ptr + rows, 0.0, idle, ROWS)
        if WRITE_GRAD:
            _zero_row(g_row, V, grad_ptr, BLOCK_V, idle, ROWS)
    if any_row(live, ROWS):
        m, s_o, d, sum_w = _row_stats(x_row, class_w_ptr, t, V, cap, BLOCK_V, SOFTCAP, SMOOTH, HAS_CLASS_W,
                                      POLICY_KEEP, ROWS)  # fmt: skip
        _row_finish(
            rows, live, t, m, s_o, d, sum_w, x_row, g_row, grad_ptr, token_w_ptr, stride_tw, class_w_ptr,
            denom_ptr, loss_ptr, zloss_ptr, lse_ptr, V, smoothing, cap, z_scale, has_token_w, zloss, mean,
            HAS_CLASS_W, SMOOTH, SOFTCAP, WRITE_GRAD, BLOCK_V, ROUND_BY_HAND, POLICY_DROP, SYNC, ROWS,
        )  # fmt: skip


@triton.jit(do_not_specialize=["V", "ignore_index"])  # one target a program
def _check_targets_kernel(tgt_ptr, ok_ptr, V, ignore_index):
    """The device check, one program per target: a target outside [0, V) that is not
    ignore_index sets the flag to 0 (every writer stores the same 0: no atomic needed) and is
    named by a device printf. Apart from the loss kernel: a printf inside it cost 13% (NOTES.md)."""
    row = tl.program_id(0).to(tl.int64)
    t = tl.load(tgt_ptr + row).to(tl.int64)
    if (t != ignore_index) & ((t < 0) | (t >= V)):
        tl.device_print("cross_entropy: target out of range [0, V), not ignore_index: row, target", row, t)
        tl.store(ok_ptr, 0)


@triton.jit(do_not_specialize=["stride_up", "N"])  # read once a row; the grid-stride loop's bound
def _scale_rows_kernel(
    grad_ptr,
    stride_g,
    up_ptr,  # upstream gradient: one value per row (stride_up = 1) or one for all (stride_up = 0)
    stride_up,
    N,
    V,
    BLOCK_V: tl.constexpr,
    ROUND_BY_HAND: tl.constexpr,
    ROWS: tl.constexpr,  # 0: one row at a time; else a tile of rows (kernels/row_tiles.py)
):
    pid = tl.program_id(0).to(tl.int64)
    n_programs = tl.num_programs(0).to(tl.int64)
    offs = lanes(BLOCK_V, ROWS)
    n_tiles = N
    if ROWS > 0:
        n_tiles = tl.cdiv(N, ROWS)
    for i in range(0, tl.cdiv(n_tiles - pid, n_programs)):
        rows = tile_rows(pid + i * n_programs, ROWS)
        in_n = rows < N
        up = tl.load(up_ptr + rows * stride_up, mask=in_n, other=1.0).to(tl.float32)
        # The forward already wrote the gradient for an upstream gradient of 1: most rows of a
        # training step need nothing more, and the test is made here, on the device.
        scaled = up != 1.0
        if any_row(scaled, ROWS):
            g_row = grad_ptr + rows * stride_g
            for b in range(0, tl.cdiv(V, BLOCK_V)):
                cols = b * BLOCK_V + offs
                keep = within(scaled, cols < V, ROWS)
                g = tl.load(g_row + cols, mask=keep, other=0.0).to(tl.float32)
                tl.store(g_row + cols, to_store(g * up, grad_ptr.dtype.element_ty, ROUND_BY_HAND), mask=keep)


# ----------------------------------------------------------------------------- launchers

# True when triton.jit gave us the interpreter (TRITON_INTERPRET=1 at import): see
# triton_math.to_store.
_INTERPRETED = type(_ce_fwd_kernel).__name__ == "InterpretedFunction"

# Launch shape, measured on an H100 (N=8192, V=128256, bf16, forward+backward; kernels/NOTES.md):
# one program per row, 4096-wide blocks, 16 warps: 1.94 ms. Persistent grids (1-4 programs per
# SM) and rows split across programs were slower. The cross-entropy kernel itself takes 8192-wide
# blocks since its pass 1 keeps per-lane sums (1.947 against 2.080 ms in one run: kernels/NOTES.md,
# "Cross entropy"); the other kernels that share this shape were not
# measured with them.
_MAX_BLOCK_V = 4096
_CE_MAX_BLOCK_V = 8192
_L2_HINTS = True


def _launch_config(n_cols: int, device: torch.device, max_block: int | None = None) -> tuple[int, int]:
    """(BLOCK_V, num_warps) for rows of n_cols columns, blocks of at most `max_block` columns
    (default _MAX_BLOCK_V, read at the call: a test may cut it to make a row span blocks)."""
    block_v = min(triton.next_power_of_2(max(n_cols, 1)), _MAX_BLOCK_V if max_block is None else max_block)
    if device.type == "cuda":
        num_warps = 16 if block_v >= 4096 else (8 if block_v >= 1024 else 4)
    else:  # Triton's interpreter ignores warps
        num_warps = 4
    return block_v, num_warps


CheckTargets = Literal[True, False, "host", "device"]
CHECK_TARGETS: tuple = (True, False, "host", "device")


def resolve_check(check_targets, device: torch.device) -> str | None:
    """Where the range check on the targets runs: "host", "device" or None (no check).

    True (the default) is "device" on a GPU (no host sync) and "host" elsewhere (on CPU the
    host check costs no sync and raises a ValueError naming the value)."""
    if check_targets is True:
        return "device" if device.type == "cuda" else "host"
    if check_targets is False:
        return None
    if check_targets in ("host", "device"):
        return check_targets
    raise ValueError(f"check_targets must be one of {CHECK_TARGETS}, got {check_targets!r}")


def check_targets_in_range(target: torch.Tensor, n_classes: int, ignore_index: int) -> None:
    """Raise ValueError if a target is outside [0, n_classes) and not ignore_index.

    The host check: costs one device-to-host sync on a GPU (check_targets="host")."""
    bad = ((target < 0) | (target >= n_classes)) & (target != ignore_index)
    if bool(bad.any()):
        first = int(target[bad][0])
        raise ValueError(f"target holds {first}, outside [0, {n_classes}) and not ignore_index={ignore_index}")


def check_targets_on_device(target: torch.Tensor, n_classes: int, ignore_index: int) -> None:
    """The device check (check_targets="device", the default on a GPU): no host sync. One small
    kernel flags (and printf-names) targets outside [0, n_classes) that are not ignore_index;
    torch._assert_async on the flag then fails the CUDA stream as PyTorch's own index checks do
    (the error comes back at the next CUDA call). On CPU the assertion raises RuntimeError."""
    ok = torch.ones(1, dtype=torch.int32, device=target.device)
    if target.numel():
        _check_targets_kernel[(target.numel(),)](target, ok, n_classes, ignore_index, num_warps=1)
    torch._assert_async(ok, f"a target is outside [0, {n_classes}) and not ignore_index={ignore_index} (cross_entropy)")


def run_target_check(check_targets, target: torch.Tensor, n_classes: int, ignore_index: int) -> None:
    """The range check `check_targets` asks for (resolve_check) on a 1-D contiguous `target`."""
    where = resolve_check(check_targets, target.device)
    if where == "host":
        check_targets_in_range(target, n_classes, ignore_index)
    elif where == "device":
        check_targets_on_device(target, n_classes, ignore_index)


def mean_denominator(
    target: torch.Tensor, weight: torch.Tensor | None, ignore_index: int, n_classes: int
) -> torch.Tensor:
    """PyTorch's denominator for reduction='mean', as a float32 device scalar (no sync):
    the number of counted targets, or with class weights the sum of their weights."""
    counted = target != ignore_index
    if weight is None:
        return counted.sum(dtype=torch.float32)
    safe = torch.where(counted, target, 0).clamp(0, n_classes - 1)
    return (weight.float()[safe] * counted).sum()


def cross_entropy_rows(
    logits: torch.Tensor,
    target: torch.Tensor,
    *,
    grad_out: torch.Tensor | None,
    denom: torch.Tensor | None = None,
    weight: torch.Tensor | None = None,
    token_weight: torch.Tensor | None = None,
    ignore_index: int = -100,
    label_smoothing: float = 0.0,
    softcap: float | None = None,
    z_loss_scale: float = 0.0,
    only_where_not_one: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Low-level launch over a 2-D `logits` [N, V] (last dim contiguous).

    Returns float32 per-row (loss, z_loss, lse); loss includes the z-loss and the token weight
    (`token_weight` [N], any stride: 0 for an upstream of loss.sum().backward(), handed as is).
    If `grad_out` is given ([N, V], last dim contiguous, may be `logits` itself) the gradient of
    sum(loss) -- or of sum(loss) / denom when `denom` is given -- is written into it.
    A target outside [0, V) that is not ignore_index gives its row NaN (loss and gradient).
    only_where_not_one ([N] floats, any stride): only the counted rows whose value is not
    exactly 1 are computed; the other rows of every output are left as they are.
    Used by the fused linear kernel on chunks of logits. No validation, no host sync."""
    n_rows, n_cols = logits.shape
    dev = logits.device
    loss = torch.empty(n_rows, dtype=torch.float32, device=dev)
    zloss = torch.empty_like(loss)
    lse = torch.empty_like(loss)
    if n_rows == 0:
        return loss, zloss, lse
    block_v, num_warps = _launch_config(n_cols, dev, _CE_MAX_BLOCK_V)
    write_grad = grad_out is not None
    tile = rows_per_program(n_rows, block_v, dev)
    _ce_fwd_kernel[programs(n_rows, tile)](
        logits,
        logits.stride(0),
        grad_out if write_grad else logits,
        grad_out.stride(0) if write_grad else 0,
        target,
        token_weight if token_weight is not None else loss,
        token_weight.stride(0) if token_weight is not None else 0,
        weight if weight is not None else loss,
        denom if denom is not None else loss,
        loss,
        zloss,
        lse,
        n_cols,
        ignore_index,
        float(label_smoothing),
        float(softcap) if softcap else 1.0,
        float(z_loss_scale),
        int(token_weight is not None),
        int(z_loss_scale != 0.0),
        int(denom is not None),
        HAS_CLASS_W=weight is not None,
        SMOOTH=label_smoothing > 0.0,
        SOFTCAP=bool(softcap),
        WRITE_GRAD=write_grad,
        BLOCK_V=block_v,
        ROUND_BY_HAND=_INTERPRETED,
        POLICY_KEEP="evict_last" if _L2_HINTS else "",
        POLICY_DROP="evict_first" if _L2_HINTS else "",
        SYNC=_sync_level(grad_out, logits) if write_grad else 0,
        ROWS=tile,
        N=n_rows,
        only_ptr=only_where_not_one if only_where_not_one is not None else loss,
        stride_only=only_where_not_one.stride(0) if only_where_not_one is not None else 0,
        only_rescaled=int(only_where_not_one is not None),
        num_warps=num_warps,
    )
    return loss, zloss, lse


def _sync_level(grad: torch.Tensor, logits: torch.Tensor) -> int:
    """0: the gradient has storage of its own. 1: it is the logits themselves (in place: a
    thread overwrites only the elements it has just read, but the target's logit is read by
    every warp before pass 2). 2: it lies over the logits with another element size or layout
    (the fused linear kernel's 16-bit gradient over float32 logits, fp32_products.grad_over_logits):
    a store lands on logits other warps read."""
    if grad.untyped_storage().data_ptr() != logits.untyped_storage().data_ptr():
        return 0
    same = grad.element_size() == logits.element_size() and grad.stride() == logits.stride()
    return 1 if same and grad.storage_offset() == logits.storage_offset() else 2


def scale_rows_(grad: torch.Tensor, upstream: torch.Tensor) -> torch.Tensor:
    """grad[i, :] *= upstream[i] (or *= upstream if it has one element), in place, on device;
    rows whose factor is exactly 1 are not touched."""
    n_rows, n_cols = grad.shape
    if n_rows == 0:
        return grad
    up = upstream.reshape(-1) if upstream.numel() > 1 else upstream.reshape(1)
    stride_up = up.stride(0) if up.numel() > 1 else 0
    block_v, num_warps = _launch_config(n_cols, grad.device)
    tile = rows_per_program(n_rows, block_v, grad.device)
    _scale_rows_kernel[programs(n_rows, tile)](
        grad,
        grad.stride(0),
        up,
        stride_up,
        n_rows,
        n_cols,
        BLOCK_V=block_v,
        ROUND_BY_HAND=_INTERPRETED,
        ROWS=tile,
        num_warps=num_warps,
    )
    return grad


# ----------------------------------------------------------------------------- autograd


def _validate(logits, target, weight, token_weight, reduction, label_smoothing, softcap):
    check_logits_and_target(logits, target)
    validate_loss_options(
        logits.shape[-1], target, weight, token_weight, reduction, label_smoothing, softcap, device=logits.device
    )


def check_logits_and_target(logits, target, name: str = "logits", classes: str = "V") -> None:
    """Logits [N, C] or [B, T, C] in a dtype the kernels take, and class ids `target` of their
    shape without the class dim (shared by this kernel and the vocab-parallel one). `name` and
    `classes` are what the messages call the logits and their class dim."""
    if logits.dim() not in (2, 3):
        raise ValueError(f"{name} must be 2-D [N, {classes}] or 3-D [B, T, {classes}], got shape {tuple(logits.shape)}")
    if logits.dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise TypeError(f"{name} must be float32, bfloat16 or float16, got {logits.dtype}")
    if target.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"target must be int64 or int32 class ids, got {target.dtype}")
    if tuple(target.shape) != tuple(logits.shape[:-1]):
        raise ValueError(
            f"target shape {tuple(target.shape)} must equal {name} shape without the class dim "
            f"{tuple(logits.shape[:-1])}"
        )


def validate_loss_options(
    n_classes, target, weight, token_weight, reduction, label_smoothing, softcap, *, device, names=("weight", "logits")
):
    """Checks shared by every loss over classes (this kernel and the fused linear one):
    devices, class and token weight shapes, reduction, smoothing, softcap. `names` are the
    caller's names for the class weights and for the tensor that sets the device."""
    weight_name, device_name = names
    for name, t in (("target", target), (weight_name, weight), ("token_weight", token_weight)):
        if t is not None and t.device != device:
            raise ValueError(f"{name} is on {t.device} but {device_name} is on {device}")
    if weight is not None and tuple(weight.shape) != (n_classes,):
        raise ValueError(f"{weight_name} must have shape ({n_classes},), got {tuple(weight.shape)}")
    if token_weight is not None and tuple(token_weight.shape) != tuple(target.shape):
        raise ValueError(
            f"token_weight must have the target's shape {tuple(target.shape)}, got {tuple(token_weight.shape)}"
        )
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}")
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"label_smoothing must be in [0, 1], got {label_smoothing}")
    if softcap is not None and not softcap > 0:
        raise ValueError(f"softcap must be positive or None, got {softcap}")


class CrossEntropyFunction(torch.autograd.Function):
    """autograd wrapper; forward(...) returns (loss, z_loss), z_loss only for logging."""

    # apply's arguments by position (autograd.Function takes no keywords): this op's options, its own
    @staticmethod
    def forward(ctx, logits, target, weight, token_weight, ignore_index, reduction, label_smoothing, softcap,
                z_loss_scale, inplace_backward, check_targets):  # fmt: skip
        _validate(logits, target, weight, token_weight, reduction, label_smoothing, softcap)
        shape = logits.shape
        n_cols = shape[-1]
        x = logits.reshape(-1, n_cols)
        if x.stride(-1) != 1:  # a copy; the caller's tensor is never written through it
            x = x.contiguous()
        t = target.reshape(-1).contiguous()  # the kernels read the ids as a dense vector
        tw = token_weight.reshape(-1).float() if token_weight is not None else None
        w = weight.float().contiguous() if weight is not None else None
        run_target_check(check_targets, t, n_cols, ignore_index)
        denom = mean_denominator(t, w, ignore_index, n_cols) if reduction == "mean" else None

        options = dict(weight=w, ignore_index=ignore_index, label_smoothing=label_smoothing, softcap=softcap,
                       z_loss_scale=z_loss_scale)  # fmt: skip
        needs_grad = ctx.needs_input_grad[0]
        # reduction="none" with a fresh gradient buffer: the gradient is formed in backward, where
        # each row's upstream is known, so it is rounded to the logits' dtype once (formed here
        # and scaled there, a 16-bit gradient would be rounded twice: docs/performance.md)
        deferred = needs_grad and reduction == "none" and not inplace_backward
        grad = None
        if needs_grad and not deferred:
            grad = x if inplace_backward else torch.empty_like(x)
        loss_rows, zloss_rows, _ = cross_entropy_rows(x, t, grad_out=grad, denom=denom, token_weight=tw, **options)
        ctx.deferred = deferred
        ctx.options = options
        ctx.source = None
        if deferred:
            ctx.save_for_backward(x, t, tw)
        elif grad is not None and not inplace_backward and grad.element_size() < 4:
            # rescale_formed_grad: the caller's logits, if the caller still holds them then
            # (a weak reference: kept alive by nobody here), unchanged (their version)
            ctx.source = (weakref.ref(logits), logits._version, t, tw, denom)
        return finish_forward(ctx, loss_rows, zloss_rows, reduction, denom, grad, shape)

    @staticmethod
    def backward(ctx, grad_loss, _grad_zloss):
        if ctx.deferred:
            x, t, tw = ctx.saved_tensors
            up = grad_loss.reshape(-1).float()
            grad = torch.empty_like(x)  # the token weight scales a row's loss and gradient alike
            cross_entropy_rows(x, t, grad_out=grad, token_weight=up if tw is None else tw * up, **ctx.options)
        else:
            grad = take_formed_grad(ctx, "cross_entropy")
            if not rescale_formed_grad(ctx, grad, grad_loss):
                scale_rows_(grad, grad_loss)
        return grad.view(ctx.grad_shape), None, None, None, None, None, None, None, None, None, None


def rescale_formed_grad(ctx, grad: torch.Tensor, grad_loss: torch.Tensor) -> bool:
    """A 16-bit gradient formed in forward for an upstream of 1 and then scaled by another is
    rounded twice: one step of the dtype off on many elements (docs/bugs.md, bug 13). Where the
    caller's logits are still alive and unchanged, the rows whose upstream is not 1 are formed
    again from them with it, rounded once; rows whose upstream is 1 are left untouched (decided
    on the device: no host sync). False where the logits are gone or changed, or are not rows
    of unit column stride the kernel reads as they are (a copy would be a pass over [N, V] even
    when every upstream is 1): the caller scales."""
    if ctx.source is None:
        return False
    ref, version, t, tw, denom = ctx.source
    ctx.source = None
    logits = ref()
    if logits is None or logits._version != version:
        return False
    try:
        x = logits.view(-1, logits.shape[-1])
    except RuntimeError:  # not viewable as rows: reshape would copy
        return False
    if x.stride(-1) != 1:
        return False
    up = grad_loss.reshape(-1).float()
    up = up.expand(x.shape[0]) if up.numel() == 1 else up
    cross_entropy_rows(x, t, grad_out=grad, denom=denom, token_weight=up if tw is None else tw * up,
                       only_where_not_one=up, **ctx.options)  # fmt: skip
    return True


def reduce_loss_rows(loss_rows, zloss_rows, reduction: str, denom, shape):
    """Per-row float32 (loss, z-loss) reduced as asked: viewed in `shape` ("none"), summed, or
    summed over the mean's denominator `denom` (shared by every loss over classes)."""
    if reduction == "none":
        return loss_rows.view(shape), zloss_rows.view(shape)
    if reduction == "sum":
        return loss_rows.sum(), zloss_rows.sum()
    return loss_rows.sum() / denom, zloss_rows.sum() / denom


def finish_forward(ctx, loss_rows, zloss_rows, reduction: str, denom, grad, shape):
    """Reduce per-row (loss, z-loss) as asked and keep the gradient formed in forward for
    backward (shared by the losses that form their gradient in forward)."""
    loss, zloss = reduce_loss_rows(loss_rows, zloss_rows, reduction, denom, shape[:-1])
    ctx.mark_non_differentiable(zloss)
    ctx.grad = grad
    ctx.grad_shape = shape
    return loss, zloss


def take_formed_grad(ctx, name: str) -> torch.Tensor:
    """The gradient formed in forward, handed out once: backward scales it in place."""
    grad = ctx.grad
    if grad is None:
        raise RuntimeError(
            f"{name} backward ran twice on one forward: the gradient is formed in forward and "
            "scaled in place, so it can be used once (no retain_graph reuse)"
        )
    ctx.grad = None
    return grad


# the public signature: each op names its options itself, keyword for keyword where they mean the same
def cross_entropy(
    logits: torch.Tensor,
    target: torch.Tensor,
    *,
    weight: torch.Tensor | None = None,
    ignore_index: int = -100,
    reduction: Reduction = "mean",
    label_smoothing: float = 0.0,
    softcap: float | None = None,
    z_loss_scale: float = 0.0,
    token_weight: torch.Tensor | None = None,
    return_z_loss: bool = False,
    inplace_backward: bool = False,
    check_targets: CheckTargets = True,
):
    """Cross entropy of `logits` [N, V] or [B, T, V] against class ids `target` [N] or [B, T].

    Matches `torch.nn.functional.cross_entropy` where the options overlap (`weight`,
    `ignore_index`, `reduction`, `label_smoothing`), including NaN for a mean over no target.
    Extras, applied per token in this order:
      softcap       logits become softcap * tanh(logits / softcap) first;
      z_loss_scale  adds z_loss_scale * lse**2 to each counted token's loss;
      token_weight  [N] or [B, T] floats multiplying each token's loss (and gradient); they do
                    not enter the mean's denominator, which stays PyTorch's (the count of
                    counted targets, or the sum of their class weights).
    Returns the loss in float32 (shape of `target` for reduction='none', else a scalar); with
    `return_z_loss=True`, a pair (loss, z_loss), the z-loss part reduced the same way, for
    logging only (no gradient flows through it; the loss already includes it).
    inplace_backward=True writes the gradient into `logits` during forward (saves N*V memory;
    the logits are then destroyed). Otherwise `logits` is never modified.
    check_targets: targets outside [0, V) that are not ignore_index are errors, never silent
    numbers. True (default): checked on the device on a GPU -- a small kernel flags them, its
    printf naming row and value, and a device-side assertion (torch._assert_async, no host
    sync) fails the CUDA stream as PyTorch's own index checks do -- and on the host elsewhere
    (ValueError naming the value). "host": the host check on any device (ValueError;
    one host sync on a GPU). "device": the device check on any device (on CPU a RuntimeError).
    False: no check; such rows give NaN loss and gradient.
    The gradient is formed in forward, so one backward per forward. reduction="none" (not in
    place) forms it in backward instead, where each row's upstream is known; under a scalar
    upstream other than 1, sum and mean form a 16-bit gradient again from `logits` while the
    caller still holds them unchanged (rescale_formed_grad), so it is rounded once.
    """
    loss, zloss = CrossEntropyFunction.apply(
        logits, target, weight, token_weight, ignore_index, reduction, label_smoothing, softcap, z_loss_scale,
        inplace_backward, check_targets,
    )  # fmt: skip
    return (loss, zloss) if return_z_loss else loss


class CrossEntropyLoss(torch.nn.Module):
    """Module form of `cross_entropy`; the options are fixed at construction."""

    def __init__(
        self,
        weight: torch.Tensor | None = None,
        ignore_index: int = -100,
        reduction: Reduction = "mean",
        label_smoothing: float = 0.0,
        softcap: float | None = None,
        z_loss_scale: float = 0.0,
        return_z_loss: bool = False,
        inplace_backward: bool = False,
        check_targets: CheckTargets = True,
    ):
        super().__init__()
        self.register_buffer("weight", weight)
        self.ignore_index = ignore_index
        self.reduction = reduction
        self.label_smoothing = label_smoothing
        self.softcap = softcap
        self.z_loss_scale = z_loss_scale
        self.return_z_loss = return_z_loss
        self.inplace_backward = inplace_backward
        self.check_targets = check_targets

    # the options fixed at construction, by keyword: cross_entropy's own names
    def forward(self, logits, target, token_weight=None):
        return cross_entropy(
            logits,
            target,
            weight=self.weight,
            ignore_index=self.ignore_index,
            reduction=self.reduction,
            label_smoothing=self.label_smoothing,
            softcap=self.softcap,
            z_loss_scale=self.z_loss_scale,
            token_weight=token_weight,
            return_z_loss=self.return_z_loss,
            inplace_backward=self.inplace_backward,
            check_targets=self.check_targets,
        )
