"""The `flce` kernel (fused linear + cross entropy: hidden [N, H] @ weight [V, H].T (+ bias)
against targets, logits never stored whole) as ligerbench checks and measures it: its spec,
case grid, suites, providers, planted bugs and bench, registered together.

    ligerbench verify --kernel flce --preset quick
"""

from __future__ import annotations

from ligerbench.registry import Registry, Suite
from ligerbench.rowwise import Rows, count_of, take_fields
from ligerbench.suites.ce import has_z_loss
from ligerbench.suites.common import retained_backward, split_step
from ligerbench.suites.common.registration import kernel_spec
from ligerbench.suites.common.same_row import same_row_suites
from ligerbench.suites.flce import axes, bench, mutants, providers, spec
from ligerbench.suites.flce.grid import flce_cases

# the kernel's own fields, spelled out as data; kernel_spec fills in what every kernel's spec.py names
# the same way (make_problem, reference, eager_in_dtype, textbook) and the numerical hints
KERNEL = kernel_spec(
    spec,
    rows=Rows(
        take=take_fields("hidden", "target", "upstream", "token_weight"),
        count=count_of("target"),
        per_row=("loss", "z_loss", "grad_hidden"),
        promised=(),
        shared=("grad_weight", "grad_bias"),
    ),
    name="flce",
    description="fused linear + cross entropy: hidden [N, H] @ weight [V, H].T (+ bias) vs targets",
    run=spec.run_flce,
    quantities=spec.QUANTITIES,
    grid=flce_cases,
    axes=axes.AXES,
    signature="fn(hidden, weight, target, *, bias, class_weight, ignore_index, reduction, label_smoothing, "
    "softcap, z_loss_scale, token_weight) -> loss | (loss, z_loss)",
    bench=bench.SPEC,
    applies={
        "z_loss": has_z_loss,
        "split_grad_bias": lambda case: case.bias,
        "grad_bias_again": lambda case: case.bias,
    },
    ranks=split_step.ranks_of,
)

# the kernel's suites, spelled out as data: alike in shape across kernels, each its own quantities
SUITES = (
    Suite(
        name="correctness",
        kernel="flce",
        description="loss of hidden @ weight.T + bias (and separately reported z-loss) vs float64",
        quantities=("loss", "z_loss"),
    ),
    Suite(
        name="gradients",
        kernel="flce",
        description="gradients of hidden and weight vs the float64 reference",
        quantities=("grad_hidden", "grad_weight"),
    ),
    Suite(
        name="bias_gradients",
        kernel="flce",
        description="gradient of the bias vs the float64 reference (cases with a bias)",
        quantities=("grad_bias",),
        # bias cases only, so a case without bias yields no empty rows
        select=lambda case: case.bias,
    ),
    Suite(
        name="invariance",
        kernel="flce",
        description="the gradients a split step leaves (data parallel, gradient accumulation; uneven, one valid "
        "token, an empty piece) equal the one batch's float64 gradients",
        quantities=("split_grad_hidden", "split_grad_weight", "split_grad_bias"),
        select=split_step.is_split,
    ),
    Suite(
        name="second_backward",
        kernel="flce",
        description="backward twice through one forward (retain_graph=True): the second call's gradients for "
        "its upstream, or a clear refusal; the first call's are checked after it (QuACK #209)",
        quantities=("grad_hidden_again", "grad_weight_again", "grad_bias_again"),
        select=retained_backward.is_retained,
    ),
    Suite(
        name="contracts",
        kernel="flce",
        description="hidden, weight and target reach the provider as the case laid them out, and hidden, "
        "weight and bias (whole storages) are unchanged unless the provider declares it writes them",
        quantities=("input_unchanged", "input_layout"),
    ),
)


# same-row cases (suites/common/same_row.py): one small, the same at full sizes
SAME_ROW_CASES = (
    "flce/n12/v256/h32/bf16/none/up-random/random_10/plain/normal",
    "flce/n4096/v32000/h1024/bf16/none/up-random/random_10/plain/normal",
)
# determinism also on a mean loss, the only reductions QuACK's linear cross entropy has
MEAN_CASES = (
    "flce/n12/v256/h32/bf16/mean/up-ones/random_10/plain/normal",
    "flce/n4096/v32000/h1024/bf16/mean/up-ones/random_10/plain/normal",
)
SAME_ROW = same_row_suites("flce", SAME_ROW_CASES + MEAN_CASES, SAME_ROW_CASES)


def register(registry: Registry) -> None:
    registry.add(KERNEL, *SUITES, *SAME_ROW, *providers.PROVIDERS, *bench.VARIANTS, *mutants.PROVIDERS)
