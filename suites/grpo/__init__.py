"""The `grpo` kernel (the GRPO family of policy losses on flp's fused log-probs) as ligerbench
checks it: spec, axes, grid, suites, providers and planted bugs, registered together.

    ligerbench verify --kernel grpo --where loss_type=dapo --where split=dp2
"""

from __future__ import annotations

from ligerbench.registry import Registry, Suite
from ligerbench.suites.common.registration import kernel_spec
from ligerbench.suites.common.same_row import same_row_suites
from ligerbench.suites.grpo import axes, bench, mutants, providers, spec
from ligerbench.suites.grpo.grid import grpo_cases


def _split(case) -> bool:
    # bnpo is a token mean of each micro-batch: it does not split exactly by definition
    return case.split != "none" and case.loss_type != "bnpo"


# the kernel's own fields, spelled out as data; kernel_spec fills in what every kernel's spec.py names
# the same way (make_problem, reference, eager_in_dtype, textbook) and the numerical hints
KERNEL = kernel_spec(
    spec,
    name="grpo",
    description="the GRPO family of policy losses (grpo, bnpo, dr_grpo, dapo, cispo) on flp's log-probs",
    run=spec.run_grpo,
    quantities=("loss", "grad_hidden", "grad_weight", "split_grad_hidden", "split_grad_weight", "input_unchanged"),
    grid=grpo_cases,
    axes=axes.AXES,
    signature="fn(hidden, weight, completion_ids, old_logp, ref_logp, advantages, mask, *, loss_type, "
    "importance_level, eps_low, eps_high, beta, kl_estimator, temperature, num_items, max_completion_length) -> loss",
    bench=bench.SPEC,
    applies={"split_grad_hidden": _split, "split_grad_weight": _split},
    ranks=spec.ranks_of,
)

# the kernel's suites, spelled out as data: alike in shape across kernels, each its own quantities
SUITES = (
    Suite(name="correctness", kernel="grpo", description="the loss vs float64 (the published formulas)",
          quantities=("loss",)),
    Suite(name="gradients", kernel="grpo", description="gradients of hidden and weight vs float64",
          quantities=("grad_hidden", "grad_weight")),
    Suite(name="invariance", kernel="grpo", description="the split step's gradients (accumulation, data "
          "parallel) equal the one batch's float64 gradients", quantities=("split_grad_hidden", "split_grad_weight")),
    Suite(name="contracts", kernel="grpo", description="old/ref log-probs and advantages unchanged",
          quantities=("input_unchanged",)),
)  # fmt: skip


# same-row cases (suites/common/same_row.py): one small, the same at full sizes; and a k3 KL case,
# the estimator Liger's GRPO losses take, so that its providers are measured too
SAME_ROW_CASES = (
    "grpo/b4/t6/h16/v61/bf16/grpo/is-sequence/kl-k1/temp0.7/eps-asym",
    "grpo/b8/t1024/h4096/v128256/bf16/grpo/is-sequence/kl-k1/temp0.7/eps-asym",
    "grpo/b4/t6/h16/v61/bf16/dr_grpo/kl-k3/temp1.0/eps-sym/split-accum2",
    "grpo/b8/t1024/h4096/v128256/bf16/dr_grpo/kl-k3/temp1.0/eps-sym/split-accum2",
)
SAME_ROW = same_row_suites("grpo", SAME_ROW_CASES)


def register(registry: Registry) -> None:
    registry.add(KERNEL, *SUITES, *SAME_ROW, *providers.PROVIDERS, *bench.VARIANTS, *mutants.PROVIDERS)
