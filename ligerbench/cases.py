"""What one verification case is, and how its inputs are drawn.

A case names every choice (shape, dtype, reduction, upstream gradient, ignore pattern, loss
options, kind of logits); its inputs are drawn fresh from a generator seeded by the run's seed
and the case id, so a rerun with the same seed reproduces every number, and no two cases share
inputs.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable
from dataclasses import dataclass

import torch

DTYPES: dict[str, torch.dtype] = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass(frozen=True)
class Case:
    kernel: str
    n: int  # tokens
    v: int  # classes (vocab)
    dtype: str = "fp32"
    reduction: str = "mean"
    upstream: str = "ones"  # upstream gradient: "ones", or "random" (non-uniform, reduction none)
    ignore_pattern: str = "random_10"
    option: str = "plain"
    logits: str = "normal"
    h: int = 0  # hidden size, fused linear kernels only
    bias: bool = False  # fused linear kernels only
    # vocab-parallel kernels only: the ranks the vocab is split over (0: not sharded), and where
    # the targets sit ("random", or "edges": on the first and last class of some shard)
    world: int = 0
    targets: str = "random"

    @property
    def id(self) -> str:
        parts = [self.kernel, f"n{self.n}", f"v{self.v}"]
        if self.h:
            parts.append(f"h{self.h}" + ("b" if self.bias else ""))
        parts += [self.dtype, self.reduction, f"up-{self.upstream}", self.ignore_pattern, self.option, self.logits]
        if self.world:  # only vocab-parallel cases: every other case id stays as it was
            parts += [f"w{self.world}", f"targets-{self.targets}"]
        return "/".join(parts)

    def replace(self, **changes) -> Case:
        return dataclasses.replace(self, **changes)

    def params(self) -> dict:
        return dataclasses.asdict(self)


def generator_for(case: Case, seed: int) -> torch.Generator:
    """A CPU generator seeded from the run seed and the case id (stable across processes)."""
    digest = hashlib.sha256(f"{seed}:{case.id}".encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") & (2**63 - 1))


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

LOGITS_KINDS = ("normal", "confident", "large")
REDUCTIONS = ("none", "mean", "sum")


def draw_logits(kind: str, n: int, v: int, target: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """float32 logits [n, v] of one kind (the caller casts to the case dtype)."""
    x = torch.randn(n, v, generator=g)
    if kind == "normal":
        return x
    if kind == "large":  # large magnitude and spread: softmax is nearly one-hot
        return 40.0 * x + 100.0
    if kind == "confident":
        # The target's logit sits log(1/delta) above the log-sum-exp of the others, so
        # 1 - softmax(x)_y ~ delta, drawn log-uniform in [1e-6, 1e-2]: docs/bugs.md, bug 6.
        safe = target.clamp(0, v - 1)
        others = x.clone()
        others[torch.arange(n), safe] = float("-inf")
        lse_others = torch.logsumexp(others, dim=1)
        delta = 10.0 ** (-2.0 - 4.0 * torch.rand(n, generator=g))
        x[torch.arange(n), safe] = lse_others - torch.log(delta)
        return x
    raise ValueError(f"unknown logits kind {kind!r}; expected one of {LOGITS_KINDS}")
