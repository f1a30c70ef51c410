"""The registry: kernels, providers, suites and presets, as frozen records in plain dicts.

Nothing registers itself on import. `default_registry()` adds what this repository ships, then
what third parties declare under the `ligerbench.plugins` entry-point group: each such entry
point names a callable `register(registry)` that calls `registry.add(...)`, e.g. in their
pyproject.toml:

    [project.entry-points."ligerbench.plugins"]
    mykernels = "mykernels.ligerbench_plugin:register"
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ligerbench.cases import Case

ENTRY_POINT_GROUP = "ligerbench.plugins"


@dataclass(frozen=True)
class KernelSpec:
    """A loss kernel's contract: how to draw a case's inputs, the float64 truth, PyTorch eager
    in the case dtype (the tolerance yardstick), and how to call a provider on a problem."""

    name: str
    description: str
    make_problem: Callable[[Case, int, Any], Any]  # (case, seed, torch.device) -> problem
    reference: Callable[[Any], Any]  # problem -> Outcome, float64
    eager: Callable[[Any], Any]  # problem -> Outcome, case dtype
    run: Callable[[Callable, Any], Any]  # (provider callable, problem) -> Outcome
    quantities: tuple[str, ...]  # what an Outcome may hold


def _always(case: Case) -> str | None:
    return None


@dataclass(frozen=True)
class Provider:
    """One implementation of a kernel. `load()` imports it and returns the callable; an
    ImportError makes the provider unavailable (its rows are skipped, with the reason)."""

    name: str
    kernel: str
    description: str
    load: Callable[[], Callable]
    mutates_input: bool = False  # declared; verify checks the declaration holds
    devices: tuple[str, ...] = ("cpu", "cuda")
    supports: Callable[[Case], str | None] = _always  # a reason it cannot run a case, or None
    mutant: bool = False  # a planted bug, run only when asked for by name
    # Mutants only: the slices of the case grid where the bug shows, each a dict of Case field ->
    # value or tuple of values, e.g. {"reduction": "none", "ignore_pattern": "leading_run"}.
    # selftest runs the mutant on these cases alone (the whole grid would not fit CI); none
    # declared means the whole grid. Not hashed: dicts are not hashable.
    targets: tuple[dict[str, Any], ...] = field(default=(), hash=False)

    def unavailable(self, device_type: str) -> str | None:
        if device_type not in self.devices:
            return f"{self.name} runs on {', '.join(self.devices)} only"
        try:
            self.load()
        except ImportError as exc:
            return f"{self.name} is not installed ({exc})"
        return None


@dataclass(frozen=True)
class Suite:
    """What is checked: a kernel, the quantities compared, and the cases for a preset."""

    name: str
    kernel: str
    description: str
    quantities: tuple[str, ...]
    cases: Callable[[str, str], list[Case]]  # (preset, device type) -> cases


@dataclass(frozen=True)
class Preset:
    name: str
    description: str
    device: str  # the device type it is sized for


@dataclass
class Registry:
    kernels: dict[str, KernelSpec] = field(default_factory=dict)
    providers: dict[str, Provider] = field(default_factory=dict)
    suites: dict[str, Suite] = field(default_factory=dict)
    presets: dict[str, Preset] = field(default_factory=dict)

    def add(self, *items: KernelSpec | Provider | Suite | Preset) -> None:
        for item in items:
            table = {
                KernelSpec: self.kernels,
                Provider: self.providers,
                Suite: self.suites,
                Preset: self.presets,
            }[type(item)]
            if item.name in table:
                raise ValueError(f"{type(item).__name__} {item.name!r} is registered twice")
            table[item.name] = item

    def providers_for(self, kernel: str, *, mutants: bool = False) -> list[Provider]:
        return [p for p in self.providers.values() if p.kernel == kernel and (mutants or not p.mutant)]

    def suites_for(self, kernel: str) -> list[Suite]:
        return [s for s in self.suites.values() if s.kernel == kernel]

    def load_plugins(self) -> list[str]:
        """Call every `ligerbench.plugins` entry point; returns their names."""
        names = []
        for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
            ep.load()(self)
            names.append(ep.name)
        return names


def default_registry(*, plugins: bool = True) -> Registry:
    """What this repository ships, plus third-party plugins."""
    from ligerbench import ce_spec
    from ligerbench.providers import ce as ce_providers
    from ligerbench.providers import mutants
    from ligerbench.suites import PRESETS, SUITES

    reg = Registry()
    reg.add(
        KernelSpec(
            name="ce",
            description="cross entropy over logits [N, V]",
            make_problem=ce_spec.make_problem,
            reference=ce_spec.reference,
            eager=ce_spec.eager_in_dtype,
            run=ce_spec.run_ce,
            quantities=("loss", "z_loss", "grad_logits"),
        )
    )
    reg.add(*ce_providers.PROVIDERS, *mutants.PROVIDERS, *SUITES, *PRESETS)
    from ligerbench import flce_spec
    from ligerbench.providers import flce as flce_providers
    from ligerbench.providers import flce_mutants

    reg.add(
        KernelSpec(
            name="flce",
            description="fused linear + cross entropy: hidden [N, H] @ weight [V, H].T (+ bias) vs targets",
            make_problem=flce_spec.make_problem,
            reference=flce_spec.reference,
            eager=flce_spec.eager_in_dtype,
            run=flce_spec.run_flce,
            quantities=flce_spec.QUANTITIES,
        ),
        *flce_providers.PROVIDERS,
        *flce_mutants.PROVIDERS,
    )
    if plugins:
        reg.load_plugins()
    return reg
