"""The registry's types: kernels, providers, suites, presets and selftest campaigns, as frozen
records in plain dicts, providers and suites keyed by (kernel, name).

A kernel is data: its `KernelSpec` holds everything the harness needs to know about it (how to
draw a case's inputs, the float64 truth, PyTorch eager as the tolerance yardstick, how to call a
provider, the quantities compared, the case grid per preset, the peer bench ratios and the gate
divide by, the control selftest judges mutants against, and its bench sweeps). Commands read
kernels, providers and suites from here and name none of them in code.

Nothing registers itself on import: `ligerbench.builtin.default_registry()` adds what this
repository ships (suites/<kernel>/) and then third-party plugins, each isolated.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch.distributed as dist

from ligerbench.axes import Axis
from ligerbench.cases import Case


def _always(case: Case) -> str | None:
    return None


def _world(case: Case) -> int | None:
    return case.get("world")


@dataclass(frozen=True)
class KernelSpec:
    """A loss kernel's contract, as the harness sees it."""

    name: str
    description: str
    make_problem: Callable[[Case, int, Any], Any]  # (case, seed, torch.device) -> problem
    reference: Callable[[Any], Any]  # problem -> Outcome, float64
    eager: Callable[[Any], Any]  # problem -> Outcome, in the case dtype: the careful tolerance yardstick
    run: Callable[[Callable, Any], Any]  # (provider callable, problem) -> Outcome
    quantities: tuple[str, ...]  # what an Outcome may hold
    grid: Callable[[str, str], list[Case]]  # (preset, device type) -> the kernel's cases
    # the case axes (ligerbench/axes.py): each a name, its values per preset and what each value
    # stands for, in case-id order; case ids, records columns, --where and `list` come from them
    axes: tuple[Axis, ...] = ()
    signature: str = ""  # how a provider is called, shown by `list` (docs/providers.md has the details)
    peer: str = "eager"  # the provider bench ratios and the gate's regressions are taken against
    control: str = "ours"  # the correct provider selftest runs beside each mutant
    bench: Any = None  # ligerbench.bench.spec.BenchSpec, or None when the kernel has no bench
    # a case field whose value must be present for a quantity to be checked (e.g. z_loss only
    # when the case's option has a z-loss): quantity -> predicate
    applies: dict[str, Callable[[Case], bool]] = field(default_factory=dict, hash=False)
    # the devices its ranks can be simulated on in one process (vocab-parallel kernels without
    # --nproc); elsewhere only real ranks run it, and the reason is said
    simulated_devices: tuple[str, ...] = ("cpu", "cuda")
    simulated_why: str = ""
    # how many real ranks a case runs on under `verify --nproc N` (None: one process only); by
    # default its `world` axis. Without --nproc such a case runs its ranks in one process.
    ranks: Callable[[Case], int | None] = field(default=_world, hash=False)
    # problem -> Outcome: the semantics as users write them in plain PyTorch (float32 math, 16-bit
    # outputs rounded once), the default verdict's second yardstick (ligerbench/tolerance.py);
    # None: the careful yardstick alone, under either verdict
    textbook: Callable[[Any], Any] | None = None
    # case, quantity, error -> the known numerical patterns a failing check of that case may show
    # (a softcap slope that cancels, the entropy of a peaked row, ...) that can make an error of
    # that size, named on its FAIL line
    hints: Callable[[Case, str, float], tuple[str, ...]] | None = None
    # ligerbench.rowwise.Rows: how a problem is cut down to some of its rows and which quantities
    # are per row, for the batch-invariance suite (ligerbench/verify/invariance.py); None: the
    # kernel's rows are not independent (a sequence loss), its cases run no such check
    rows: Any = None


class NotRun(Exception):
    """Raised by a provider's callable for a case it cannot run as itself (torch.compile past
    its recompile limit would run it eagerly: suites/common/compiled.py): verify records the case as
    skip, with the message as the reason, never as that provider's pass."""


