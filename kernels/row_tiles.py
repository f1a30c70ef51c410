"""How many rows one program of a row kernel takes (its ROWS, a constexpr), and the device
helpers that let one kernel body serve both forms:

- ROWS 0, on a GPU: one row a program, as the launch shapes in kernels/NOTES.md were measured.
  A row's values are scalars and its lanes a [BLOCK] vector: the code Triton compiles is that of a
  one-row kernel. (A [1, BLOCK] tile compiled slower on an H200: cross entropy's forward with
  its gradient 1.89 ms against 1.50 at N=8192, V=128256; the 2-byte chunk's rows kernel 34 ms
  against 0.58. The one-row form runs at the one-row kernels' speed, with their bits: probe
  `ab_gpu.py`, results/README.md#where-the-probes-went.)
- ROWS >= 1, under Triton's interpreter: a tile of rows `program_id * ROWS + arange(ROWS)`,
  a row's values a [ROWS, 1] column and its lanes a [1, BLOCK] row, each row reduced along its
  own axis only, so a row's numbers do not depend on ROWS or on its neighbours.
- Under the interpreter (CPU tensors) a program costs Python's front end per operation (type
  checks, broadcasting, a new tensor object around one numpy call), nearly the same for a tile
  of many rows as for one: our cross entropy's forward and backward cost about 4 ms a row at
  V = 256 and at V = 4096 alike, one row a program. Several rows a program pay it once for all.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from . import triton_math  # noqa: F401  (decides the Triton mode before anything below is decorated)
from .triton_mode import device_function

# Under the interpreter: at most this many rows a program, and tiles of at most this many
# elements (numpy's work, the same in total whatever ROWS, stays in cache-sized pieces).
_MAX_ROWS = 16
_MAX_TILE = 32768


def rows_per_program(n_rows: int, block_v: int, device: torch.device) -> int:
    """ROWS for `n_rows` rows of `block_v`-wide blocks on `device`: 0 (one row, scalars) on a GPU,
    else a power of 2."""
    if device.type == "cuda":
        return 0
    fit = max(1, _MAX_TILE // max(block_v, 1))
    return max(1, min(_MAX_ROWS, triton.next_power_of_2(max(n_rows, 1)), triton.next_power_of_2(fit + 1) // 2))


def programs(n_rows: int, rows: int) -> tuple[int]:
    """The grid of a row kernel: one program per `rows` rows (ROWS 0: one a row)."""
    return (triton.cdiv(n_rows, max(rows, 1)),)


@functools.cache
def _multiprocessors(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def multiprocessors(device: torch.device) -> int:
    """The multiprocessors of a GPU `device`."""
    return _multiprocessors(torch.cuda.current_device() if device.index is None else device.index)


def blocks_per_program(n_programs: int, n_blocks: int, wanted: int) -> int:
    """For a kernel whose every column is its own (a backward given the row's statistics): a
    row's `n_blocks` blocks a program, all of them, or fewer so that about `wanted` programs run
    where `n_programs` (one a row, or a tile's) are fewer. The grid's second axis is then
    cdiv(n_blocks, this)."""
    split = min(n_blocks, max(1, -(-wanted // max(n_programs, 1))))
    return -(-n_blocks // split)


@device_function
def tile_rows(pid, ROWS: tl.constexpr):
    """The rows of program `pid` (an int64 id): ROWS 0, the row pid; else a [ROWS, 1] column."""
    if ROWS == 0:
        return pid
    else:
        return (pid * ROWS + tl.arange(0, ROWS))[:, None]


@device_function
def clamp_rows(rows, N, ROWS: tl.constexpr):
    """The rows to read from: a tile's rows past N read the last row (their stores are masked off,
    so no load needs a row mask); one row a program is always < N."""
    if ROWS == 0:
        return rows
    else:
        return tl.minimum(rows, N - 1)


@device_function
def within(flag, mask, ROWS: tl.constexpr):
    """`mask` (a row's lanes) where the row's `flag` holds. One row a program (ROWS 0) is only
    ever in a branch taken on its flag, or the flag always holds (rows < N): `mask` as it is."""
    if ROWS == 0:
        return mask
    else:
        return tl.where(flag, mask, False)


@device_function
def store_rows(ptr, value, flag, ROWS: tl.constexpr):
    """Each row's `value` at `ptr` where the row's `flag` holds; one row a program (ROWS 0) only
    stores in a branch taken on its flag: unmasked, as a one-row kernel stores."""
    if ROWS == 0:
        tl.store(ptr, value)
    else:
        tl.store(ptr, value, mask=flag)


@device_function
def lanes(BLOCK: tl.constexpr, ROWS: tl.constexpr):
    """arange(BLOCK), a row's lanes: [BLOCK] (ROWS 0) or [1, BLOCK] (across a tile's rows)."""
    if ROWS == 0:
        return tl.arange(0, BLOCK)
    else:
        return tl.arange(0, BLOCK)[None, :]


@device_function
def lane_full(value, BLOCK: tl.constexpr, ROWS: tl.constexpr):
    """float32 `value` in every lane of each row: [BLOCK] or [ROWS, BLOCK]."""
    if ROWS == 0:
        return tl.full([BLOCK], value, tl.float32)
    else:
        return tl.full([ROWS, BLOCK], value, tl.float32)


@device_function
def row_max(x, ROWS: tl.constexpr):
    """Each row's max over its lanes: a scalar or a [ROWS, 1] column."""
    if ROWS == 0:
        return tl.max(x, 0)
    else:
        return tl.max(x, 1, keep_dims=True)


@device_function
def row_sum(x, ROWS: tl.constexpr):
    """Each row's sum over its lanes, as row_max."""
    if ROWS == 0:
        return tl.sum(x, 0)
    else:
        return tl.sum(x, 1, keep_dims=True)


@device_function
def all_zero(count, ROWS: tl.constexpr):
    """Whether `count` is 0 for every row of the program (a tile's rows past N count as the last)."""
    if ROWS == 0:
        return count == 0
    else:
        return tl.max(count) == 0


@device_function
def any_row(flag, ROWS: tl.constexpr):
    """Whether `flag` holds for some row of the program."""
    if ROWS == 0:
        return flag
    else:
        return tl.max(flag.to(tl.int32)) > 0
