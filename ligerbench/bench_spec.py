"""What `ligerbench bench` needs to know about a kernel: its inputs, how a provider is called
on them, and the work model that turns a time into a throughput. One `BenchSpec` per kernel,
defined in suites/bench_<kernel>.py."""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from ligerbench.cases import Case
from ligerbench.registry import Provider


@dataclass
class BenchInputs:
    positional: list[torch.Tensor]  # the provider's positional arguments, in order
    leaves: list[torch.Tensor]  # those of them that receive gradients (requires_grad=True)
    options: dict = field(default_factory=dict)  # keyword arguments, filtered per provider


@dataclass(frozen=True)
class Target:
    """A figure our kernel must reach at one shape (from the issues), checked in every run that
    measures that shape: a record with the limit and a pass/fail verdict."""

    providers: tuple[str, ...]  # our providers the target applies to
    n: int
    v: int
    h: int  # 0 for ce
    metric: str  # "time_ms" (mode full) or "extra_mib"
    limit: float
    source: str


@dataclass(frozen=True)
class BenchSpec:
    kernel: str
    make_inputs: Callable[[Case, int, torch.device], BenchInputs]
    # work(case, mode) -> the fewest bytes (or FLOPs) a step of that mode must move (or do)
    work: Callable[[Case, str], float]
    work_formula: str  # the model, as printed beside the numbers
    rate_unit: str  # "GB/s" or "TFLOP/s"
    rate_scale: float  # work per ms / rate_scale = rate_unit (bytes/ms / 1e6 = GB/s)
    ceiling: str  # which ceiling the rate is a share of: "copy_gbps" or "matmul_tflops"
    variants: tuple[Provider, ...] = ()  # bench-only settings of registered providers
    # registered providers left out unless named with --provider, with the reason
    excluded: dict[str, str] = field(default_factory=dict)
    targets: tuple[Target, ...] = ()


def device_generator(case: Case, seed: int, device: torch.device) -> torch.Generator:
    """Seeded from the run seed and the case id, like cases.generator_for, but on the device:
    drawing 2e9 logits on the CPU and copying them over would take longer than timing them."""
    digest = hashlib.sha256(f"{seed}:{case.id}".encode()).digest()
    return torch.Generator(device=device).manual_seed(int.from_bytes(digest[:8], "little") & (2**63 - 1))


def call(fn: Callable, inputs: BenchInputs) -> torch.Tensor:
    """fn(*positional, **options) -> the loss (the first element when it returns a tuple).
    Options the callable does not name are left out, so a provider with fewer keywords (or
    other names for them) is still called with everything it accepts."""
    out = fn(*inputs.positional, **accepted(fn, inputs.options))
    if isinstance(out, (tuple, list)):
        return out[0]
    return out.loss if hasattr(out, "loss") else out


def accepted(fn: Callable, options: dict) -> dict:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):  # builtins and some compiled wrappers have no signature
        return options
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return options
    return {k: v for k, v in options.items() if k in params}