@dataclass(frozen=True)
class Provider:
    """One implementation of a kernel. `load()` imports it and returns the callable; an
    exception there makes the provider unavailable (its rows are skipped, with the reason)."""

    name: str
    kernel: str
    description: str
    load: Callable[[], Callable]
    mutates_input: bool = False  # declared; the contracts suite checks the declaration holds
    devices: tuple[str, ...] = ("cpu", "cuda")
    supports: Callable[[Case], str | None] = _always  # a reason it cannot run a case, or None
    mutant: bool = False  # a planted bug, run only when asked for by name (or by selftest)
    bench_only: bool = False  # a bench setting of another provider, not verified
    # a collective peer that needs a process group of its own (a DTensor mesh over it): simulated
    # ranks (one process) cannot run it, and it is unavailable there, with that reason
    real_ranks: bool = False
    # Mutants only: the slices of the case grid where the bug shows, each a dict of Case field ->
    # value or tuple of values, e.g. {"reduction": "none", "ignore_pattern": "leading_run"}.
    # selftest runs the mutant on these cases alone (the whole grid would not fit CI); none
    # declared means the whole grid. Not hashed: dicts are not hashable.
    targets: tuple[dict[str, Any], ...] = field(default=(), hash=False)
    # The settings that make this provider what it is, as data (e.g. {"chunk_mib": 64} for ours
    # at a 64 MiB budget): written into every record it produces (Record.settings), so readers
    # (the Pareto plot) take a setting from there, never from the provider's name.
    settings: dict[str, Any] = field(default_factory=dict, hash=False)
    # Held to the careful yardstick alone whatever the run's verdict (ligerbench/tolerance.py):
    # our own kernels and their planted bugs are; a third party's meet the default unless the
    # run asks for --strict.
    strict: bool = False
    # One implementation under several settings shares a family (ours, ours_small_chunks, ...):
    # verify's consensus check counts failing families, never one kernel's settings twice.
    # "" means the provider's own name.
    family: str = ""
    # Same inputs, same bits: `verify --repeat N` runs it N times a case and fails differing bits.
    deterministic: bool = False
    # A third party's kernel: the distribution it comes from and the version this repository pins
    # (suites/peers/); `list` shows both beside the installed version, env.json records the latter.
    library: str = ""
    pinned: str = ""
    # A third party's own promise, where its documentation states one: the words, quoted, and the
    # reference it names as plain PyTorch (problem -> Outcome on the case's own inputs, e.g.
    # "equivalent to cross_entropy(linear(input, weight))" in the inputs' dtype). Under the default
    # verdict it is one more yardstick of this provider alone: a peer is not called wrong where it
    # does what it promises (ligerbench/tolerance.py, "Each peer by its own promise"); --strict
    # ignores it. None: the provider promises no more than the kernel's semantics.
    promise: Callable[[Any], Any] | None = field(default=None, hash=False)
    promise_quote: str = ""
    # Its documentation promises float32 math from unrounded logits (Liger's fused linear JSD:
    # "computes in FP32"): the model code's form (16-bit logits, then float32) is then no yardstick
    # of it under the default verdict; it is held to what it promises (promise_quote says where).
    promises_float32_logits: bool = False

    @property
    def lineage(self) -> str:
        return self.family or self.name

    def unavailable(self, device_type: str, *, ranks_known: bool = True) -> str | None:
        """Why this provider cannot run here, or None. `ranks_known=False`: asked before any rank
        started (a command checking the names it was given), so real ranks are not judged yet."""
        if device_type not in self.devices:
            return f"{self.name} runs on {', '.join(self.devices)} only"
        if self.real_ranks and ranks_known and not (dist.is_available() and dist.is_initialized()):
            return f"{self.name} needs real ranks (--nproc N), not ranks simulated in one process"
        try:
            self.load()
        except ImportError as exc:
            return f"{self.name} is not installed ({exc})"
        except Exception as exc:  # noqa: BLE001 -- a provider that cannot load is unavailable, never a crash
            return f"{self.name} cannot be loaded ({type(exc).__name__}: {exc})"
        return None


# What our own kernels declare (every setting of them): held to the strict verdict, one family
# for the consensus check, and the same bits on the same inputs (no atomics; collectives make no
# such promise, so the vocab-parallel ones take OURS_RANKS).
OURS_RANKS = {"strict": True, "family": "ours"}
OURS = {**OURS_RANKS, "deterministic": True}


