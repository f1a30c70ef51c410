"""Timing a region of GPU work: warm-up, then the median and 20th/80th percentiles of many runs.

    from ligerbench.bench.timing import time_region
    t = time_region(lambda: x.copy_(y), device=torch.device("cuda"))   # Timing(median_ms=...)

Why not `triton.testing.do_bench` as is: it times `fn` whole, so a provider that destroys its
input would have to restore it inside the timed region. Here `setup()` runs before each timed
call, outside the timed region, in stream order; it restores inputs, clears gradients, or (for
`--mode backward`) runs the forward. The rest follows do_bench: one CUDA event pair per run,
and the L2 cache is flushed by zeroing a 256 MiB buffer before every run, so every run reads
its inputs from HBM whatever their size (this is stronger than rotating input copies, and
costs no memory per input).

The host is kept ahead of the GPU: before each run's start event a sleeping kernel is queued
that lasts longer than the host takes to issue the call, so the GPU never waits for Python
inside the timed region and the time is the GPU's work alone, as in a training loop whose
host runs ahead. (Without it, a call costing more host time than GPU time measures the host:
seen on the H100 at N=8192, V=32000, where our kernel's 0.48 ms read as 0.48 or 1.07 ms from
one machine to the next.) A call that synchronises with the host still shows its stall,
since the host waits there and issues the rest late. The host's own cost is measured apart
(`host_ms`: the time to issue one call, GPU idle at the start) and reported beside the time.

On CPU (only `--smoke`, through Triton's interpreter) the host clock is used; those numbers
are not a measurement and are marked so by the caller.

Over several ranks (`bench --nproc N`) every rank times the same collective call at once:
`agree(x)` returns the largest x over the ranks, so that every rank sleeps the same lead and
makes the same number of runs (a rank making one call more would wait for the others forever),
and the caller's `setup` meets the other ranks at a barrier before each run.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

L2_FLUSH_BYTES = 256 * 1024 * 1024  # do_bench's size: several times any current GPU's L2 (H100: 50 MB)
QUANTILES = (0.2, 0.5, 0.8)


@dataclass(frozen=True)
class Timing:
    median_ms: float
    p20_ms: float
    p80_ms: float
    runs: int
    host_ms: float = math.nan  # median host time to issue one call (CUDA only)


@dataclass(frozen=True)
class TimingBudget:
    """How long to warm up and measure. Runs = rep_ms / (estimated ms per run), clamped."""

    warmup_ms: float = 50.0
    rep_ms: float = 600.0
    min_runs: int = 10
    max_runs: int = 200


SMOKE_BUDGET = TimingBudget(warmup_ms=0.0, rep_ms=0.0, min_runs=2, max_runs=2)


def summarize(times_ms: list[float]) -> Timing:
    """Median and p20/p80 (linear interpolation, as do_bench's quantiles)."""
    if not times_ms:
        raise ValueError("no runs to summarize")
    q = torch.tensor(times_ms, dtype=torch.float64).quantile(torch.tensor(QUANTILES, dtype=torch.float64))
    return Timing(median_ms=float(q[1]), p20_ms=float(q[0]), p80_ms=float(q[2]), runs=len(times_ms))


def runs_for(estimate_ms: float, budget: TimingBudget) -> int:
    if estimate_ms <= 0:
        return budget.max_runs
    return int(min(budget.max_runs, max(budget.min_runs, budget.rep_ms / estimate_ms)))


def time_region(
    fn: Callable[[], object],
    *,
    device: torch.device,
    setup: Callable[[], None] = lambda: None,
    budget: TimingBudget = TimingBudget(),
    agree: Callable[[float], float] = lambda x: x,
) -> Timing:
    if device.type != "cuda":
        return _time_host(fn, setup, budget)
    return _time_cuda(fn, setup, budget, device, agree)


def _time_host(fn, setup, budget: TimingBudget) -> Timing:
    setup()
    fn()  # first call: compilation (the interpreter's, here)
    times = []
    for _ in range(max(1, budget.min_runs)):
        setup()
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return summarize(times)


def host_issue_ms(fn, setup, device: torch.device, runs: int = 10) -> float:
    """Median host time to issue one call of fn, the GPU idle when it starts."""
    times = []
    for _ in range(runs):
        setup()
        torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    torch.cuda.synchronize(device)
    return summarize(times).median_ms


def _sleep_cycles_per_ms(device: torch.device) -> float:
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    cycles = 1_000_000
    torch.cuda._sleep(cycles)  # first launch outside the measurement
    s.record()
    torch.cuda._sleep(cycles)
    e.record()
    torch.cuda.synchronize(device)
    return cycles / max(s.elapsed_time(e), 1e-3)


def _time_cuda(fn, setup, budget: TimingBudget, device: torch.device, agree: Callable[[float], float]) -> Timing:
    flush = torch.empty(L2_FLUSH_BYTES, dtype=torch.int8, device=device)
    lead_cycles = 0

    def timed(n: int) -> list[float]:
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        for s, e in zip(starts, ends, strict=True):
            setup()
            flush.zero_()
            if lead_cycles:
                torch.cuda._sleep(lead_cycles)  # the host issues fn while the GPU sleeps
            s.record()
            fn()
            e.record()
        torch.cuda.synchronize(device)
        return [s.elapsed_time(e) for s, e in zip(starts, ends, strict=True)]

    # First call compiles and autotunes (Triton, torch.compile): seconds, never counted.
    setup()
    fn()
    torch.cuda.synchronize(device)
    host = host_issue_ms(fn, setup, device)
    # a lead of twice the host's issue time (at least 1 ms) covers its run-to-run jitter
    lead_cycles = int(agree(max(1.0, 2.0 * host)) * _sleep_cycles_per_ms(device))
    estimate = agree(summarize(timed(3)).median_ms)
    # Warm-up: clocks up, allocator caches filled, for at least warmup_ms of work.
    timed(min(budget.max_runs, max(1, int(budget.warmup_ms / max(estimate, 1e-3)))))
    t = summarize(timed(runs_for(estimate, budget)))
    return Timing(t.median_ms, t.p20_ms, t.p80_ms, t.runs, host_ms=host)
