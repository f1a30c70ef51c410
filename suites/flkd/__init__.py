"""The `flkd` kernel (distillation divergences from the student's and the teacher's lm_heads,
without the logits) as ligerbench checks it: spec, axes, grid, suites, providers and planted
bugs, registered together.

    ligerbench verify --kernel flkd --divergence jsd
"""

from __future__ import annotations

from ligerbench.registry import Registry, Suite
from ligerbench.suites.common.registration import kernel_spec
from ligerbench.suites.common.same_row import same_row_suites
from ligerbench.suites.flkd import axes, bench, mutants, providers, spec
from ligerbench.suites.flkd.grid import flkd_cases

# the kernel's own fields, spelled out as data; kernel_spec fills in what every kernel's spec.py names
# the same way (make_problem, reference, eager_in_dtype, textbook) and the numerical hints
KERNEL = kernel_spec(
    spec,
    name="flkd",
    description="distillation divergence per token from student hidden + lm_head and teacher hidden + lm_head",
    run=spec.run_flkd,
    quantities=("loss", "grad_student_hidden", "grad_student_weight", "teacher_no_grad", "input_unchanged",
                "input_layout"),
    grid=flkd_cases,
    axes=axes.AXES,
    signature="fn(student_hidden, student_weight, teacher_hidden, teacher_weight, *, labels, divergence, beta, "
    "temperature, ignore_index, reduction) -> loss",
    bench=bench.SPEC,
)  # fmt: skip

# the kernel's suites, spelled out as data: alike in shape across kernels, each its own quantities
SUITES = (
    Suite(name="correctness", kernel="flkd", description="the loss vs float64", quantities=("loss",)),
    Suite(name="gradients", kernel="flkd", description="gradients of the student's hidden and weight",
          quantities=("grad_student_hidden", "grad_student_weight")),
    Suite(name="contracts", kernel="flkd", description="inputs as laid out and unchanged; no gradient to the teacher",
          quantities=("teacher_no_grad", "input_unchanged", "input_layout")),
)  # fmt: skip


# same-row cases (suites/common/same_row.py): one small, the same at full sizes
SAME_ROW_CASES = (
    "flkd/n12/v500/h32/bf16/forward_kl/t2.0/mean/up-ones/random/normal",
    "flkd/n2048/v128256/h1024/bf16/forward_kl/t2.0/mean/up-ones/random/normal",
)
SAME_ROW = same_row_suites("flkd", SAME_ROW_CASES)


def register(registry: Registry) -> None:
    registry.add(KERNEL, *SUITES, *SAME_ROW, *providers.PROVIDERS, *bench.VARIANTS, *mutants.PROVIDERS)
