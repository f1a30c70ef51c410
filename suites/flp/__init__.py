"""The `flp` kernel (per-token log-probs and entropy from the lm_head, without the logits) as
ligerbench checks it: spec, axes, grid, suites, providers and planted bugs, registered together.

    ligerbench verify --kernel flp --where dtype=bf16
"""

from __future__ import annotations

from ligerbench.registry import Registry, Suite
from ligerbench.rowwise import Rows, count_of, take_fields
from ligerbench.suites.common.registration import kernel_spec
from ligerbench.suites.common.same_row import same_row_suites
from ligerbench.suites.flp import axes, bench, mutants, providers, spec
from ligerbench.suites.flp.grid import flp_cases

# the kernel's own fields, spelled out as data; kernel_spec fills in what every kernel's spec.py names
# the same way (make_problem, reference, eager_in_dtype, textbook) and the numerical hints
KERNEL = kernel_spec(
    spec,
    rows=Rows(
        take=take_fields("hidden", "target", "upstream"),
        count=count_of("target"),
        per_row=("logp", "entropy", "grad_hidden"),
        promised=(),
        shared=("grad_weight", "grad_bias"),
        log_prob="logp",  # the RL ratio's, over the counted tokens
        counted=lambda p: p.target != p.options["ignore_index"],
    ),
    name="flp",
    description="per-token log-probs and entropy at a temperature from hidden [N, H] and an lm_head [V, H]",
    run=spec.run_flp,
    quantities=("logp", "entropy", "outputs_float32", "grad_hidden", "grad_weight", "grad_bias", "input_unchanged",
                "input_layout"),
    grid=flp_cases,
    axes=axes.AXES,
    signature="fn(hidden, weight, target, *, bias, temperature, softcap, logit_scale, ignore_index) -> (logp, entropy)",
    bench=bench.SPEC,
    applies={"grad_bias": lambda case: bool(case.bias) or case.logits == "shifted"},
)  # fmt: skip

# the kernel's suites, spelled out as data: alike in shape across kernels, each its own quantities
SUITES = (
    Suite(name="correctness", kernel="flp", description="logp and entropy vs float64, and both float32",
          quantities=("logp", "entropy", "outputs_float32")),
    Suite(name="gradients", kernel="flp", description="gradients of hidden, weight and bias through either output",
          quantities=("grad_hidden", "grad_weight", "grad_bias")),
    Suite(name="contracts", kernel="flp", description="the inputs reach the provider as laid out, and are unchanged",
          quantities=("input_unchanged", "input_layout")),
)  # fmt: skip


# same-row cases (suites/common/same_row.py): one small, the same at full sizes
SAME_ROW_CASES = (
    "flp/n24/v500/h32/bf16/t1.0/cap0.0/s1.0/k1/up-both/random/normal",
    "flp/n513/v128256/h1024/bf16/t1.0/cap0.0/s1.0/k1/up-both/random/normal",
)
SAME_ROW = same_row_suites("flp", SAME_ROW_CASES, SAME_ROW_CASES)


def register(registry: Registry) -> None:
    registry.add(KERNEL, *SUITES, *SAME_ROW, *providers.PROVIDERS, *bench.VARIANTS, *mutants.PROVIDERS)
