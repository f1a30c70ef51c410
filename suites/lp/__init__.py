"""The `lp` kernel (per-token log-probs and entropy at a temperature, from logits) as ligerbench
checks it: spec, axes, grid, suites, providers and planted bugs, registered together.

    ligerbench verify --kernel lp --where temperature=0.6
"""

from __future__ import annotations

from ligerbench.registry import Registry, Suite
from ligerbench.rowwise import Rows, count_of, take_fields
from ligerbench.suites.common.registration import kernel_spec
from ligerbench.suites.common.same_row import others, past_int32_suite, same_row_suites
from ligerbench.suites.lp import axes, bench, mutants, providers, spec
from ligerbench.suites.lp.grid import last_rows_cases, lp_cases

# the kernel's own fields, spelled out as data; kernel_spec fills in what every kernel's spec.py names
# the same way (make_problem, reference, eager_in_dtype, textbook) and the numerical hints
KERNEL = kernel_spec(
    spec,
    rows=Rows(
        take=take_fields("logits", "target", "upstream"),
        count=count_of("target"),
        per_row=("logp", "entropy", "grad_logits"),
        promised=("logp", "entropy", "grad_logits"),
        shared=(),
        log_prob="logp",  # the RL ratio's, over the counted tokens
        counted=lambda p: p.target != p.options["ignore_index"],
    ),
    name="lp",
    description="per-token log-probs and entropy at a temperature, from logits [N, V]",
    run=spec.run_lp,
    quantities=("logp", "entropy", "outputs_float32", "grad_logits", "input_unchanged", "input_layout"),
    grid=lp_cases,
    axes=axes.AXES,
    signature="fn(logits, target, *, temperature, softcap, logit_scale, ignore_index) -> (logp, entropy)",
    bench=bench.SPEC,
)

# the cases past 2**31 elements whose last rows only the past_int32 suite checks (full preset, GPU)
LAST_ROWS = last_rows_cases("full", "cuda")

# the kernel's suites, spelled out as data: alike in shape across kernels, each its own quantities
SUITES = (
    Suite(name="correctness", kernel="lp", description="logp and entropy vs float64, and both float32",
          quantities=("logp", "entropy", "outputs_float32"), select=others(LAST_ROWS)),
    Suite(name="gradients", kernel="lp", description="gradient of the logits through the upstream on either or both",
          quantities=("grad_logits",), select=others(LAST_ROWS)),
    Suite(name="contracts", kernel="lp", description="the logits reach the provider as laid out, and are unchanged",
          quantities=("input_unchanged", "input_layout"), select=others(LAST_ROWS)),
)  # fmt: skip


# same-row cases (suites/common/same_row.py): one small, the same at full sizes
SAME_ROW_CASES = (
    "lp/n24/v1000/bf16/t1.0/cap0.0/s1.0/k1/up-both/random/normal",
    "lp/n2048/v151936/bf16/t1.0/cap0.0/s1.0/k1/up-both/random/normal",
)
SAME_ROW = same_row_suites("lp", SAME_ROW_CASES, SAME_ROW_CASES)


def register(registry: Registry) -> None:
    registry.add(
        KERNEL,
        *SUITES,
        *SAME_ROW,
        past_int32_suite("lp", LAST_ROWS),
        *providers.PROVIDERS,
        *bench.VARIANTS,
        *mutants.PROVIDERS,
    )
