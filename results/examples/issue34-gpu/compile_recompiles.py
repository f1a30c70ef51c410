"""How often the torch_compile provider of each kernel compiles over the quick grid, counted on
CPU (issue 34, "quick on a GPU is quick"): the provider's function under torch.compile with its
own `dynamic` setting and backend="eager" (dynamo's guards and recompiles are the backend's
business only after tracing, so the count is the GPU's; each compile there is an inductor
compile, seconds cold). Past torch._dynamo.config.recompile_limit (8) compiles of one frame,
dynamo runs the rest of the grid's cases eagerly: they are no longer torch.compile's at all.

    python3 results/examples/issue34-gpu/compile_recompiles.py ce flce lp flp
"""

from __future__ import annotations

import sys
import time

import torch
import torch._dynamo
from torch._dynamo.utils import counters

from ligerbench.builtin import default_registry
from ligerbench.suites.ce.providers import ce_torch
from ligerbench.suites.flce.providers import flce_torch
from ligerbench.suites.flp.providers import eager_fp32 as flp_eager_fp32
from ligerbench.suites.lp.providers import eager_fp32 as lp_eager_fp32

# kernel -> (the function its torch_compile provider compiles, its `dynamic`), as suites/*/providers.py
COMPILED = {"ce": (ce_torch, False), "flce": (flce_torch, False), "lp": (lp_eager_fp32, True),
            "flp": (flp_eager_fp32, True)}  # fmt: skip


def count(kernel: str, dynamic: bool | None) -> tuple[int, int, int, float]:
    """(cases, graphs compiled, cases that raised, seconds) over the quick grid on CPU."""
    fn, _ = COMPILED[kernel]
    spec = default_registry().kernels[kernel]
    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(fn, dynamic=dynamic, backend="eager")
    cases, raised = spec.grid("quick", "cpu"), 0
    t0 = time.perf_counter()
    for case in cases:
        try:
            spec.run(compiled, spec.make_problem(case, 0, torch.device("cpu")))
        except Exception:  # noqa: BLE001 -- counted, as verify would record an error row
            raised += 1
    return len(cases), counters["stats"]["unique_graphs"], raised, time.perf_counter() - t0


def main(kernels: list[str]) -> None:
    print(f"{'kernel':6} {'dynamic':14} {'cases':>5} {'graphs':>6} {'raised':>6}  seconds (CPU, backend eager)")
    for kernel in kernels:
        setting = COMPILED[kernel][1]
        for dynamic in dict.fromkeys((setting, None)):  # the provider's setting, then torch's default
            n, graphs, raised, took = count(kernel, dynamic)
            label = f"{dynamic}" + (" (provider)" if dynamic == setting else "")
            print(f"{kernel:6} {label:14} {n:5d} {graphs:6d} {raised:6d}  {took:.0f}")
            sys.stdout.flush()


if __name__ == "__main__":
    main(sys.argv[1:] or list(COMPILED))