@dataclass(frozen=True)
class Suite:
    """What is checked: a kernel, the quantities compared, and which of the kernel's cases (all
    of its grid unless `select` narrows them)."""

    name: str
    kernel: str
    description: str
    quantities: tuple[str, ...]
    select: Callable[[Case], bool] | None = None


@dataclass(frozen=True)
class Preset:
    name: str
    description: str


@dataclass(frozen=True)
class Campaign:
    """A selftest engine: names its mutants and runs them (ligerbench/selftest/)."""

    name: str
    description: str
    mutants: Callable[[Any, str], list]  # (registry, device type) -> [selftest.model.Mutant]
    run: Callable[[Any, list, Any], None]  # (registry, mutants, selftest.model.Context)


class RegistrationError(ValueError):
    """Something was registered wrong (twice, or for a kernel nobody registered)."""


@dataclass
class Registry:
    kernels: dict[str, KernelSpec] = field(default_factory=dict)
    providers: dict[tuple[str, str], Provider] = field(default_factory=dict)
    suites: dict[tuple[str, str], Suite] = field(default_factory=dict)
    presets: dict[str, Preset] = field(default_factory=dict)
    campaigns: dict[str, Campaign] = field(default_factory=dict)
    # plugins whose register() raised: (entry point name, error), reported by the commands
    plugin_errors: list[tuple[str, str]] = field(default_factory=list)
    # (kernel, provider) -> the failed plugin that tried to register it: a run that names such a
    # provider is refused, never served the built-in of the same name (ligerbench/named.py)
    failed_claims: dict[tuple[str, str], str] = field(default_factory=dict)

    def add(self, *items: KernelSpec | Provider | Suite | Preset | Campaign) -> None:
        for item in items:
            if isinstance(item, (Provider, Suite)):
                self._need_kernel(item)
                table: dict = self.providers if isinstance(item, Provider) else self.suites
                key: Any = (item.kernel, item.name)
            elif isinstance(item, (KernelSpec, Preset, Campaign)):
                table = {KernelSpec: self.kernels, Preset: self.presets, Campaign: self.campaigns}[type(item)]
                key = item.name
            else:
                kinds = "KernelSpec, Provider, Suite, Preset or Campaign"
                raise RegistrationError(f"cannot register {item!r}: not a {kinds}")
            if key in table:
                raise RegistrationError(f"{type(item).__name__} {key!r} is registered twice")
            table[key] = item

    def _need_kernel(self, item: Provider | Suite) -> None:
        if item.kernel not in self.kernels:
            known = ", ".join(self.kernels) or "none yet"
            raise RegistrationError(
                f"{type(item).__name__} {item.name!r} names kernel {item.kernel!r}, which is not registered "
                f"(known kernels: {known}; register the KernelSpec first)"
            )

    def kernel(self, name: str) -> KernelSpec:
        if name not in self.kernels:
            raise KeyError(f"unknown kernel {name!r}; choose from {', '.join(self.kernels)}")
        return self.kernels[name]

    def provider(self, kernel: str, name: str) -> Provider:
        if (kernel, name) not in self.providers:
            known = ", ".join(p.name for p in self.providers_for(kernel, mutants=True, bench_only=True))
            raise KeyError(f"unknown provider {name!r} of kernel {kernel!r}; choose from {known}")
        return self.providers[(kernel, name)]

    def providers_for(self, kernel: str, *, mutants: bool = False, bench_only: bool = False) -> list[Provider]:
        return [
            p
            for p in self.providers.values()
            if p.kernel == kernel and (mutants or not p.mutant) and (bench_only or not p.bench_only)
        ]

    def mutants_for(self, kernel: str) -> list[Provider]:
        return [p for p in self.providers.values() if p.kernel == kernel and p.mutant]

    def suites_for(self, kernel: str) -> list[Suite]:
        return [s for s in self.suites.values() if s.kernel == kernel]

    def cases_of(self, suite: Suite, preset: str, device_type: str, grid: list[Case] | None = None) -> list[Case]:
        """The suite's cases of its kernel's grid (`grid`: that grid, already built by the caller)."""
        cases = self.kernels[suite.kernel].grid(preset, device_type) if grid is None else grid
        return [c for c in cases if suite.select is None or suite.select(c)]
