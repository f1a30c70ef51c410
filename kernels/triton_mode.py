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

Under the interpreter, every launch patches `triton.language` for the interpreter from scratch
and undoes it at its end, and every call of a nested jit function (ours, and the library's
`tl.sum`, `tl.max`, `tl.cdiv`) patches it again: four `inspect.getmembers` walks, about a quarter
of a CPU `verify` (cProfile of `ce`'s quick grid: 24,147 calls, 35 of 135 s). A second patch of
the same modules changes nothing (a patched member is no longer a builtin, so it is skipped), and
a process whose kernels run interpreted runs no other Triton (`decide` locks the mode; Triton's
own nested calls never undo their patch either), so `_patch_language_once` patches each module
once a process and keeps it patched: about 2 ms a launch (a ce forward and backward of 16 x 256,
10.0 -> 6.3 ms, 2026-11-29). `interpreter_fast_paths.tritons_own` undoes it when it swaps
functions, so the next launch patches with the functions then in place. It wraps one private
name of Triton's interpreter and does nothing if it is not there (any other release: the slow
path, the same numbers). `_cache_np_dtypes` remembers the interpreter's numpy dtype of
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
        _patch_language_once()
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


def _patch_language_once() -> None:
    """Patch `triton.language` for the interpreter once a process, not once a launch (module
    docstring); `interpreter_fast_paths.tritons_own` releases it. Idempotent; a no-op on a Triton
    without the names."""
    try:
        from triton.runtime import interpreter as it
    except ImportError:
        return
    patch, scope_type = getattr(it, "_patch_lang", None), getattr(it, "_LangPatchScope", None)
    if patch is None or scope_type is None or getattr(patch, "_ligerbench", False):
        return
    held: set[int] = set()  # ids of the language modules patched and kept so
    kept: list = []  # their patches' scopes, undone by release()

    def langs_of(fn) -> set[int]:
        tl = it.tl
        return {id(v) for v in fn.__globals__.values() if v is tl or v is tl.core}

    def patch_once(fn):
        langs = langs_of(fn)
        if not langs <= held:
            kept.append(patch(fn))
            held.update(langs)
        return scope_type()  # what the launch undoes at its end: nothing

    def release() -> None:
        while kept:
            kept.pop().restore()
        held.clear()

    patch_once._ligerbench = True
    it._patch_lang = patch_once
    interpreter_fast_paths.ON_SWAP.append(release)


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
