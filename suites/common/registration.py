"""A kernel's `KernelSpec` from its `spec.py`: the semantics every kernel's spec module names the
same way (`make_problem`, the float64 `reference`, the careful yardstick `eager_in_dtype` and,
where the module has one, the `textbook` form), the known numerical hints of every failure
(`hints.numerical_hints`) and the provider call `run` the kernel names, filled in here once.
What is the kernel's own (its name, quantities, grid, axes, signature, bench, ...) is passed
through as data, read in the kernel's `__init__.py`.

    KERNEL = kernel_spec(spec, run=spec.run_lp, name="lp", description=..., quantities=..., ...)

KernelSpec itself is unchanged: third-party kernels (tests/kl_plugin.py) build it directly.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

from ligerbench.registry import KernelSpec
from ligerbench.suites.common.hints import numerical_hints


def kernel_spec(spec: ModuleType, *, run: Callable[[Callable, Any], Any], **fields: Any) -> KernelSpec:
    """The KernelSpec of the kernel whose semantics `spec` (its spec.py) holds, called through
    `run`, with the kernel's own `fields`."""
    return KernelSpec(
        make_problem=spec.make_problem,
        reference=spec.reference,
        eager=spec.eager_in_dtype,
        textbook=getattr(spec, "textbook", None),
        hints=numerical_hints,
        run=run,
        **fields,
    )
