"""Where the ranks of a vocab-parallel case sit, and running one case on them: the shared part of
`vp_ce`, `vp_flce` and `vp_flp` (each kernel's spec gives what one rank does, what it hands
back and how the ranks' results make one outcome).

A case's `world` is the tensor-parallel size, the ranks the vocabulary is split over; its
`mesh` says how those ranks sit in the world of processes:
  flat         the whole world is the one tensor-parallel group (the kernel's group: the default);
  dp2          a 2 x world mesh, data parallel by tensor parallel: two replicas, each a
               contiguous tensor-parallel group ({0, 1} and {2, 3} at world 2), as
               `init_device_mesh(dev, (dp, tp))` lays them out;
  dp2_strided  the same mesh, transposed: strided tensor-parallel groups ({0, 2} and {1, 3}), as
               a (tp, dp) mesh lays them out and as Liger tests its tensor-parallel fused linear
               cross entropy (Liger-Kernel #1422, #1458).
On a mesh a rank's place in its tensor-parallel group differs from its place in the world:
code that takes the world rank for the group rank (a vocabulary offset computed from
`dist.get_rank()`) or the world's group for the kernel's group is wrong there and only there.
Every replica runs the whole global problem (so its truth is the one float64 reference), each
with its own group; the outcome holds every replica's results one after another on dim 0, and
the reference is repeated to match (`replicated`).

Under torch.distributed the world must have `Mesh.procs` ranks (`verify --nproc N` picks the
cases whose `procs` is N: KernelSpec.ranks); the subgroups are made once per layout, by every
rank in the same order (`dist.new_group` is collective over the world). In one process the
ranks run as threads (ligerbench/distributed/simulated.py), each replica with its own group.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.distributed as dist

from ligerbench.axes import Axis
from ligerbench.cases import Case
from ligerbench.distributed.simulated import run_ranks
from ligerbench.problems import Outcome

MESH = Axis(
    "mesh",
    "how the ranks the vocabulary is split over sit in the world of processes",
    ("flat", "dp2", "dp2_strided"),
    means={
        "flat": "the whole world is the tensor-parallel group",
        "dp2": "a data x tensor parallel mesh of 2 x world ranks, contiguous tensor-parallel groups ({0,1}, {2,3})",
        "dp2_strided": "the same mesh with strided tensor-parallel groups ({0,2}, {1,3}): Liger-Kernel #1422, #1458",
    },
    default="flat",
    tag="mesh-",
    hidden=("flat",),
)
REPLICAS = {"flat": 1, "dp2": 2, "dp2_strided": 2}


@dataclass(frozen=True)
class Mesh:
    tp: int  # the tensor-parallel size: the ranks the vocabulary is split over
    dp: int = 1  # replicas, each a tensor-parallel group of its own
    strided: bool = False  # a replica's ranks every dp-th of the world, not a contiguous run

    @classmethod
    def of(cls, case: Case) -> Mesh:
        mesh = case.get("mesh", "flat")
        if mesh not in REPLICAS:
            raise ValueError(f"unknown mesh {mesh!r}; expected one of {', '.join(REPLICAS)}")
        return cls(tp=case.world, dp=REPLICAS[mesh], strided=mesh.endswith("strided"))

    @property
    def procs(self) -> int:
        return self.tp * self.dp

    def world_rank(self, replica: int, place: int) -> int:
        return place * self.dp + replica if self.strided else replica * self.tp + place

    def position(self, world_rank: int) -> tuple[int, int]:
        """(replica, place in its tensor-parallel group) of a world rank."""
        if self.strided:
            return world_rank % self.dp, world_rank // self.dp
        return divmod(world_rank, self.tp)

    def groups(self) -> list[list[int]]:
        """Each replica's world ranks, in group-rank order."""
        return [[self.world_rank(d, t) for t in range(self.tp)] for d in range(self.dp)]


# The KernelSpec fields of a vocab-parallel kernel whose backward holds a collective (vp_flce's and
# vp_flp's: the hidden gradient's all-reduce): its ranks are simulated in one process on CPU only.
BACKWARD_COLLECTIVE = dict(
    simulated_devices=("cpu",),
    simulated_why="its backward holds a collective (the hidden gradient's all-reduce), and autograd runs every "
    "CUDA backward on one device thread, so one simulated rank would wait there for another forever.",
)


def procs_of(case: Case) -> int | None:
    """The processes a case runs on under `verify --nproc N` (KernelSpec.ranks)."""
    return Mesh.of(case).procs


_TORCH_GROUPS: dict[tuple, object] = {}


