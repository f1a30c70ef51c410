"""The `kd` kernel (distillation divergences between a student's and a teacher's logits) as
ligerbench checks it: spec, axes, grid, suites, providers and planted bugs, registered together.

    ligerbench verify --kernel kd --divergence jsd --teacher top8
"""

from __future__ import annotations

from ligerbench.registry import Registry, Suite
from ligerbench.rowwise import Rows, count_of, take_fields
from ligerbench.suites.common.registration import kernel_spec
from ligerbench.suites.common.same_row import same_row_suites
from ligerbench.suites.kd import axes, bench, mutants, providers, spec
from ligerbench.suites.kd.grid import kd_cases

# the kernel's own fields, spelled out as data; kernel_spec fills in what every kernel's spec.py names
# the same way (make_problem, reference, eager_in_dtype, textbook) and the numerical hints
KERNEL = kernel_spec(
    spec,
    rows=Rows(
        take=take_fields("student", "teacher", "teacher_ids", "labels", "upstream"),
        count=count_of("labels"),
        per_row=("loss", "grad_student", "grad_teacher"),
        promised=("loss", "grad_student", "grad_teacher"),
        shared=(),
    ),
    name="kd",
    description="distillation divergence (forward/reverse KL, JSD, TVD) per token from student and teacher logits",
    run=spec.run_kd,
    quantities=("loss", "grad_student", "grad_teacher", "teacher_no_grad", "input_unchanged", "input_layout"),
    grid=kd_cases,
    axes=axes.AXES,
    signature="fn(student, teacher, *, labels, teacher_ids, divergence, beta, temperature, ignore_index, reduction, "
    "teacher_grad) -> loss",
    bench=bench.SPEC,
    applies={"grad_teacher": lambda case: case.teacher_grad, "teacher_no_grad": lambda case: not case.teacher_grad},
)

# the kernel's suites, spelled out as data: alike in shape across kernels, each its own quantities
SUITES = (
    Suite(name="correctness", kernel="kd", description="the loss vs float64", quantities=("loss",)),
    Suite(name="gradients", kernel="kd", description="the student's gradient, and the teacher's when asked",
          quantities=("grad_student", "grad_teacher")),
    Suite(name="contracts", kernel="kd", description="inputs as laid out, unchanged; no gradient to a frozen teacher",
          quantities=("teacher_no_grad", "input_unchanged", "input_layout")),
)  # fmt: skip


# same-row cases (suites/common/same_row.py): one small, the same at full sizes
SAME_ROW_CASES = (
    "kd/n8/v1000/bf16/forward_kl/t1.0/none/up-random/random/normal",
    "kd/n2048/v128256/bf16/forward_kl/t1.0/none/up-random/random/normal",
)
SAME_ROW = same_row_suites("kd", SAME_ROW_CASES, SAME_ROW_CASES)


def register(registry: Registry) -> None:
    registry.add(KERNEL, *SUITES, *SAME_ROW, *providers.PROVIDERS, *bench.VARIANTS, *mutants.PROVIDERS)
