"""The sweeps of `ligerbench bench`: which shapes each sweep visits, shared by every kernel.

Sizes are chosen so a whole sweep of every peer runs in under 10 minutes on an H100:
N=8192 tokens is the anchors' size (a typical micro-batch of 8 x 1K or 1 x 8K tokens), and the
tokens sweep stops at 16K by default because eager fp32 logits at 32K x 128256 need ~50 GB of
scratch; `--tokens 32768` asks for it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from ligerbench.bench.spec import Sweep, SweepPoint
from ligerbench.cases import Case

# name -> (hidden size H, vocabulary V) of the model's output head
HEADS: dict[str, tuple[int, int]] = {
    "llama3-8b": (4096, 128256),
    "gemma2-2b": (2304, 256000),
    "qwen2.5-7b": (3584, 152064),
    "mistral-7b": (4096, 32768),
}
VOCABS = (32000, 128256, 152064, 256000)  # Llama-2/Mistral-v0.1, Llama-3, Qwen2.5, Gemma
TOKENS = (1024, 2048, 4096, 8192, 16384, 32768)
DEFAULT_TOKENS = 8192  # N of the vocab and heads sweeps
DEFAULT_MAX_TOKENS = 16384  # last N of the tokens sweep
TOKENS_SWEEP_HEAD = "llama3-8b"  # the shape the tokens sweep holds fixed

# --smoke: tiny shapes for Triton's interpreter on CPU (seconds, not a measurement). Odd sizes
# on purpose, so masking of partial blocks runs.
SMOKE_TOKENS = (8, 16)
SMOKE_N = 8
SMOKE_VOCABS = (33, 96)
SMOKE_HEADS: dict[str, tuple[int, int]] = {"llama3-8b": (16, 96), "mistral-7b": (16, 40)}

SWEEPS = ("tokens", "vocab", "heads")


def sweep_points(
    make: Callable[..., Case], sweep: str, *, fused: bool, dtype: str, tokens: int | None = None, smoke: bool = False
) -> list[SweepPoint]:
    """The cases of one sweep. `tokens` is N for the vocab and heads sweeps, and the largest N
    of the tokens sweep. A kernel without a hidden size (`fused=False`) visits the heads'
    vocabularies in its heads sweep. `make` builds one of the kernel's cases (its axes.case)."""
    if sweep not in SWEEPS:
        raise ValueError(f"unknown sweep {sweep!r}; expected one of {SWEEPS}")
    heads = SMOKE_HEADS if smoke else HEADS
    n = tokens or (SMOKE_N if smoke else DEFAULT_TOKENS)
    # bench inputs are the reference tables' inputs (docs/performance.md): random normal logits,
    # ~10% of targets ignored, mean
    base = dict(dtype=dtype, reduction="mean", ignore_pattern="random_10")

    def shape(n_: int, h: int, v: int) -> Case:
        return make(**base, n=n_, v=v, **({"h": h} if fused else {}))

    if sweep == "tokens":
        h, v = heads[TOKENS_SWEEP_HEAD] if TOKENS_SWEEP_HEAD in heads else next(iter(heads.values()))
        if smoke:
            ns = SMOKE_TOKENS
        else:
            top = tokens or DEFAULT_MAX_TOKENS
            ns = tuple(t for t in TOKENS if t <= top) or (top,)
        return [SweepPoint(str(t), float(t), shape(t, h, v)) for t in ns]
    if sweep == "vocab":
        h = heads[TOKENS_SWEEP_HEAD][0]
        vocabs = SMOKE_VOCABS if smoke else VOCABS
        return [SweepPoint(str(v), float(v), shape(n, h, v)) for v in vocabs]
    return [SweepPoint(name, float(i), shape(n, h, v)) for i, (name, (h, v)) in enumerate(heads.items())]


def heads_points(
    make: Callable[..., Case], names: tuple[str, ...], dtype: str, tokens: int | None, smoke: bool
) -> list[SweepPoint]:
    """The heads sweep restricted to `names` (the smoke heads stand in for them under --smoke)."""
    points = sweep_points(make, "heads", fused=True, dtype=dtype, tokens=tokens, smoke=smoke)
    return points if smoke else [p for p in points if p.label in names]


def sweeps(make: Callable[..., Case], *, fused: bool, first: str) -> dict[str, Sweep]:
    """The shared sweeps for one kernel, `first` (its default) first."""
    order = (first, *(s for s in SWEEPS if s != first))
    return {name: functools.partial(_points, make, name, fused) for name in order}


def _points(
    make: Callable[..., Case], sweep: str, fused: bool, dtype: str, tokens: int | None, smoke: bool
) -> list[SweepPoint]:
    return sweep_points(make, sweep, fused=fused, dtype=dtype, tokens=tokens, smoke=smoke)
