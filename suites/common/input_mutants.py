"""Planted bugs in how a kernel takes its inputs: layouts and upstream gradients (both kernels).

Each is visible on one value of a case axis (the layouts of suites/<kernel>/axes.py, cases.UPSTREAMS)
and on no other, so the kill matrix shows that value's cases are in the grid and checked. They
wrap our kernels, so everything else about them is right.
"""

from __future__ import annotations

import torch

from ligerbench.suites.common.rounding import backward_through


def dense_strides(shape) -> tuple[int, ...]:
    strides, acc = [], 1
    for d in reversed(shape):
        strides.append(acc)
        acc *= d
    return tuple(reversed(strides))


def assume_dense(t: torch.Tensor) -> torch.Tensor:
    """t read as if it were contiguous from its storage offset: what a kernel that takes a data
    pointer and the shape, but not the strides, reads (padding columns, the wrong rows)."""
    return torch.as_strided(t, t.shape, dense_strides(t.shape), t.storage_offset())


def assume_unit_column_stride(t: torch.Tensor) -> torch.Tensor:
    """[N, V] read with its row stride but a column stride of 1 (a kernel passed stride(0) only)."""
    return torch.as_strided(t, t.shape, (t.stride(0), 1), t.storage_offset())


def targets_transposed(target: torch.Tensor) -> torch.Tensor:
    """[B, T] class ids flattened column-major: row i of the flattened input gets another token's id."""
    return target.t().reshape(target.shape) if target.dim() == 2 else target


def with_upstream(loss: torch.Tensor, wrong) -> torch.Tensor:
    """`loss`, whose backward hands `wrong(grad)` on instead of the upstream gradient."""
    return backward_through(loss, wrong)


def upstream_read_dense(grad: torch.Tensor) -> torch.Tensor:
    """The per-row upstream read as a dense vector (row i at offset i): right for a materialised
    upstream; for the stride-0 one of loss.sum().backward() every row past the first reads past
    its one element of storage (here zeros, what our ce kernel read on an H100: docs/bugs.md, bug 8)."""
    if grad.dim() == 0 or grad.numel() < 2 or any(s != 0 for s in grad.stride()):
        return grad
    dense = torch.zeros(grad.shape, dtype=grad.dtype, device=grad.device)
    dense.view(-1)[0] = grad.reshape(-1)[0]
    return dense


def zero_rows_unscaled(grad: torch.Tensor) -> torch.Tensor:
    """Rows whose upstream is exactly 0 keep the gradient of an upstream of 1 (a 'skip rows
    whose factor is 0 or 1' fast path that skips the store)."""
    return torch.where(grad == 0, torch.ones_like(grad), grad)


def upstream_ignored(grad: torch.Tensor) -> torch.Tensor:
    """The scalar upstream taken as 1 (backward written for loss.backward() only)."""
    return torch.ones_like(grad)


def upstream_through_fp16(grad: torch.Tensor) -> torch.Tensor:
    """The upstream kept in a float16 scale buffer: 65536 (GradScaler's scale) becomes inf."""
    return grad.half().to(grad.dtype)


def unit_sum_as_mean(n_rows: int):
    """A fast path for an upstream of exactly 1 shared with mean: sum's gradient divided by N."""
    return lambda grad: torch.where(grad == 1, grad / n_rows, grad)


def zero_rows_compacted(grad: torch.Tensor) -> torch.Tensor:
    """Rows with an exact-zero upstream dropped by compaction and the live rows' upstream packed
    to the front, never scattered back: every live row after the first zero gets another's value."""
    flat = grad.reshape(-1)
    live = flat[flat != 0]
    packed = torch.zeros_like(flat)
    packed[: live.numel()] = live
    return packed.reshape(grad.shape)
