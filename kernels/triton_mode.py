"""Which Triton mode this process runs our kernels in: compiled (GPU) or interpreted (CPU).

The one place that decides it. Triton reads the choice when `triton.jit` decorates a function,
so it must be made before our kernel modules are imported; they call `decide()` first thing,
and a harness that wants the other mode (CPU runs on a GPU machine) calls `decide(interpret=...)`
before it imports them.

Triton's own standard library (`tl.max`, `tl.sum`, `tl.cdiv`, the random functions) is decorated
when `triton.language` is first imported. If someone imported Triton before us with no mode set
(`import transformers` does), that library is compiled-mode code, and an interpreted kernel that
calls `tl.max` fails with "Cannot call @triton.jit'd outside of the scope of a kernel". On a
machine without CUDA compiled mode cannot run at all, so there we re-decorate those two library
modules in interpreted mode (`_redecorate_stdlib`).

Under the interpreter, every call of a nested jit function (ours, and the library's `tl.sum`,
`tl.max`, `tl.cdiv`) re-patches `triton.language` from scratch: four `inspect.getmembers` walks,
about a quarter of a CPU `verify` (cProfile of `ce`'s quick grid: 24,147 calls, 35 of 135 s).
Within one launch a second patch of the same modules changes nothing (a patched member is no
longer a builtin, so it is skipped), so `_skip_repeated_patches` makes it a no-op while a launch
is running and the modules the function sees were patched already in it. It wraps two private
names of Triton's interpreter and does nothing if they are not there (any other release: the
slow path, the same numbers). `_cache_np_dtypes` remembers the interpreter's numpy dtype of
each Triton type, which it rebuilt a table to look up on every operation. Nothing else of Triton's
is touched.
"""

from __future__ import annotations

import functools
import importlib
import os
import sys

import torch

from . import interpreter_fast_paths

_STDLIB = ("triton.language.standard", "triton.language.random")
_locked: str | None = None  # the mode our kernels were decorated in, once they were


def current() -> str:
    return "interpreter" if os.environ.get("TRITON_INTERPRET", "0") == "1" else "compiled"


def decide(interpret: bool | None = None, *, lock: bool = False) -> str:
    """Choose the mode (default: the interpreter exactly when torch sees no CUDA device, unless
    TRITON_INTERPRET is already set); returns 'interpreter' or 'compiled'. `lock=True` is for
    the kernel modules: after they are decorated, asking for the other mode is an error."""
    global _locked
    if interpret is None:
        interpret = current() == "interpreter" if "TRITON_INTERPRET" in os.environ else not torch.cuda.is_available()
    want = "interpreter" if interpret else "compiled"
    if _locked is not None and _locked != want:
        raise RuntimeError(
            f"our Triton kernels were already set up {_locked} in this process; run CPU and GPU "
            "work in separate processes"
        )
    os.environ["TRITON_INTERPRET"] = "1" if interpret else "0"
    if interpret:
        _redecorate_stdlib()
        _skip_repeated_patches()
        _cache_np_dtypes()
        interpreter_fast_paths.install()
    if lock:
        _locked = want
    return want


def _redecorate_stdlib() -> None:
    """Re-run Triton's library modules that hold `@jit` functions if they were decorated in
    compiled mode, and point `triton.language`'s names at the new functions."""
    if "triton.language" not in sys.modules:
        return  # not imported yet: it will be decorated in the mode now set
    import triton.language as tl
    from triton.runtime.jit import JITFunction

    for name in _STDLIB:
        module = sys.modules.get(name)
        if module is None:
            continue
        stale = {k: v for k, v in vars(module).items() if isinstance(v, JITFunction)}
        if not stale:
            continue  # already interpreted
        importlib.reload(module)
        for attr, value in list(vars(tl).items()):
            for k, old in stale.items():
                if value is old:
                    setattr(tl, attr, getattr(module, k))


def _cache_np_dtypes() -> None:
    """Remember the interpreter's numpy dtype of each Triton type. `_get_np_dtype` builds a
    21-entry dict (21 dtype hashes) on each of its calls, several per interpreted operation:
    6-10% of the CPU time of a fused linear cross entropy's forward and backward through the
    interpreter. The answer depends only on the type, compared as Triton compares types (by
    name; a block by element type and shape), so the first answer for a type is every later one;
    a type that cannot be a dict key goes to Triton's function. Idempotent; a no-op on a Triton
    without that private name."""
    try:
        from triton.runtime import interpreter as it
    except ImportError:
        return
    slow = getattr(it, "_get_np_dtype", None)
    if slow is None or getattr(slow, "_ligerbench", False):
        return
    known: dict = {}

    @functools.wraps(slow)
    def np_dtype(tt_dtype):
        try:
            return known[tt_dtype]
        except KeyError:
            found = known[tt_dtype] = slow(tt_dtype)
            return found
        except TypeError:  # unhashable
            return slow(tt_dtype)

    np_dtype._ligerbench = True
    it._get_np_dtype = np_dtype


def _skip_repeated_patches() -> None:
    """Make a nested jit call's re-patch of `triton.language` a no-op inside a launch that has
    patched the same modules (module docstring). Idempotent; a no-op on a Triton without the
    two names."""
    try:
        from triton.runtime import interpreter as it
    except ImportError:
        return
    patch, executor = getattr(it, "_patch_lang", None), getattr(it, "GridExecutor", None)
    if patch is None or executor is None or getattr(patch, "_ligerbench", False):
        return
    launch = executor.__call__
    patched: list[set[int]] = []  # one set per running launch: ids of the modules patched in it

    def langs_of(fn) -> set[int]:
        tl = it.tl
        return {id(v) for v in fn.__globals__.values() if v is tl or v is tl.core}

    def patch_once(fn):
        if patched and langs_of(fn) <= patched[-1]:
            return it._LangPatchScope()  # nothing to patch, nothing to restore
        scope = patch(fn)
        if patched:
            patched[-1] |= langs_of(fn)
        return scope

    @functools.wraps(launch)
    def run_launch(self, *args, **kwargs):
        patched.append(set())
        try:
            return launch(self, *args, **kwargs)
        finally:
            patched.pop()

    patch_once._ligerbench = True
    it._patch_lang = patch_once
    executor.__call__ = run_launch


def device_function(fn):
    """`@triton.jit` for a function our kernels call from inside a kernel (never launched).

    Compiled mode: exactly `triton.jit(fn)`. Under Triton's interpreter every call of a nested
    jit function re-patches the whole of `triton.language` (an `inspect.getmembers` over four
    modules, about 0.5 ms a call); with helpers called per block and per row this was ~60% of a
    CPU `verify` of `ce` (cProfile, Triton 3.9: 198,203 calls). The launch of the enclosing kernel
    has patched the language already and undoes it when the launch ends, so the call goes straight
    to the interpreter's rewritten body of `fn` (the same code `triton.jit` would run). Decide the
    mode (`decide`) before decorating."""
    import triton

    jitted = triton.jit(fn)
    rewrite = getattr(jitted, "rewrite", None)
    if current() != "interpreter" or rewrite is None:
        return jitted

    @functools.wraps(fn)
    def call(*args, **kwargs):
        return rewrite()(*args, **kwargs)

    return call
