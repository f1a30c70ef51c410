"""What `ligerbench bench` needs to know about a kernel: its inputs, how a provider is called
on them, the work model that turns a time into a throughput, its sweeps and design targets.
One `BenchSpec` per kernel, held by the kernel's `KernelSpec.bench` (suites/<kernel>/)."""

from __future__ import annotations

import hashlib
import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from ligerbench.bench.ceilings import Rate
from ligerbench.cases import DTYPES, IGNORE_PATTERNS, Case, generator_for


@dataclass
class BenchInputs:
    positional: list[torch.Tensor]  # the provider's positional arguments, in order
    leaves: list[torch.Tensor]  # those of them that receive gradients (requires_grad=True)
    options: dict = field(default_factory=dict)  # keyword arguments, filtered per provider
    # the scalar backward starts from, given the provider's output; None: the loss it returns
    # (the first element of a tuple). A kernel with several outputs and no loss of its own (per-
    # token log-probs and entropy) weights each by an upstream gradient drawn with the inputs:
    # (out * upstream).sum() is what autograd would hand backward, at the cost of one small
    # elementwise pass, the same for every provider
    objective: Callable[[object], torch.Tensor] | None = None


def everywhere(case: Case) -> bool:
    return True


@dataclass(frozen=True)
class Target:
    """A figure our kernel must reach (docs/performance.md, design targets), checked in every run
    that measures a point it applies to: a record with the limit and a pass/fail verdict.

    The limit at a point is the smallest of `limit` (a number, or a function of the case, e.g.
    the bytes of the gradients), `factor` x the best of `peers` measured at the same point of
    the same run ("no slower than torch.compile") and `of_floor` x the floor time at the
    ceiling measured at the start of the run. A target that needs a peer the run did not
    measure at that point is not judged: its row says so (verdict skip), never pass."""

    providers: tuple[str, ...]  # our providers the target applies to
    metric: str  # "time_ms" (mode full) or "extra_mib"
    source: str
    applies: Callable[[Case], bool] = everywhere  # the points it is checked at
    limit: float | Callable[[Case], float] = math.inf
    peers: tuple[str, ...] = ()
    factor: float = 1.0
    # time targets only: at most this many times the floor, the work at the run's measured
    # ceiling (work / (ceiling * rate.scale) ms: e.g. lp's 3 passes over the logits at the copy
    # rate); None: no floor term
    of_floor: float | None = None


def at_shape(n: int, v: int, h: int = 0) -> Callable[[Case], bool]:
    """A target's `applies` for one shape."""
    return lambda case: (case.n, case.v, case.get("h", 0)) == (n, v, h)


def at_point(**fields) -> Callable[[Case], bool]:
    """A target's `applies` for the points whose case has these field values (e.g. the shape, dtype
    and rank count of a vocab-parallel target)."""
    return lambda case: all(getattr(case, k) == v for k, v in fields.items())


def no_slower_at_its_memory(ours: str, peer: str, *, time_source: str, memory_source: str) -> tuple[Target, ...]:
    """The two targets of a setting of ours made to use the memory a peer uses (a budget that
    brings its extra memory to about the peer's): no slower than the peer and no more extra
    memory than it, both judged in the same run, each under its own words."""
    return (
        Target((ours,), metric="time_ms", peers=(peer,), factor=1.0, source=time_source),
        Target((ours,), metric="extra_mib", peers=(peer,), factor=1.0, source=memory_source),
    )


def design_target(kernel: str) -> str:
    """A target's `source`, up to what it says: the kernel's row of the design targets in
    docs/performance.md, which gives the limit and why."""
    return f"design target (docs/performance.md, {kernel})"


@dataclass(frozen=True)
class SweepPoint:
    """One x value of a sweep: its label on the axis, its numeric position, and its case."""

    label: str
    x: float
    case: Case


# (dtype, tokens or None, smoke) -> the sweep's points; `tokens` is N of the point, or the
# largest N of a sweep over N
Sweep = Callable[[str, "int | None", bool], list[SweepPoint]]


@dataclass(frozen=True)
class BenchSpec:
    kernel: str
    make_inputs: Callable[[Case, int, torch.device], BenchInputs]
    # work(case, mode) -> the fewest bytes (or FLOPs) a step of that mode must move (or do)
    work: Callable[[Case, str], float]
    work_formula: str  # the model, as printed beside the numbers
    # how work per ms reads as a rate, and the ceiling it is a share of: ceilings.COPY (bytes, GB/s
    # of the copy ceiling) or ceilings.MATMUL (FLOPs, TFLOP/s of the matmul ceiling)
    rate: Rate
    sweeps: dict[str, Sweep] = field(default_factory=dict)  # name -> points; the first is the default
    # registered providers left out unless named with --provider, with the reason
    excluded: dict[str, str] = field(default_factory=dict)
    # providers that run only in one sweep (e.g. ours over memory budgets in `budget`): sweep ->
    # their names; left out of every other sweep unless named with --provider
    sweep_only: dict[str, tuple[str, ...]] = field(default_factory=dict)
    targets: tuple[Target, ...] = ()
    inputs: str = "random normal, ~10% of targets ignored, reduction mean"  # as the report states them
    # the kernel's call is collective (vocab-parallel): it runs only on real ranks, `bench --nproc
    # N`, every rank timing its own share (make_inputs draws this rank's part of the problem)
    distributed: bool = False


def device_generator(case: Case, seed: int, device: torch.device) -> torch.Generator:
    """Seeded from the run seed and the case id, like cases.generator_for, but on the device:
    drawing 2e9 logits on the CPU and copying them over would take longer than timing them."""
    digest = hashlib.sha256(f"{seed}:{case.id}".encode()).digest()
    return torch.Generator(device=device).manual_seed(int.from_bytes(digest[:8], "little") & (2**63 - 1))


def element_bytes(case: Case) -> int:
    """Bytes per element of the case dtype: what the byte and memory models count in."""
    return torch.empty((), dtype=DTYPES[case.dtype]).element_size()


def drawn_targets(case: Case, g: torch.Generator, ignore_index: int, ignored: torch.Tensor) -> torch.Tensor:
    """N targets drawn from `g` on the device of `ignored`, `ignore_index` at the ignored rows: every
    loss bench draws them so, after its own tensors (the draws' order keeps each bench's inputs)."""
    target = torch.randint(0, case.v, (case.n,), generator=g, device=ignored.device)
    return torch.where(ignored, torch.full_like(target, ignore_index), target)


def ignored_rows(case: Case, seed: int, device: torch.device) -> tuple[int, torch.Tensor]:
    """(ignore_index, mask of ignored rows) of the case's ignore pattern, drawn on the CPU from the
    case's own generator (N booleans: cheap) and moved to the device."""
    ignore_index, pattern = IGNORE_PATTERNS[case.ignore_pattern]
    return ignore_index, pattern(case.n, generator_for(case, seed)).to(device)


def call(fn: Callable, inputs: BenchInputs) -> torch.Tensor:
    """fn(*positional, **options) -> the loss (the first element when it returns a tuple).
    Options the callable does not name are left out, so a provider with fewer keywords (or
    other names for them) is still called with everything it accepts."""
    out = fn(*inputs.positional, **accepted(fn, inputs.options))
    if inputs.objective is not None:
        return inputs.objective(out)
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


def on_ranks(points: list[SweepPoint], world: int) -> list[SweepPoint]:
    """A distributed kernel's sweep points split over `world` ranks (`bench --nproc N`): the
    case's world is part of its id, so the records say how many ranks shared the problem."""
    return [SweepPoint(p.label, p.x, p.case.replace(world=world)) for p in points]
