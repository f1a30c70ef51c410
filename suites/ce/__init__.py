"""The `ce` kernel (cross entropy over logits [N, V]) as ligerbench checks and measures it:
its spec, case grid, suites, providers, planted bugs and bench, registered together.

    ligerbench verify --kernel ce --reduction none
"""

from __future__ import annotations

from ligerbench.cases import OPTIONS, Case
from ligerbench.registry import Registry, Suite
from ligerbench.rowwise import Rows, count_of, take_fields
from ligerbench.suites.ce import axes, bench, mutants, providers, spec
from ligerbench.suites.ce.grid import ce_cases, last_rows_cases
from ligerbench.suites.common import retained_backward, split_step
from ligerbench.suites.common.registration import kernel_spec
from ligerbench.suites.common.same_row import others, past_int32_suite, same_row_suites


def has_z_loss(case: Case) -> bool:
    # the separately reported z-loss is only a check when the case has a z-loss
    return bool(OPTIONS[case.option].get("z_loss_scale"))


# the kernel's own fields, spelled out as data; kernel_spec fills in what every kernel's spec.py names
# the same way (make_problem, reference, eager_in_dtype, textbook) and the numerical hints
KERNEL = kernel_spec(
    spec,
    rows=Rows(
        take=take_fields("logits", "target", "upstream", "token_weight"),
        count=count_of("target"),
        per_row=("loss", "z_loss", "grad_logits"),
        promised=("loss", "z_loss", "grad_logits"),
        shared=(),
    ),
    name="ce",
    description="cross entropy over logits [N, V]",
    run=spec.run_ce,
    quantities=(
        "loss",
        "z_loss",
        "grad_logits",
        "split_grad_logits",
        "grad_logits_again",
        "input_unchanged",
        "input_layout",
    ),
    grid=ce_cases,
    axes=axes.AXES,
    signature="fn(logits, target, *, weight, ignore_index, reduction, label_smoothing, softcap, z_loss_scale, "
    "token_weight) -> loss | (loss, z_loss)",
    bench=bench.SPEC,
    applies={"z_loss": has_z_loss},
    ranks=split_step.ranks_of,
)

# the cases past 2**31 elements whose last rows only the past_int32 suite checks (full preset, GPU)
LAST_ROWS = last_rows_cases("full", "cuda")

# the kernel's suites, spelled out as data: alike in shape across kernels, each its own quantities
SUITES = (
    Suite(
        name="correctness",
        kernel="ce",
        description="loss (and separately reported z-loss) vs the float64 reference",
        quantities=("loss", "z_loss"),
        select=others(LAST_ROWS),
    ),
    Suite(
        name="gradients",
        kernel="ce",
        description="gradient of the logits vs the float64 reference",
        quantities=("grad_logits",),
        select=others(LAST_ROWS),
    ),
    Suite(
        name="invariance",
        kernel="ce",
        description="the gradient of the logits a split step leaves (data parallel, gradient accumulation; "
        "uneven, one valid token, an empty piece) equals the one batch's float64 gradient",
        quantities=("split_grad_logits",),
        select=split_step.is_split,
    ),
    Suite(
        name="second_backward",
        kernel="ce",
        description="backward twice through one forward (retain_graph=True): the second call's gradient of the "
        "logits for its upstream, or a clear refusal; the first call's is checked after it (QuACK #209)",
        quantities=("grad_logits_again",),
        select=retained_backward.is_retained,
    ),
    Suite(
        name="contracts",
        kernel="ce",
        description="the logits reach the provider as the case laid them out, and (their whole storage, "
        "padding included) are unchanged unless the provider declares it writes them",
        quantities=("input_unchanged", "input_layout"),
        select=others(LAST_ROWS),
    ),
)


# same-row cases (suites/common/same_row.py): one small, the same at full sizes
SAME_ROW_CASES = (
    "ce/n16/v1000/bf16/none/up-ones/random_10/plain/normal",
    "ce/n1024/v32000/bf16/none/up-ones/random_10/plain/normal",
)
SAME_ROW = same_row_suites("ce", SAME_ROW_CASES, SAME_ROW_CASES)


def register(registry: Registry) -> None:
    registry.add(
        KERNEL,
        *SUITES,
        *SAME_ROW,
        past_int32_suite("ce", LAST_ROWS),
        *providers.PROVIDERS,
        *bench.VARIANTS,
        *mutants.PROVIDERS,
    )
