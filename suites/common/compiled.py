"""torch.compile as a verify provider, honestly: past torch._dynamo's recompile limit (8 compiles
of one function by default) dynamo runs a call eagerly, and verify would record eager PyTorch's
result as torch.compile's. A quick grid varies shapes, dtypes and options, so the limit is met
within a few cases. Here that call raises NotRun instead: the case is a skip that says why.

Float arguments (a temperature, a softcap) are compiled in as constants (dynamo's
specialize_float), as a first compile does for a user's `torch.compile(fn)`. Left symbolic under
dynamic=True, each becomes a 0-d float64 CPU tensor that inductor converts in a C++ kernel, and
that one kernel sends every process through inductor's CPU toolchain checks: ~40 s of g++ test
builds a verify on an H100 (its cProfile and inductor's output code: kernels/NOTES.md,
"Compile time"). A new value is a recompile."""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch

from ligerbench.registry import NotRun


def compiled(fn: Callable, **options) -> Callable:
    """torch.compile(fn, **options), raising NotRun for a call dynamo would run eagerly because
    fn reached the recompile limit (torch._dynamo.config.recompile_limit)."""
    graph = torch.compile(fn, **options)

    @functools.wraps(fn)
    def call(*args, **kwargs):
        import torch._dynamo

        with torch._dynamo.config.patch(fail_on_recompile_limit_hit=True, specialize_float=True):
            try:
                return graph(*args, **kwargs)
            except torch._dynamo.exc.FailOnRecompileLimitHit as exc:
                limit = torch._dynamo.config.recompile_limit
                raise NotRun(f"torch.compile reached its recompile limit ({limit} compiles of {fn.__name__}): "
                             "dynamo would run this case eagerly") from exc  # fmt: skip

    return call


def compiled_on_gpu(fn: Callable, **options) -> Callable:
    """compiled(fn, **options) for a provider that runs on a GPU only: elsewhere ImportError (the
    provider's load fails, a skip that says why), since inductor's CPU path needs a C++ toolchain
    per shape."""
    if not torch.cuda.is_available():
        raise ImportError(
            "torch.compile's peer runs on a GPU here (inductor's CPU path needs a C++ toolchain per shape)"
        )
    return compiled(fn, **options)
