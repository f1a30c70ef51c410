"""Planted bugs of `kd`: suites/families/distill_mutants.py's bug classes, each on the slices of the grid
where it shows."""

from __future__ import annotations

from ligerbench.registry import Provider
from ligerbench.suites.families.distill_mutants import BUGS, buggy

PROVIDERS = tuple(
    Provider(name=f"mutant_kd_{bug}", kernel="kd", description=about, load=lambda bug=bug: buggy(bug), mutant=True,
             targets=slices)
    for bug, (about, slices) in BUGS.items()
)  # fmt: skip
