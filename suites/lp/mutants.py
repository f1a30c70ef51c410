"""Planted bugs of `lp`: suites/log_prob_mutants.py's bug classes, each on the slices of the grid
where it shows (padding needs the padded_vocab layout here)."""

from __future__ import annotations

from ligerbench.registry import Provider
from ligerbench.suites.log_prob_mutants import BUGS, buggy

PADDED = {"mass_on_padding", "entropy_nan_at_zero"}  # -inf columns exist only in this layout


def _mutant(bug: str) -> Provider:
    about, slices = BUGS[bug]
    if bug in PADDED:
        slices = tuple({**s, "layout": "padded_vocab"} for s in slices)
    return Provider(name=f"mutant_lp_{bug}", kernel="lp", description=about, load=lambda: buggy(bug), mutant=True,
                    targets=slices)  # fmt: skip


PROVIDERS = tuple(_mutant(bug) for bug in BUGS)
