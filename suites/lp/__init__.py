"""The `lp` kernel (per-token log-probs and entropy at a temperature, from logits) as ligerbench
checks it: spec, axes, grid, suites, providers and planted bugs, registered together.

    ligerbench verify --kernel lp --where temperature=0.6
"""

from __future__ import annotations

from ligerbench.registry import Registry, Suite
from ligerbench.suites.common.registration import kernel_spec
from ligerbench.suites.lp import axes, bench, mutants, providers, spec
from ligerbench.suites.lp.grid import lp_cases

# the kernel's own fields, spelled out as data; kernel_spec fills in what every kernel's spec.py names
# the same way (make_problem, reference, eager_in_dtype, textbook) and the numerical hints
KERNEL = kernel_spec(
    spec,
    name="lp",
    description="per-token log-probs and entropy at a temperature, from logits [N, V]",
    run=spec.run_lp,
    quantities=("logp", "entropy", "outputs_float32", "grad_logits", "input_unchanged", "input_layout"),
    grid=lp_cases,
    axes=axes.AXES,
    signature="fn(logits, target, *, temperature, softcap, logit_scale, ignore_index) -> (logp, entropy)",
    bench=bench.SPEC,
)

# the kernel's suites, spelled out as data: alike in shape across kernels, each its own quantities
SUITES = (
    Suite(name="correctness", kernel="lp", description="logp and entropy vs float64, and both float32",
          quantities=("logp", "entropy", "outputs_float32")),
    Suite(name="gradients", kernel="lp", description="gradient of the logits through the upstream on either or both",
          quantities=("grad_logits",)),
    Suite(name="contracts", kernel="lp", description="the logits reach the provider as laid out, and are unchanged",
          quantities=("input_unchanged", "input_layout")),
)  # fmt: skip


def register(registry: Registry) -> None:
    registry.add(KERNEL, *SUITES, *providers.PROVIDERS, *bench.VARIANTS, *mutants.PROVIDERS)
