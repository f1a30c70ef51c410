"""The `flkd` kernel (distillation divergences from the student's and the teacher's lm_heads,
without the logits) as ligerbench checks it: spec, axes, grid, suites, providers and planted
bugs, registered together.

    ligerbench verify --kernel flkd --divergence jsd
"""

from __future__ import annotations

from ligerbench.registry import KernelSpec, Registry, Suite
from ligerbench.suites.common.hints import numerical_hints
from ligerbench.suites.flkd import axes, bench, mutants, providers, spec
from ligerbench.suites.flkd.grid import flkd_cases

# spelled out as data, as every kernel's registration is: read, not assembled by a shared helper
KERNEL = KernelSpec(
    name="flkd",
    description="distillation divergence per token from student hidden + lm_head and teacher hidden + lm_head",
    make_problem=spec.make_problem,
    reference=spec.reference,
    eager=spec.eager_in_dtype,
    hints=numerical_hints,
    textbook=spec.textbook,
    run=spec.run_flkd,
    quantities=("loss", "grad_student_hidden", "grad_student_weight", "teacher_no_grad", "input_unchanged",
                "input_layout"),
    grid=flkd_cases,
    axes=axes.AXES,
    signature="fn(student_hidden, student_weight, teacher_hidden, teacher_weight, *, labels, divergence, beta, "
    "temperature, ignore_index, reduction) -> loss",
    peer="eager",
    control="ours",
    bench=bench.SPEC,
)  # fmt: skip

SUITES = (
    Suite(name="correctness", kernel="flkd", description="the loss vs float64", quantities=("loss",)),
    Suite(name="gradients", kernel="flkd", description="gradients of the student's hidden and weight",
          quantities=("grad_student_hidden", "grad_student_weight")),
    Suite(name="contracts", kernel="flkd", description="inputs as laid out and unchanged; no gradient to the teacher",
          quantities=("teacher_no_grad", "input_unchanged", "input_layout")),
)  # fmt: skip


def register(registry: Registry) -> None:
    registry.add(KERNEL, *SUITES, *providers.PROVIDERS, *bench.VARIANTS, *mutants.PROVIDERS)
