"""Planted bugs of `flkd`: suites/families/distill_mutants.py's bug classes on the logits of two heads
(the top-K ones need a top-K teacher: `kd`'s), each on the slices of the grid where it shows."""

from __future__ import annotations

from ligerbench.registry import Provider
from ligerbench.suites.families.distill_mutants import BUGS, on_head

HEAD_BUGS = tuple(bug for bug in BUGS if not bug.startswith("topk_"))

PROVIDERS = tuple(
    Provider(name=f"mutant_flkd_{bug}", kernel="flkd", description=BUGS[bug][0], load=lambda bug=bug: on_head(bug),
             mutant=True, targets=tuple({k: v for k, v in s.items() if k != "teacher_grad"} for s in BUGS[bug][1]))
    for bug in HEAD_BUGS
)  # fmt: skip
