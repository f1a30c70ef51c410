"""The selftest's records: a planted bug (Mutant), the context a campaign runs it in, and the
case slices (`targets`) a kernel mutant declares.

A campaign (ligerbench.registry.Campaign) names its mutants and runs them; the kernel campaign
is ligerbench/selftest/kernels.py, the converge one ligerbench/selftest/converge.py.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from ligerbench.axes import Axis
from ligerbench.cases import Case
from ligerbench.records import RecordWriter
from ligerbench.registry import Provider


@dataclass(frozen=True)
class Mutant:
    name: str
    campaign: str
    description: str
    # The correct implementation run on the same cases and inputs. A failed check counts as a
    # kill only where the control passes it: a failure both share is the check's, not the bug's.
    control: str
    suites: tuple[str, ...]  # the suites meant to see it; the matrix shows the others as n/a
    kernel: str = ""  # the kernel whose records are the mutant's (provider names are per kernel)
    needs: str = ""  # the case-axis values that expose it (a kernel mutant's targets), for the kill matrix


@dataclass(frozen=True)
class Context:
    preset: str
    device: torch.device
    seed: int
    run_id: str
    writer: RecordWriter
    on_step: Callable[[str], None] = field(default=lambda s: None)


# ----------------------------------------------------------------------------- case slices


def in_slice(case: Case, target: dict) -> bool:
    """A case is in a slice when each named field has the value, or one of the tuple of values."""
    for name, allowed in target.items():
        values = allowed if isinstance(allowed, (tuple, list, set, frozenset)) else (allowed,)
        if getattr(case, name) not in values:
            return False
    return True


def check_targets(provider: Provider, axes: tuple[Axis, ...]) -> None:
    """A misspelt axis would silently select no case; refuse it instead (`axes`: the kernel's)."""
    known = {a.name for a in axes}
    for target in provider.targets:
        unknown = set(target) - known
        if unknown:
            raise ValueError(
                f"mutant {provider.name}: unknown case axis(es) {sorted(unknown)} in targets; "
                f"choose from {sorted(known)}"
            )


def describe_targets(provider: Provider) -> str:
    """A kernel mutant's targets as text: 'layout=3d' or 'reduction=mean, upstream=accum | ...'."""

    def value(v) -> str:
        return "/".join(map(str, v)) if isinstance(v, (tuple, list, set, frozenset)) else str(v)

    return " | ".join(", ".join(f"{k}={value(v)}" for k, v in t.items()) for t in provider.targets)


def targeted(provider: Provider) -> Callable[[Case], bool]:
    if not provider.targets:
        return lambda case: True
    return lambda case: any(in_slice(case, t) for t in provider.targets)
