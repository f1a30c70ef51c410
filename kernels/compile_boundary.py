"""Our fused ops as torch.compile sees them: opaque calls, run as they are, outside the graph (a
graph break). Dynamo cannot trace Triton's interpreter (CPU) nor the collectives of a simulated
group, and the ops' own launches are what we verified.

torch.compiler.disable makes the mark, but it imports torch._dynamo to do so: ~1 s, a third of
starting `ligerbench` (every verify, every rank of a distributed run), spent by callers that never
compile. `opaque` marks the op when it is first called, or at once if torch._dynamo is already
imported. Under torch.compile before any eager call, dynamo meets the unmarked wrapper, whose
first act is to make the mark (a call dynamo does not trace): the op still runs eagerly
(tests/test_compile_boundary.py)."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable

import torch


def opaque(fn: Callable) -> Callable:
    """fn as torch.compiler.disable(fn) runs it, without importing torch._dynamo before fn's first call."""
    if "torch._dynamo" in sys.modules:
        return torch.compiler.disable(fn)
    marked: list[Callable] = []

    @functools.wraps(fn)
    def call(*args, **kwargs):
        if not marked:
            marked.append(torch.compiler.disable(fn))
        return marked[0](*args, **kwargs)

    return call
