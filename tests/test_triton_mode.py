"""kernels/triton_mode.py under Triton's interpreter: `triton.language` is patched once a process,
not again by each launch or nested jit call (a quarter of a CPU verify's time, then ~2 ms a
launch), the numbers stay Triton's, and `tritons_own` releases the patch either way it swaps."""

from __future__ import annotations

import inspect

import pytest
import torch

from ligerbench.kernels import triton_math, triton_mode  # noqa: F401 (importing our kernels decides the mode)

pytestmark = pytest.mark.skipif(triton_mode.current() != "interpreter", reason="the interpreter's own behaviour")

import triton  # noqa: E402
import triton.language as tl  # noqa: E402


@triton.jit
def _row_sums(x_ptr, out_ptr, LOOPS: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    acc = 0.0
    for _ in range(LOOPS):  # each tl.sum / tl.max is a nested jit call of Triton's library
        x = tl.load(x_ptr + offs)
        acc += tl.sum(x, 0) + tl.max(x, 0)
    tl.store(out_ptr, acc)


def _launch(loops: int, monkeypatch) -> tuple[float, int]:
    walks = []
    real = inspect.getmembers
    monkeypatch.setattr(inspect, "getmembers", lambda *a, **k: walks.append(1) or real(*a, **k))
    x = torch.arange(8, dtype=torch.float32)
    out = torch.zeros(1)
    _row_sums[(1,)](x, out, LOOPS=loops, BLOCK=8)
    monkeypatch.setattr(inspect, "getmembers", real)
    return out.item(), len(walks)


def test_the_language_is_patched_once_a_process(monkeypatch):
    _launch(1, monkeypatch)  # patches what no launch before it did
    one, walks_one = _launch(1, monkeypatch)
    eight, walks_eight = _launch(8, monkeypatch)
    assert one == 28.0 + 7.0 and eight == 8 * one  # Triton's numbers
    # patched once a launch: 4 walks a launch; by each nested call too: 8 more per loop
    assert walks_one == 0 and walks_eight == 0
    assert not tl.core.is_builtin(tl.add)  # still patched between launches


def test_tritons_own_releases_the_kept_patch_and_ours_comes_back(monkeypatch):
    from ligerbench.kernels.interpreter_fast_paths import tritons_own

    _launch(1, monkeypatch)
    assert not tl.core.is_builtin(tl.add)
    with tritons_own():
        assert tl.core.is_builtin(tl.add) and tl.core.is_builtin(tl.load)  # Triton's own patch to come
        one, walks = _launch(1, monkeypatch)
        assert one == 28.0 + 7.0 and walks > 0  # patched anew, by Triton's own functions
    assert tl.core.is_builtin(tl.add)  # released again: the next launch patches with ours
    assert _launch(1, monkeypatch)[1] > 0 and _launch(1, monkeypatch)[1] == 0


def test_the_remembered_numpy_dtypes_are_tritons():
    """_cache_np_dtypes: every type's numpy dtype, scalar, block or pointer, as Triton's own
    function gives it, the second time too."""
    from triton.runtime import interpreter as it

    assert getattr(it._get_np_dtype, "_ligerbench", False)
    slow = it._get_np_dtype.__wrapped__
    scalars = [tl.int1, tl.int8, tl.uint8, tl.int16, tl.uint16, tl.int32, tl.uint32, tl.int64, tl.uint64,
               tl.float16, tl.bfloat16, tl.float32, tl.float64, tl.float8e5, tl.float8e4nv]  # fmt: skip
    types = [*scalars, *(tl.block_type(t, [4]) for t in scalars), tl.pointer_type(tl.float32),
             tl.block_type(tl.pointer_type(tl.bfloat16), [2, 8])]  # fmt: skip
    for _ in range(2):
        for t in types:
            assert it._get_np_dtype(t) == slow(t), t
