"""What one verification case is, and how its inputs are drawn.

A case names every choice (shape, dtype, reduction, upstream gradient, ignore pattern, loss
options, kind of logits); its inputs are drawn fresh from a generator seeded by the run's seed
and the case id, so a rerun with the same seed reproduces every number, and no two cases share
inputs.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from ligerbench.axes import Axis, case_id, fill

DTYPES: dict[str, torch.dtype] = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


class Params(Mapping):
    """A case's parameters: a frozen, hashable mapping, in the kernel's declared axis order."""

    __slots__ = ("_items",)

    def __init__(self, items: Mapping[str, Any] | Iterable[tuple[str, Any]] = ()):
        object.__setattr__(self, "_items", tuple(dict(items).items()))

    def __getitem__(self, key: str) -> Any:
        for k, v in self._items:
            if k == key:
                return v
        raise KeyError(key)

    def __iter__(self):
        return (k for k, _ in self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return hash(self._items)

    def __eq__(self, other) -> bool:
        return dict(self) == dict(other) if isinstance(other, Mapping) else NotImplemented

    def __setattr__(self, name, value):
        raise AttributeError("Params is frozen")

    def __repr__(self) -> str:
        return f"Params({dict(self._items)!r})"


@dataclass(frozen=True)
class Case:
    """One verification case: a kernel and its parameters, one per axis the kernel declares
    (KernelSpec.axes). `case.reduction` reads a parameter; `case.get("world", 0)` one a kernel
    may lack. Build one with `Case.of(kernel, axes, n=16, ...)` (the axes' defaults fill the rest)."""

    kernel: str
    params: Params
    # the kernel's axes: they order the params and write the id; not part of a case's identity
    axes: tuple[Axis, ...] = field(default=(), compare=False, repr=False)

    @classmethod
    def of(cls, kernel: str, axes: tuple[Axis, ...], **values) -> Case:
        return cls(kernel, Params(fill(kernel, axes, values)), tuple(axes))

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name in ("kernel", "params", "axes"):
            raise AttributeError(name)
        try:
            return self.params[name]
        except KeyError:
            raise AttributeError(f"a case of kernel {self.kernel!r} has no parameter {name!r}") from None

    def get(self, name: str, default: Any = None) -> Any:
        return self.params.get(name, default)

    @property
    def id(self) -> str:
        return case_id(self.kernel, self.params, self.axes)

    def replace(self, **changes) -> Case:
        return Case.of(self.kernel, self.axes, **{**self.params, **changes})


def generator_for(case: Case, seed: int) -> torch.Generator:
    """A CPU generator seeded from the run seed and the case id (stable across processes)."""
    digest = hashlib.sha256(f"{seed}:{case.id}".encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") & (2**63 - 1))


def device_generator(g: torch.Generator, device: torch.device | str) -> torch.Generator:
    """Where the large inputs of a case are drawn: on CPU `g` itself (so CPU draws, and the
    committed CPU baselines, are what they always were); on a GPU a generator there, seeded by
    one draw from `g`. Drawing 8192 x 131072 normals on the host took 0.25 s a case, 119 of the
    151 s of a warm `verify --kernel ce --preset full` on an H100. A seed gives the same inputs
    on one device type, not the same on CPU and GPU."""
    device = torch.device(device)
    if device.type == "cpu":
        return g
    seed = int(torch.randint(0, 2**62, (1,), generator=g))
    return torch.Generator(device=device).manual_seed(seed)


# ----------------------------------------------------------------------------- ignore patterns
# Each pattern gives the ignore_index it uses and a boolean mask of ignored rows. Several
# ignore_index values are used on purpose: the default -100, another negative value, and one
# that is also a valid class id.


def _random_fraction(frac: float) -> Callable[[int, torch.Generator], torch.Tensor]:
    return lambda n, g: torch.rand(n, generator=g) < frac


def _run(start: float, stop: float) -> Callable[[int, torch.Generator], torch.Tensor]:
    def mask(n: int, g: torch.Generator) -> torch.Tensor:
        m = torch.zeros(n, dtype=torch.bool)
        m[int(n * start) : int(n * stop)] = True
        return m

    return mask


IGNORE_PATTERNS: dict[str, tuple[int, Callable[[int, torch.Generator], torch.Tensor]]] = {
    "none": (-100, lambda n, g: torch.zeros(n, dtype=torch.bool)),
    "random_10": (-100, _random_fraction(0.10)),
    "random_90": (-1, _random_fraction(0.90)),  # a negative ignore_index other than -100
    "leading_run": (-100, _run(0.0, 0.6)),  # a prompt mask: docs/bugs.md, bug 1
    "middle_run": (-100, _run(0.3, 0.7)),
    "all": (-100, lambda n, g: torch.ones(n, dtype=torch.bool)),
    "index_is_class": (0, _random_fraction(0.10)),  # ignore_index 0 is also class 0
}

# ----------------------------------------------------------------------------- loss options
# Values are chosen so each term is a visible share of the gradient: a z-loss scale of 1e-4
# (common in training) moves the gradient by ~0.1%, under bf16's rounding, and a check on it
# could not fail; 0.05 moves it by tens of percent.
SOFTCAP = 5.0
OPTIONS: dict[str, dict] = {
    "plain": {},
    "label_smoothing": {"label_smoothing": 0.1},
    "softcap": {"softcap": SOFTCAP},
    "z_loss": {"z_loss_scale": 0.05},
    "class_weight": {"class_weight": True},
    "token_weight": {"token_weight": True},
    "smoothing_class_weight": {"label_smoothing": 0.1, "class_weight": True},
    "all": {
        "label_smoothing": 0.1,
        "softcap": SOFTCAP,
        "z_loss_scale": 0.05,
        "class_weight": True,
        "token_weight": True,
    },
}

LOGITS_KINDS = ("normal", "confident", "large")  # crossed by the grids; "far_below" in a few cases of its own
REDUCTIONS = ("none", "mean", "sum")

# ----------------------------------------------------------------------------- upstream gradients
# The gradient backward receives, per reduction, each standing for a real caller:
#   ones         loss.backward() (a scalar 1, or all-ones rows);
#   random       rows (none) or a scalar (sum) drawn away from 1: a weighted sum of losses;
#   masked       (none) random rows with exact zeros on a long run and on scattered rows:
#                (loss * mask).sum() after a per-token loss, padding and prompt masks;
#   accum        a scalar 1/8: loss / accumulation_steps before backward;
#   grad_scaler  a scalar 65536: torch.amp.GradScaler's default initial scale.
ACCUM_SCALE = 1.0 / 8.0
GRAD_SCALER_SCALE = 65536.0
UPSTREAMS: dict[str, tuple[str, ...]] = {
    "none": ("ones", "random", "masked"),
    "mean": ("ones", "accum", "grad_scaler"),
    "sum": ("ones", "accum", "grad_scaler", "random"),
}
# A random upstream this close to 1 (scalar, or every row) would hide a bug that ignores it.
NEAR_ONE = 0.1
_MAX_DRAWS = 100


def draw_upstream(case: Case, shape: tuple[int, ...], g: torch.Generator) -> torch.Tensor:
    """The float32 upstream gradient of one case: a scalar, or `shape` (the target's) for none."""
    if case.upstream not in UPSTREAMS.get(case.reduction, ()):
        raise ValueError(
            f"upstream {case.upstream!r} is not one for reduction {case.reduction!r}; "
            f"expected one of {UPSTREAMS.get(case.reduction)}"
        )
    if case.upstream == "ones":
        # reduction="none": what `loss.sum().backward()` hands backward, a 1 expanded over the rows
        # (stride 0, one element of storage), not a materialised tensor of ones: a kernel that reads
        # row i of its upstream at offset i reads past it (ours did: docs/bugs.md, bug 20)
        return torch.ones(()).expand(shape) if case.reduction == "none" else torch.tensor(1.0)
    if case.upstream == "accum":
        return torch.tensor(ACCUM_SCALE)
    if case.upstream == "grad_scaler":
        return torch.tensor(GRAD_SCALER_SCALE)
    if case.reduction != "none":  # a random scalar in [0.5, 1.5], redrawn when near 1
        return redraw(lambda: torch.rand((), generator=g) + 0.5, lambda u: abs(float(u) - 1.0) >= NEAR_ONE, case)
    n = 1
    for d in shape:
        n *= d

    def rows() -> torch.Tensor:
        up = torch.rand(n, generator=g) * 2.0 - 0.5  # in [-0.5, 1.5): signs and sizes vary
        if case.upstream == "masked":
            # exact zeros: about a quarter of the rows, and (from 3 rows) a run over the middle third
            zero = torch.rand(n, generator=g) < 0.25
            if n >= 3:
                zero[n // 3 : 2 * n // 3] = True
            up = torch.where(zero, 0.0, up)
        return up

    def informative(up: torch.Tensor) -> bool:
        live = up[up != 0]
        if len(live) == 0:  # one masked row: the case checks that its gradient is exactly zero
            return n == 1
        away = bool(((live - 1.0).abs() >= NEAR_ONE).any())  # some row carries a value away from 1
        return away and (case.upstream != "masked" or n < 2 or bool((up == 0).any()))

    return redraw(rows, informative, case).reshape(shape)


def redraw(draw: Callable[[], torch.Tensor], ok: Callable[[torch.Tensor], bool], case: Case) -> torch.Tensor:
    """Draw until `ok` (a seed must not make a case degenerate); give up loudly after many draws."""
    for _ in range(_MAX_DRAWS):
        value = draw()
        if ok(value):
            return value
    raise ValueError(f"case {case.id}: no non-degenerate draw in {_MAX_DRAWS} tries")


def draw_ignored(case: Case, n: int, g: torch.Generator, target: torch.Tensor | None = None) -> torch.Tensor:
    """The ignored rows of a case. A random pattern is redrawn until some row is counted (and,
    with 2 rows or more, some row ignored): at N=1, random_90 would otherwise ignore everything
    nine seeds in ten, and the case would check nothing but NaN. Fixed patterns ('all', runs) are
    what they say."""
    _, pattern = IGNORE_PATTERNS[case.ignore_pattern]
    ignore_index = IGNORE_PATTERNS[case.ignore_pattern][0]

    def draw() -> torch.Tensor:
        m = pattern(n, g)
        if case.ignore_pattern == "index_is_class" and target is not None:
            m = m | (target == ignore_index)  # rows whose target is class `ignore_index`
        return m

    if case.ignore_pattern not in RANDOM_PATTERNS:
        return draw()
    return redraw(draw, lambda m: bool((~m).any()) and (n < 2 or bool(m.any())), case)


RANDOM_PATTERNS = ("random_10", "random_90")

# ----------------------------------------------------------------------------- layouts
# How the input a provider receives is laid out is an axis of each kernel (suites/ce/axes.py,
# suites/flce/axes.py: each layout standing for a real caller); these helpers build them.
VOCAB_PAD = 64  # padded_vocab rounds V up to a multiple of this, plus one more multiple


def batch_split(n: int) -> tuple[int, int]:
    """[B, T] for n tokens in a 3-D layout: B the largest divisor of n up to 4 (B > 1 where n allows)."""
    b = max(d for d in range(1, min(n, 4) + 1) if n % d == 0)
    return b, n // b


def batched(x: torch.Tensor) -> torch.Tensor:
    """x [N, ...] as [B, T, ...] (batch_split): the 3-D layout a model hands its tokens in."""
    return x.reshape(*batch_split(x.shape[0]), *x.shape[1:])


def draw_logits(kind: str, n: int, v: int, target: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """float32 logits [n, v] of one kind (the caller casts to the case dtype), on g's device."""
    x = torch.randn(n, v, generator=g, device=g.device)
    if kind == "normal":
        return x
    if kind == "large":  # large magnitude and spread: softmax is nearly one-hot
        return 40.0 * x + 100.0
    if kind == "confident":
        # The target's logit sits log(1/delta) above the log-sum-exp of the others, so
        # 1 - softmax(x)_y ~ delta, drawn log-uniform in [1e-6, 1e-2]: docs/bugs.md, bug 6.
        safe, rows = target.clamp(0, v - 1).to(x.device), torch.arange(n, device=x.device)
        others = x.clone()
        others[rows, safe] = float("-inf")
        lse_others = torch.logsumexp(others, dim=1)
        delta = 10.0 ** (-2.0 - 4.0 * torch.rand(n, generator=g, device=g.device))
        x[rows, safe] = lse_others - torch.log(delta)
        return x
    if kind == "far_below":
        # every logit below -1e4 (verl #7439: a running max started at 0, not -inf, underflows
        # every exponential to 0 there): the softmax is shift-invariant, the truth as for normal
        return x.clamp(-5.0, 5.0) - (1e4 + 5.0)
    raise ValueError(f"unknown logits kind {kind!r}; expected one of {LOGITS_KINDS + ('far_below',)}")
