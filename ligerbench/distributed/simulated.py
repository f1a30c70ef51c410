"""Ranks simulated in one process: each rank is a thread, and a `SimulatedGroup` gives them the
collectives a vocab-parallel op uses (rank(), size(), all_gather_into_tensor(out, inp) and
all_reduce(t), a sum), with torch.distributed's semantics: every rank passes its tensor, every
rank receives all of them in rank order (or their sum).

Only one rank computes at a time (a turn lock, released only while a rank waits inside a
collective), so the ranks' work is serialised as if each took its turn: Triton's interpreter,
which is not thread-safe, runs in one thread at a time. Every wait is bounded (`timeout_s`) and a
rank that raises breaks the barrier, so the others stop at once instead of waiting: a simulated
run never hangs.

This is how selftest and the in-process `verify --kernel vp_ce` run the distributed kernels;
`verify --nproc N` runs the same cases on real process groups (ligerbench/distributed/launch.py).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import torch


class SimulatedWorld:
    """A group's shared state. Groups of one simulated world (the whole world and its subgroups)
    share one turn lock: one thread computes at a time, whichever group it is waiting in."""

    def __init__(self, size: int, timeout_s: float = 60.0, turn: threading.Lock | None = None):
        self.size = size
        self.timeout_s = timeout_s
        self.barrier = threading.Barrier(size, timeout=timeout_s)
        self.turn = turn if turn is not None else threading.Lock()
        self.slots: list[torch.Tensor | None] = [None] * size


class SimulatedGroup:
    """One rank's view of a SimulatedWorld. A subgroup's view also knows the rank's place in
    the whole world (`world_rank`, what `torch.distributed.get_rank()` returns) and the whole
    world's group (`world_group`, what `group=None` means), so that code which confuses the
    two can be run, and caught, in one process."""

    def __init__(self, world: SimulatedWorld, rank: int, *, world_rank: int | None = None, world_group=None):
        self.world = world
        self._rank = rank
        self.world_rank = rank if world_rank is None else world_rank
        self.world_group = self if world_group is None else world_group
        self.holding = False  # this rank holds the turn

    def rank(self) -> int:
        return self._rank

    def size(self) -> int:
        return self.world.size

    def _wait(self) -> None:
        w = self.world
        self.holding = False
        w.turn.release()
        try:
            w.barrier.wait()
        finally:
            if not w.turn.acquire(timeout=w.timeout_s):
                raise TimeoutError("a simulated rank did not give its turn back")
            self.holding = True

    def all_gather_into_tensor(self, out: torch.Tensor, inp: torch.Tensor) -> None:
        w = self.world
        w.slots[self._rank] = inp.detach().clone()
        self._wait()  # every rank has deposited
        for r, t in enumerate(w.slots):
            if t is None or t.shape != inp.shape:
                raise RuntimeError(f"simulated all_gather: rank {r} passed {None if t is None else tuple(t.shape)}")
            out[r].copy_(t)
        self._wait()  # every rank has read: the slots may be reused
        w.slots[self._rank] = None

    def all_reduce(self, t: torch.Tensor) -> None:
        """t <- the sum of every rank's t, in place, the same bits on every rank: summed in rank
        order in float32 (float64 for float64), and a 16-bit t rounded to its dtype after every
        addition, as each hop of NCCL's ring rounds what it passes on (a kernel that reduces a
        16-bit gradient over 3 or more ranks loses those digits on GPUs too)."""
        w = self.world
        w.slots[self._rank] = t.detach().clone()
        self._wait()  # every rank has deposited
        acc = torch.float64 if t.dtype == torch.float64 else torch.float32
        total = torch.zeros(t.shape, dtype=acc, device=t.device)
        for r, s in enumerate(w.slots):
            if s is None or s.shape != t.shape or s.dtype != t.dtype:
                got = None if s is None else (tuple(s.shape), s.dtype)
                mine = (tuple(t.shape), t.dtype)
                raise RuntimeError(f"simulated all_reduce: rank {r} passed {got}, rank {self._rank} {mine}")
            total += s.to(acc)
            if t.dtype in (torch.bfloat16, torch.float16):
                total = total.to(t.dtype).to(acc)
        self._wait()  # every rank has read: the slots may be reused
        w.slots[self._rank] = None
        t.copy_(total)


def run_ranks(
    size: int, fn: Callable[[int, Any], Any], *, timeout_s: float = 60.0, groups: list[list[int]] | None = None
) -> list[Any]:
    """fn(rank, group) on `size` simulated ranks; their results in rank order. The first
    exception raised by a rank (not the BrokenBarrierError it caused in the others) is re-raised.

    `groups`: the world's ranks split into subgroups (each a list of world ranks, every rank in
    exactly one); then fn gets the rank's place in its subgroup and the subgroup's view, as a
    caller on a mesh hands a kernel its tensor-parallel group. None: one group, the world."""
    groups = [list(range(size))] if groups is None else groups
    if sorted(r for g in groups for r in g) != list(range(size)):
        raise ValueError(f"subgroups {groups} must hold every rank of {size} exactly once")
    turn = threading.Lock()
    world = SimulatedWorld(size, timeout_s, turn)
    subworlds = [world] if len(groups) == 1 and groups[0] == list(range(size)) else [
        SimulatedWorld(len(g), timeout_s, turn) for g in groups
    ]  # fmt: skip
    results: list[Any] = [None] * size
    errors: list[BaseException | None] = [None] * size

    def abort_all() -> None:
        for w in {id(w): w for w in (world, *subworlds)}.values():
            w.barrier.abort()

    def body(rank: int) -> None:
        which = next(i for i, g in enumerate(groups) if rank in g)
        whole = SimulatedGroup(world, rank)
        if subworlds[which] is world:
            group, place = whole, rank
        else:
            place = groups[which].index(rank)
            group = SimulatedGroup(subworlds[which], place, world_rank=rank, world_group=whole)
        if not turn.acquire(timeout=timeout_s):
            errors[rank] = TimeoutError(f"simulated rank {rank} never got its turn")
            abort_all()
            return
        group.holding = whole.holding = True
        try:
            results[rank] = fn(place, group)
        except BaseException as exc:  # noqa: BLE001 -- handed to the caller below
            errors[rank] = exc
            abort_all()
        finally:
            if group.holding and whole.holding:
                group.holding = whole.holding = False
                turn.release()

    threads = [threading.Thread(target=body, args=(r,), daemon=True) for r in range(size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout_s * 4)
    if any(t.is_alive() for t in threads):
        abort_all()
        raise TimeoutError(f"simulated ranks still running after {timeout_s * 4:.0f} s")
    first = [e for e in errors if e is not None and not isinstance(e, threading.BrokenBarrierError)]
    if first:
        raise first[0]
    if any(e is not None for e in errors):
        raise next(e for e in errors if e is not None)
    return results
