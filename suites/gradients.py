"""`gradients`: the gradient of the logits against float64, under each upstream gradient."""

from ligerbench.registry import Suite
from ligerbench.suites.grid import ce_cases

SUITE = Suite(
    name="gradients",
    kernel="ce",
    description="gradient of the logits vs the float64 reference",
    quantities=("grad_logits",),
    cases=ce_cases,
)