def _torch_group(mesh: Mesh, replica: int):
    """This process's tensor-parallel group: None (the default group) on a flat mesh; else the
    replica's subgroup, every replica's made once, by every rank in the same order."""
    if mesh.dp == 1:
        return None
    key = (dist.get_world_size(), tuple(map(tuple, mesh.groups())))
    if key not in _TORCH_GROUPS:
        _TORCH_GROUPS[key] = [dist.new_group(ranks) for ranks in mesh.groups()]
    return _TORCH_GROUPS[key][replica]


def run_on_mesh(
    mesh: Mesh,
    one: Callable[[int, object], dict],
    exchange: Callable[[dict, Mesh], list[dict]],
    outcome: Callable[[list[dict]], Outcome],
) -> Outcome:
    """One case on every rank of `mesh`:
        one(place, group) -> dict         a rank's call: its place in its group and the group;
        exchange(mine, mesh) -> [dict]    under torch.distributed: every rank's dict, in world-rank
                                          order, gathered over the whole world;
        outcome([dict]) -> Outcome        one replica's ranks, in group-rank order, as one outcome.
    Under torch.distributed this process is one rank of the world; otherwise every rank runs here."""
    if dist.is_available() and dist.is_initialized():
        world = dist.get_world_size()
        if world != mesh.procs:
            raise ValueError(
                f"the case runs on {mesh.procs} ranks ({mesh.dp} x {mesh.tp} tensor-parallel) but the world has {world}"
            )
        replica, place = mesh.position(dist.get_rank())
        everyone = exchange(one(place, _torch_group(mesh, replica)), mesh)
    else:
        everyone = run_ranks(mesh.procs, one, groups=None if mesh.dp == 1 else mesh.groups())
    return replicas_joined([outcome([everyone[r] for r in ranks]) for ranks in mesh.groups()])


def replicas_joined(outcomes: list[Outcome]) -> Outcome:
    """The replicas' outcomes as one: every tensor one after another on dim 0 (a scalar flag: its
    smallest value, 1 only where every replica's is); None where any replica has none."""
    if len(outcomes) == 1:
        return outcomes[0]
    values = {}
    for key in outcomes[0].values:
        parts = [o.values.get(key) for o in outcomes]
        if any(p is None for p in parts):
            values[key] = None
        elif parts[0].dim() == 0:
            values[key] = torch.stack(parts).min()
        else:
            values[key] = torch.cat(parts, dim=0)
    # the first's other fields (a reference's scales: the same for every replica) carry over
    return dataclasses.replace(outcomes[0], values=values, input_mutated=any(o.input_mutated for o in outcomes))


def replicated(outcome: Outcome, mesh: Mesh) -> Outcome:
    """A one-replica outcome (a reference, a yardstick) repeated for every replica of `mesh`."""
    return replicas_joined([outcome] * mesh.dp)


def world_rank_of(group) -> int:
    """The rank of this process in the whole world, as `torch.distributed.get_rank()` returns it
    (a simulated subgroup knows it too); planted bugs take it for the group rank."""
    if hasattr(group, "world_rank"):
        return group.world_rank
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    return 0


def world_group_of(group):
    """The whole world's group, as `group=None` means it under torch.distributed (a simulated
    subgroup knows it too); planted bugs hand it to the kernel instead of the kernel's group."""
    return getattr(group, "world_group", None)


MESHED = {"quick": ((2, "dp2"), (2, "dp2_strided")), "full": ((2, "dp2"), (2, "dp2_strided"), (4, "dp2"))}
WIDEST = {"quick": 4, "full": 4}  # the world of the core below; full crosses 8 in its main grid


def parallel_core(base: Case, preset: str, *, edges: dict, vocabs: tuple[int, ...]) -> list[Case]:
    """Four ranks and the meshes, as a core of crossings rather than the whole grid again (the
    2- and 3-rank grids cross every axis; these are the cases where the rank count or the mesh is
    what matters), for the cross entropy kernels (`vp_ce`, `vp_flce`): `base` a mean case of the
    kernel, `edges` the case fields that put every target on a shard's edge, `vocabs` the odd
    vocabularies (an uneven split at 4 ranks, fewer classes than ranks: empty shards).
      four ranks: plain, a prompt mask under none, targets on the edges with every option, label
                  smoothing over the global vocabulary, a confident row, the odd vocabularies;
      each mesh:  plain, targets on the edges with every option, label smoothing (Megatron-LM
                  #7464: the local vocabulary taken for the global one), a sum over a random
                  ignore pattern."""
    mean = base.replace(reduction="mean", upstream="ones")
    none = base.replace(reduction="none", upstream="random")
    four = mean.replace(world=WIDEST[preset])
    cases = [
        four,
        none.replace(world=four.world, ignore_pattern="leading_run"),
        four.replace(**edges, option="all"),
        none.replace(world=four.world, **edges, option="label_smoothing"),
        four.replace(logits="confident", option="all"),
        *(four.replace(v=v) for v in vocabs),
    ]
    for world, mesh in MESHED[preset]:
        on = mean.replace(world=world, mesh=mesh)
        cases += [
            on,
            on.replace(reduction="none", upstream="random", **edges, option="all"),
            on.replace(option="label_smoothing"),
            on.replace(reduction="sum", upstream="random", ignore_pattern="random_10"),
        ]
    return cases


