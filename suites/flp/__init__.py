"""The `flp` kernel (per-token log-probs and entropy from the lm_head, without the logits) as
ligerbench checks it: spec, axes, grid, suites, providers and planted bugs, registered together.

    ligerbench verify --kernel flp --where dtype=bf16
"""

from __future__ import annotations

from ligerbench.registry import KernelSpec, Registry, Suite
from ligerbench.suites.common.hints import numerical_hints
from ligerbench.suites.flp import axes, bench, mutants, providers, spec
from ligerbench.suites.flp.grid import flp_cases

# spelled out as data, as every kernel's registration is: read, not assembled by a shared helper
KERNEL = KernelSpec(
    name="flp",
    description="per-token log-probs and entropy at a temperature from hidden [N, H] and an lm_head [V, H]",
    make_problem=spec.make_problem,
    reference=spec.reference,
    eager=spec.eager_in_dtype,
    hints=numerical_hints,
    textbook=spec.textbook,
    run=spec.run_flp,
    quantities=("logp", "entropy", "outputs_float32", "grad_hidden", "grad_weight", "grad_bias", "input_unchanged",
                "input_layout"),
    grid=flp_cases,
    axes=axes.AXES,
    signature="fn(hidden, weight, target, *, bias, temperature, softcap, logit_scale, ignore_index) -> (logp, entropy)",
    peer="eager",
    control="ours",
    bench=bench.SPEC,
    applies={"grad_bias": lambda case: bool(case.bias) or case.logits == "shifted"},
)  # fmt: skip

SUITES = (
    Suite(name="correctness", kernel="flp", description="logp and entropy vs float64, and both float32",
          quantities=("logp", "entropy", "outputs_float32")),
    Suite(name="gradients", kernel="flp", description="gradients of hidden, weight and bias through either output",
          quantities=("grad_hidden", "grad_weight", "grad_bias")),
    Suite(name="contracts", kernel="flp", description="the inputs reach the provider as laid out, and are unchanged",
          quantities=("input_unchanged", "input_layout")),
)  # fmt: skip


def register(registry: Registry) -> None:
    registry.add(KERNEL, *SUITES, *providers.PROVIDERS, *bench.VARIANTS, *mutants.PROVIDERS)
