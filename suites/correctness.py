"""`correctness`: the loss values (and the z-loss reported beside them) against float64."""

from ligerbench.registry import Suite
from ligerbench.suites.grid import ce_cases

SUITE = Suite(
    name="correctness",
    kernel="ce",
    description="loss (and separately reported z-loss) vs the float64 reference",
    quantities=("loss", "z_loss"),
    cases=ce_cases,
)
