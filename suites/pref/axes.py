"""The case axes of `pref` (DPO, IPO and KTO on flp's per-sequence log-probs): what each value
stands for.

ligerbench verify --kernel pref --where loss_type=kto --where split=accum2
"""

from __future__ import annotations

from ligerbench.axes import NO_DEFAULT, Axis
from ligerbench.cases import Case
from ligerbench.suites.grpo.axes import completion_axes

B = Axis("b", "sequences in the batch (sigmoid, ipo: chosen then rejected halves)", {"quick": (4,), "full": (16,)},
         tag="b", default=NO_DEFAULT)  # fmt: skip
T, H, V, DTYPE = completion_axes(512, 2048, 32000)
LOSS_TYPE = Axis("loss_type", "the preference loss", ("sigmoid", "ipo", "kto"), default="sigmoid", means={
    "sigmoid": "DPO: -log sigmoid(beta * margin of the log-ratios) (Rafailov et al.)",
    "ipo": "IPO: (length-averaged margin - 1 / (2 beta))^2 (Azar et al.)",
    "kto": "KTO: unpaired, 1 - sigmoid(beta * (r - z)) against a KL reference point (Ethayarajh et al.)",
})  # fmt: skip
BETA = Axis("beta", "the inverse temperature of the implicit reward", (0.1, 0.5), tag="beta", default=0.1)
SMOOTHING = Axis("label_smoothing", "cDPO's label smoothing (sigmoid only)", (0.0, 0.1), tag="ls", default=0.0,
                 hidden=(0.0,))  # fmt: skip
WEIGHTS = Axis("weights", "KTO's desirable / undesirable weights (kto only)", ("even", "skewed"), default="even",
               tag="w-", hidden=("even",),
               means={"even": "(1, 1)", "skewed": "(1.0, 1.5): TRL's class weights"})  # fmt: skip
SPLIT = Axis("split", "how the step's batch is split (the gradient must not depend on it)", ("none", "accum2"),
             default="none", tag="split-", hidden=("none",), means={
    "none": "one batch",
    "accum2": "2 micro-batches of equal size, their losses averaged (kto: the step's KL reference point "
              "passed to both)",
})  # fmt: skip

AXES = (B, T, H, V, DTYPE, LOSS_TYPE, BETA, SMOOTHING, WEIGHTS, SPLIT)
KTO_WEIGHTS = {"even": (1.0, 1.0), "skewed": (1.0, 1.5)}


def case(**params) -> Case:
    """A `pref` case; the axes' defaults fill what is not named."""
    return Case.of("pref", AXES, **params)
