"""The `pref` kernel (DPO, IPO and KTO on flp's per-sequence log-probs) as ligerbench checks it:
spec, axes, grid, suites, providers and planted bugs, registered together.

    ligerbench verify --kernel pref --where loss_type=kto
"""

from __future__ import annotations

from ligerbench.registry import Registry, Suite
from ligerbench.suites.common.registration import kernel_spec
from ligerbench.suites.common.same_row import same_row_suites
from ligerbench.suites.pref import axes, mutants, providers, spec
from ligerbench.suites.pref.grid import pref_cases

# the kernel's own fields, spelled out as data; kernel_spec fills in what every kernel's spec.py names
# the same way (make_problem, reference, eager_in_dtype, textbook) and the numerical hints
KERNEL = kernel_spec(
    spec,
    name="pref",
    description="preference losses (DPO sigmoid, IPO, KTO) on flp's per-sequence log-probs",
    run=spec.run_pref,
    quantities=("loss", "grad_hidden", "grad_weight", "split_grad_hidden", "split_grad_weight", "input_unchanged"),
    grid=pref_cases,
    axes=axes.AXES,
    signature="fn(hidden, weight, ids, mask, ref_logps, *, loss_type, beta, label_smoothing, desirable, kl_ref, "
    "desirable_weight, undesirable_weight) -> loss",
    applies={"split_grad_hidden": lambda case: case.split != "none",
             "split_grad_weight": lambda case: case.split != "none"},
)  # fmt: skip

# the kernel's suites, spelled out as data: alike in shape across kernels, each its own quantities
SUITES = (
    Suite(name="correctness", kernel="pref", description="the loss vs float64 (the published formulas)",
          quantities=("loss",)),
    Suite(name="gradients", kernel="pref", description="gradients of hidden and weight vs float64",
          quantities=("grad_hidden", "grad_weight")),
    Suite(name="invariance", kernel="pref", description="the split step's gradients (two micro-batches "
          "averaged) equal the one batch's float64 gradients", quantities=("split_grad_hidden", "split_grad_weight")),
    Suite(name="contracts", kernel="pref", description="reference log-probs and desirable flags unchanged",
          quantities=("input_unchanged",)),
)  # fmt: skip


# same-row cases (suites/common/same_row.py): one small, the same at full sizes
SAME_ROW_CASES = ("pref/b4/t6/h16/v64/bf16/sigmoid/beta0.1", "pref/b16/t512/h2048/v32000/bf16/sigmoid/beta0.1")
SAME_ROW = same_row_suites("pref", SAME_ROW_CASES)


def register(registry: Registry) -> None:
    registry.add(KERNEL, *SUITES, *SAME_ROW, *providers.PROVIDERS, *mutants.PROVIDERS)
