"""`bench` of the `vp_ce` kernel (vocab-parallel cross entropy) on real ranks:

    ligerbench bench --kernel vp_ce --nproc 2            # 2 GPUs, NCCL
    ligerbench bench --kernel vp_ce --nproc 2 --smoke    # 2 gloo ranks on CPU, NOT a measurement

Each rank holds its shard [N, V_local] of the global logits [N, V] (suites/vp_ce/spec.py's
`shard_bounds`: V_local = ceil(V / world) on the first ranks), drawn on its device block by block
(`vocab_slice`: the same values whatever the split); the targets are the same on every rank. Every rank times the same
provider at once; figures are the slowest rank's (ligerbench/bench/engine.py).

Bytes model, per rank (the fewest bytes a rank must move through HBM per step):
    full     = read its shard once + write its gradient shard once = 2 * N * V_local * e
    forward  = N * V_local * e,   backward = N * V_local * e
The statistics exchanged (ours: one all_gather of [N + 1, 6] float32 per rank) are under 0.01%.

Peers (bench-only, each called per rank on its shard):
  loss_parallel  PyTorch's torch.distributed.tensor.parallel.loss_parallel: the shard as a
                 DTensor Shard(-1) on a 1-D mesh and F.cross_entropy (forward and backward under
                 the context manager, as its documentation requires);
and the registered providers: ours, ours_inplace, `gathered` (the shards all-gathered and our
single-GPU kernel on the full logits: the yardstick) and Liger-Kernel's
LigerVocabParallelCEFunction (`liger_vp`, bench only: suites/peers/liger.py).
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable

import torch
import torch.distributed as dist

from ligerbench.bench.ceilings import COPY
from ligerbench.bench.spec import (
    BenchInputs,
    BenchSpec,
    SweepPoint,
    Target,
    at_point,
    design_target,
    drawn_targets,
    element_bytes,
    ignored_rows,
)
from ligerbench.bench.spec import device_generator as case_generator
from ligerbench.cases import DTYPES, Case
from ligerbench.registry import Provider
from ligerbench.suites.ce.bench import plain_options
from ligerbench.suites.vp_ce.axes import case as vp_ce_case
from ligerbench.suites.vp_ce.spec import shard_bounds

PASSES = {"full": 2, "forward": 1, "backward": 1}  # passes over N * V_local elements per mode
VOCAB = 128256  # Llama-3's vocabulary: the design target's shape (docs/performance.md)
TOKENS = (2048, 4096, 8192)  # small on purpose: the default GPU run fits about two minutes
VOCABS = (32000, 128256, 256000)
DEFAULT_TOKENS = 8192
# --smoke: tiny shapes on CPU. 96 splits evenly over 2 ranks (every peer runs); 97 does not
# (peers that need even shards are skipped with the reason, ours runs uneven shards)
SMOKE_TOKENS = (8, 16)
SMOKE_VOCAB = 96
SMOKE_VOCABS = (96, 97)
AT_TARGET = at_point(n=8192, v=VOCAB, dtype="bf16", world=2)  # the design target's shape: 2 ranks, bf16


def widest_shard(case: Case) -> int:
    """V_local of the first rank: the widest shard (ceil(V / world))."""
    lo, hi = shard_bounds(case.v, max(case.world, 1))[0]
    return hi - lo


def bytes_moved(case: Case, mode: str) -> float:
    return PASSES[mode] * case.n * widest_shard(case) * element_bytes(case)


def gradient_shard_mib(case: Case) -> float:
    """The memory floor of a rank's step that does not write in place: its gradient shard."""
    return case.n * widest_shard(case) * element_bytes(case) / 2**20


def _rank_world() -> tuple[int, int]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def rank_shard(case: Case) -> tuple[int, int]:
    """[lo, hi): the classes this rank holds, of a case split over as many ranks as the group has."""
    rank, world = _rank_world()
    if case.world != world:
        raise ValueError(f"case {case.id} is split over {case.world} ranks but this group has {world}")
    return shard_bounds(case.v, world)[rank]


