"""The ranks a bench plan runs on: this process alone (`LOCAL`), or every rank of the default
torch.distributed group (`Group`, for `bench --nproc N`, ligerbench/distributed/).

    ranks = Group(device)      # after init_process_group
    ranks.sync()               # every rank here before the next timed run
    ranks.max([t, m])          # [max over ranks of t, of m]: the slowest rank's time, the largest memory
    ranks.agree_unavailable(r) # a provider unavailable on any rank is skipped on every rank

Every rank runs the same provider on its own shard at the same time; a figure of the step is
the worst rank's (the step ends when its slowest rank does). Only rank 0 writes records.
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist

from ligerbench.distributed.progress import collective_failure

__all__ = ["LOCAL", "Group", "Local", "collective_failure"]  # collective_failure: the engine's import


class Local:
    """One process: nothing to meet, nothing to agree on."""

    rank = 0
    world = 1

    def sync(self) -> None:
        pass

    def max(self, values: list[float]) -> list[float]:
        return [float(v) for v in values]

    def agree_unavailable(self, reasons: dict[str, str | None]) -> dict[str, str | None]:
        return reasons


LOCAL = Local()


class Group:
    """Every rank of the default process group (gloo on CPU, NCCL on GPUs)."""

    def __init__(self, device: torch.device):
        self.device = device
        self.rank = dist.get_rank()
        self.world = dist.get_world_size()

    def sync(self) -> None:
        """All ranks here, the GPU idle: the next timed run starts on every rank together."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        dist.barrier()

    def max(self, values: list[float]) -> list[float]:
        """Elementwise max over the ranks. NaN (a figure a rank has none of, e.g. memory on CPU)
        does not compete (backends order NaN differently): NaN only where every rank has NaN."""
        t = torch.tensor([float(v) for v in values], dtype=torch.float64, device=self.device)
        t = torch.where(t.isnan(), -math.inf, t)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return [math.nan if v == -math.inf else v for v in t.tolist()]

    def agree_unavailable(self, reasons: dict[str, str | None]) -> dict[str, str | None]:
        """Why each provider is skipped (None: it runs), agreed by every rank: a provider that
        cannot load on one rank is skipped on all. Decided per rank, the ranks that run it would
        pair its collectives with the next provider's on the ranks that skipped it: out of step,
        timing one provider against another or waiting until the collective timeout."""
        names = list(reasons)
        if self.rank and any(reasons.values()):  # rank 0's reasons are in its skip rows already
            for name in names:
                if reasons[name]:
                    print(f"ligerbench: rank {self.rank}: {reasons[name]}", flush=True)
        missing = self.max([1.0 if reasons[n] else 0.0 for n in names])
        return {
            n: reasons[n] or (f"{n} cannot load on another rank (its reason is in launch.log)" if m else None)
            for n, m in zip(names, missing, strict=True)
        }
