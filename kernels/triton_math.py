"""Small Triton helpers shared by our kernels: accurate softcap, and stores that round
correctly under Triton's interpreter. Only `triton.language` that Triton 3.6 (the GPU box) and
newer releases (CPU machines) both have."""

from .triton_mode import decide, device_function

_MODE = decide(lock=True)  # before triton.jit decorates anything below

import triton.language as tl  # noqa: E402
from triton.language.extra import libdevice  # noqa: E402

# Compiled, the softcap's tanh is CUDA's own (libdevice, within 2 ulps). Our formula below is
# built on the compiled tl.exp / tl.log, approximations: its few ulps more, times cap / T (50 at
# a softcap of 30 over a temperature of 0.6) in every logit, put our entropy at 2.2x careful
# PyTorch's error on an H200 (docs/bugs.md, bug 11). Triton's interpreter has no libdevice; there
# numpy's exp and log make the formula accurate.
_LIBDEVICE_TANH: tl.constexpr = tl.constexpr(_MODE == "compiled")


@device_function
def expm1(x):
    # Kahan's expm1 from exp and log: exact to a few ulps near 0, where exp(x) - 1 alone loses
    # every digit. (Neither Triton release we support has an expm1 we can rely on.)
    e = tl.exp(x)
    return tl.where(e == 1.0, x, (e - 1.0) * x / tl.log(e))


@device_function
def log1p(u):
    # Goldberg's log1p from log: log(w) * u / (w - 1) with w = 1 + u rounded, accurate to a few
    # ulps for u >= 0 where log(1 + u) alone keeps only the digits of u above 1's ulp.
    w = 1.0 + u
    return tl.where(w == 1.0, u, tl.log(w) * (u / (w - 1.0)))


@device_function
def target_nll(m, s_o, x_y, log_s):
    """lse - x_y of one row from its statistics: max m, sum s_o of exp(x_j - m) over the other
    classes, the target's logit x_y, and log_s = log(s_o + exp(x_y - m)).

    (m - x_y) + log_s rounds log_s to 1's ulp (6e-8) when the target holds nearly all the mass
    (a confident row: the loss is ~1 - p_y, as small as 1e-6), a relative error of up to 6%.
    log1p(s_o * exp(m - x_y)) is the same quantity with no cancellation; past a gap of 30 the
    loss is over 30 and the plain form is exact to its rounding (and exp cannot overflow)."""
    gap = m - x_y
    return tl.where(gap < 30.0, log1p(s_o * tl.exp(tl.minimum(gap, 30.0))), gap + log_s)


@device_function
def softcap_and_slope(x, cap):
    """cap * tanh(x / cap) and its derivative 1 - tanh^2, both to a few ulps.

    tl.math.tanh exists in neither Triton release we support (3.6 on the GPU box, newer on
    CPU): compiled, libdevice's tanh (above); interpreted, tanh(a) = expm1(2a) / (expm1(2a) + 2)
    for a = |u|, which has no cancellation (past a = 10 tanh is 1 in float32). The derivative is
    sech^2 = 4e / (1 + e)^2 with e = exp(-2|u|), which never overflows and, unlike 1 - tanh^2,
    keeps its digits when |tanh| -> 1."""
    u = x / cap
    if _LIBDEVICE_TANH:
        t = libdevice.tanh(u)
    else:
        a = tl.minimum(tl.abs(u), 10.0)
        em = expm1(2.0 * a)
        t = em / (em + 2.0)
        t = tl.where(u < 0, -t, t)
    e = tl.exp(-2.0 * tl.abs(u))
    return cap * t, 4.0 * e / ((1.0 + e) * (1.0 + e))


@device_function
def to_store(x, dtype: tl.constexpr, ROUND_BY_HAND: tl.constexpr):
    # Triton's interpreter truncates float32 -> bfloat16 (its cast ignores the rounding mode),
    # doubling the error of every bf16 gradient on CPU; compiled Triton rounds to nearest even.
    # So under the interpreter we round to nearest even on the bits ourselves (NaN kept as is).
    if ROUND_BY_HAND and dtype == tl.bfloat16:
        bits = x.to(tl.uint32, bitcast=True)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
        x = tl.where(x != x, x, bits.to(tl.float32, bitcast=True))
    return x.to(dtype)


@device_function
def load_block(row_ptr, cols, V, POLICY: tl.constexpr):
    # Blocks past either end of the row (the prefetch after the last block) load nothing.
    return tl.load(row_ptr + cols, mask=(cols >= 0) & (cols < V), other=float("-inf"), eviction_policy=POLICY)


@device_function
def cap_block(x_raw, in_row, cap, SOFTCAP: tl.constexpr):
    x = x_raw.to(tl.float32)
    dx = tl.full([1], 1.0, tl.float32)  # d capped / d x
    if SOFTCAP:
        capped, dx = softcap_and_slope(x, cap)
        x = tl.where(in_row, capped, float("-inf"))
    return x, dx