def tiled_head(held: dict, weight_shard: torch.Tensor) -> torch.Tensor:
    """A whole head [world * V_local, H] held by this rank, for the single-GPU kernels raced beside
    the vocab-parallel ones (what one GPU costs): this rank's shard tiled, built once per shard in
    `held` (outside the timed calls after the first); its gradient dropped before each call, so
    that autograd assigns it rather than adding into the last one."""
    key = (weight_shard.data_ptr(), tuple(weight_shard.shape))
    if held.get("key") != key:
        _, world = _rank_world()
        held.update(key=key, weight=weight_shard.detach().repeat(world, 1).requires_grad_(True))
    weight = held["weight"]
    weight.grad = None
    return weight


# Columns of the vocabulary drawn together. A block's values depend on the run seed, the point
# (not the ranks it is split over) and the block's index alone, so a shard holds the same values
# whatever the split: `bench --nproc 1,2,4` times one global problem at every rank count (the same
# loss in every column of the scaling table), and no rank draws the whole [N, V] (2 GB at the
# target shape), only the blocks its shard overlaps (at most one block over on either side).
BLOCK = 4096


def unsplit(case: Case) -> Case:
    """The point before it is split over ranks (world 0): what every draw is keyed by."""
    return case.replace(world=0)


def vocab_slice(case: Case, seed: int, lo: int, hi: int, other: int, *, dim: int, device, dtype) -> torch.Tensor:
    """Classes [lo, hi) of the point's random normal tensor whose vocabulary runs along `dim`
    (1: the logits [N, V]; 0: a head's weight [V, H]) and whose other dim has `other` entries."""
    parts = []
    for block in range(lo // BLOCK, -(-hi // BLOCK)):
        start = block * BLOCK
        width = min(BLOCK, case.v - start)
        digest = hashlib.sha256(f"{seed}:{unsplit(case).id}:block{block}".encode()).digest()
        g = torch.Generator(device=device).manual_seed(int.from_bytes(digest[:8], "little") & (2**63 - 1))
        shape = (other, width) if dim == 1 else (width, other)
        drawn = torch.randn(shape, generator=g, device=device, dtype=dtype)
        parts.append(drawn.narrow(dim, max(lo - start, 0), min(hi, start + width) - max(lo, start)))
    if not parts:  # an empty shard (fewer classes than ranks)
        return torch.empty((other, 0) if dim == 1 else (0, other), device=device, dtype=dtype)
    return torch.cat(parts, dim=dim).contiguous()


def make_inputs(case: Case, seed: int, device: torch.device) -> BenchInputs:
    """This rank's logits shard (random normal, std 1, the case dtype) and the targets (the same
    on every rank, ~10% ignored)."""
    lo, hi = rank_shard(case)
    shard = vocab_slice(case, seed, lo, hi, case.n, dim=1, device=device, dtype=DTYPES[case.dtype])
    whole = unsplit(case)  # the targets and the ignored rows, too, whatever the split
    ignore_index, ignored = ignored_rows(whole, seed, device)
    target = drawn_targets(case, case_generator(whole, seed, device), ignore_index, ignored)
    shard.requires_grad_(True)
    # group None: the default group, every rank of the run
    options = plain_options(ignore_index, case.reduction, group=None, vocab_start=lo, class_weight_shard=None)
    return BenchInputs(positional=[shard, target], leaves=[shard], options=options)


def _points(sweep: str, dtype: str, tokens: int | None, smoke: bool) -> list[SweepPoint]:
    """world is left 0 here: `bench --nproc N` splits every point over N ranks (spec.on_ranks)."""
    base = vp_ce_case(n=1, v=1, dtype=dtype, reduction="mean", ignore_pattern="random_10")
    if sweep == "tokens":
        v = SMOKE_VOCAB if smoke else VOCAB
        ns = SMOKE_TOKENS if smoke else tuple(t for t in TOKENS if t <= (tokens or DEFAULT_TOKENS)) or (tokens,)
        return [SweepPoint(str(n), float(n), base.replace(n=n, v=v)) for n in ns]
    n = tokens or (SMOKE_TOKENS[0] if smoke else DEFAULT_TOKENS)
    return [SweepPoint(str(v), float(v), base.replace(n=n, v=v)) for v in (SMOKE_VOCABS if smoke else VOCABS)]


def even_shards(case: Case) -> str | None:
    if case.world and case.v % case.world:
        return f"needs V divisible by the ranks (V={case.v} over {case.world} ranks); ours runs uneven shards"
    return None


def even_shards_peer(name: str, kernel: str, description: str, load: Callable[[], Callable]) -> Provider:
    """A bench-only peer of a vocab-parallel kernel that runs only where V splits evenly over the
    ranks: DTensor's Shard splits like torch.chunk (our shards like tensor_split), and a whole head
    tiled from this rank's shard (tiled_head) is world copies of it."""
    return Provider(name=name, kernel=kernel, description=description, bench_only=True, load=load, supports=even_shards)


# ----------------------------------------------------------------------------- PyTorch loss_parallel


@functools.cache
def _mesh(group, device_type: str):
    from torch.distributed.device_mesh import DeviceMesh

    return DeviceMesh.from_group(group if group is not None else dist.group.WORLD, device_type)


class _LossParallel(torch.autograd.Function):
    """F.cross_entropy on the shard as a DTensor Shard(-1), forward and backward inside
    loss_parallel() (its documentation: the backward must run under the context manager too),
    as one op of the shard, so the harness's plain `loss.backward()` drives it."""

    @staticmethod
    def forward(ctx, shard, target, group, ignore_index, reduction, label_smoothing):
        from torch.distributed.tensor import DTensor, Shard
        from torch.distributed.tensor.parallel import loss_parallel

        mesh = _mesh(group, shard.device.type)
        with torch.enable_grad():
            x = shard.detach().requires_grad_(True)
            logits = DTensor.from_local(x, mesh, [Shard(x.dim() - 1)], run_check=False)
            with loss_parallel():
                loss = torch.nn.functional.cross_entropy(
                    logits, target, ignore_index=ignore_index, reduction=reduction, label_smoothing=label_smoothing
                )
            out = loss.full_tensor()  # a plain tensor, still in the DTensor graph
        ctx.x, ctx.out = x, out
        return out.detach()

    @staticmethod
    def backward(ctx, grad):
        from torch.distributed.tensor.parallel import loss_parallel

        with loss_parallel():
            torch.autograd.backward(ctx.out, grad)
        x, ctx.x, ctx.out = ctx.x, None, None
        return x.grad, None, None, None, None, None


def loss_parallel_shard(logits_shard, target, *, group, ignore_index, reduction, label_smoothing=0.0,
                        vocab_start=None, class_weight_shard=None, softcap=None, z_loss_scale=0.0,
                        token_weight=None):  # fmt: skip
    """PyTorch's loss_parallel() called with vp_ce's contract (suites/vp_ce/spec.py). `vocab_start`
    is implied by the shard's place (DTensor's Shard splits like torch.chunk: even shards only);
    the options it has no parameter for are refused, never dropped (its `supports` skips them)."""
    if class_weight_shard is not None or softcap or z_loss_scale or token_weight is not None or label_smoothing:
        raise ValueError("loss_parallel has no class weights, softcap, z-loss, per-token weights or label smoothing")
    return _LossParallel.apply(logits_shard, target, group, ignore_index, reduction, 0.0)


VARIANTS = ()  # PyTorch's loss_parallel is a peer of vp_ce in verify and bench: suites/peers/torch_native.py

SOURCE = f"{design_target('vp_ce')}: vocab-parallel CE at N=8192, V=128256, bf16, 2 ranks"
# the kernel's bench, spelled out as data: alike in shape across kernels, its own in every value
SPEC = BenchSpec(
    kernel="vp_ce",
    make_inputs=make_inputs,
    work=bytes_moved, rate=COPY,
    work_formula="bytes per rank = passes * N * V_local * bytes_per_element, V_local = ceil(V / ranks); "
    "passes: full 2 (read the shard, write its gradient), forward 1, backward 1",
    sweeps={
        "tokens": functools.partial(_points, "tokens"),
        "vocab": functools.partial(_points, "vocab"),
    },
    targets=(
        Target(
            ("ours", "ours_inplace"),
            metric="time_ms",
            applies=AT_TARGET,
            limit=1.2,
            source=f"{SOURCE}: fwd+bwd <= 1.2 ms per rank (Liger 3.56, loss_parallel 10.4)",
        ),
        Target(
            ("ours",),  # not ours_inplace: the target is met without writing in place
            metric="extra_mib",
            applies=AT_TARGET,
            limit=gradient_shard_mib,
            source=f"{SOURCE}: extra memory per rank <= its gradient shard (1,002 MiB), none in place",
        ),
    ),
    distributed=True,
)  # fmt: skip
