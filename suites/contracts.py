"""`contracts`: what a provider declares about itself holds. Today: a provider that does not
declare `mutates_input` leaves the caller's logits bit-for-bit unchanged."""

from ligerbench.registry import Suite
from ligerbench.suites.grid import ce_cases

SUITE = Suite(
    name="contracts",
    kernel="ce",
    description="the logits handed in are unchanged unless the provider declares it writes them",
    quantities=("input_unchanged",),
    cases=ce_cases,
)