# ----------------------------------------------------------------------------- planted bugs
# Shared by the three kernels' mutants.py: each wraps a kernel call fn(*inputs, group=...,
# vocab_start=..., **options); `width(inputs)` is the rank's shard width. Both are right on a flat
# mesh (world rank = group rank, world group = the group) and wrong on a mesh only.
MESHES = ("dp2", "dp2_strided")


def with_world_rank_offset(fn, width: Callable[[tuple], int]):
    """The vocabulary offset taken from the world rank, as if the group were the world: rank r of
    a tensor-parallel subgroup reads classes of world rank r' instead (Liger-Kernel #1422, #1458:
    `dist.get_rank()` where the group's rank was meant)."""
    from ligerbench.kernels.vocab_parallel_cross_entropy import group_rank_size

    def call(*inputs, group, vocab_start, **options):
        shift = (world_rank_of(group) - group_rank_size(group)[0]) * width(inputs)
        return fn(*inputs, group=group, vocab_start=vocab_start + shift, **options)

    return call


def with_world_group(fn):
    """The world's group handed to the kernel instead of its tensor-parallel group (`group=None`
    left at its default inside a mesh): the statistics of every replica's shards merged, each
    class counted once per replica."""

    def call(*inputs, group, **options):
        return fn(*inputs, group=world_group_of(group), **options)

    return call


# ----------------------------------------------------------------------------- rank count
def split_again(problem, count: int):
    """The same global problem with its vocabulary over `count` ranks, on this run's processes
    (the rank-count suite, ligerbench/verify/invariance.py): under torch.distributed the world's
    processes as world/count replicas of a contiguous `count`-rank group; in one process, `count`
    simulated ranks. `problem`: a vocab-parallel problem on a flat mesh (its `world` and `mesh`)."""
    if problem.mesh.dp != 1:
        raise ValueError("the rank-count suite splits a flat mesh's problem again, not a mesh's")
    procs = dist.get_world_size() if dist.is_available() and dist.is_initialized() else count
    if procs % count:
        raise ValueError(f"{procs} processes do not hold replicas of {count} ranks")
    return dataclasses.replace(problem, world=count, mesh=Mesh(tp=count, dp=procs // count))


def vocab_parallel_rows(whole: tuple[str, ...], sharded: tuple[str, ...], *, base, log_prob: str = "", counted=None,
                        sharded_rows: tuple[str, ...] = ()):  # fmt: skip
    """The Rows (ligerbench/rowwise.py) of a vocab-parallel kernel: the split over another number of
    ranks (Ranks), and the batch of rows cut from the global problem (`problem.base`) as `base`,
    the single-GPU kernel's Rows, cuts it. Its per-row quantities: every `whole` one (one per rank
    on dim 0, the rows on dim 1) and the `sharded_rows` (a gradient of the logits: the rows on dim
    0, the shards put back together on dim 1); every other `sharded` one is summed over the rows (a
    weight's gradient). A flat mesh's problem only: on a mesh the replicas lie one after another on
    dim 0. No row is promised bit for bit (collectives: docs/checks.md), so every distance is info."""
    from ligerbench.rowwise import Ranks, Rows

    def take(problem, index):
        if problem.mesh.dp != 1:
            raise ValueError("a batch of rows is cut from a flat mesh's problem only (replicas lie on dim 0)")
        return dataclasses.replace(problem, base=base.take(problem.base, index))

    ranks = Ranks(split=split_again, replicas=lambda p: p.mesh.dp, world=lambda p: p.world, whole=whole,
                  sharded=sharded)  # fmt: skip
    return Rows(take=take, count=lambda p: base.count(p.base), per_row=(*whole, *sharded_rows), log_prob=log_prob,
                counted=counted, ranks=ranks, shared=tuple(q for q in sharded if q not in sharded_rows),
                row_dims=tuple((q, 1) for q in whole))  # fmt: skip
