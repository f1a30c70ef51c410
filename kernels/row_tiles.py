"""How many rows one program of a row kernel takes (its ROWS, a constexpr): one on a GPU, several
under Triton's interpreter.

A row kernel works on a [ROWS, BLOCK_V] tile: rows `program_id * ROWS + arange(ROWS)`, each
reduced along its own axis 1 only, so a row's numbers do not depend on ROWS or on its neighbours.
- On a GPU each row fills a program (the launch shapes in kernels/NOTES.md were measured one
  row a program), so ROWS is 1 and the tile is [1, BLOCK_V].
- Under the interpreter (CPU tensors) a program costs Python's front end per operation (type
  checks, broadcasting, a new tensor object around one numpy call), nearly the same for a tile
  of many rows as for one: our cross entropy's forward and backward cost about 4 ms a row at
  V = 256 and at V = 4096 alike, one row a program. Several rows a program pay it once for all.
"""

from __future__ import annotations

import torch
import triton

# Under the interpreter: at most this many rows a program, and tiles of at most this many
# elements (numpy's work, the same in total whatever ROWS, stays in cache-sized pieces).
_MAX_ROWS = 16
_MAX_TILE = 32768


def rows_per_program(n_rows: int, block_v: int, device: torch.device) -> int:
    """ROWS for `n_rows` rows of `block_v`-wide blocks on `device` (a power of 2)."""
    if device.type == "cuda":
        return 1
    fit = max(1, _MAX_TILE // max(block_v, 1))
    return max(1, min(_MAX_ROWS, triton.next_power_of_2(max(n_rows, 1)), triton.next_power_of_2(fit + 1) // 2))


def programs(n_rows: int, rows: int) -> tuple[int]:
    """The grid of a row kernel: one program per `rows` rows."""
    return (triton.cdiv(n_rows, rows),)
