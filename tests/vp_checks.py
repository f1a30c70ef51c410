"""Shared by the vocab-parallel tests: one rank's check of our op against the float64 truth of
the global problem (the same function on simulated ranks and on a real gloo group), and a
bounded launcher of real gloo ranks (started from a fork server with the imports done; a
top-level module so the children can import it)."""

from __future__ import annotations

import datetime
import gc
import json
import time
import traceback
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from ligerbench import tolerance
from ligerbench.suites.ce.spec import ce_torch
from ligerbench.suites.vp_ce.spec import shard_bounds

# Each config is there for one reason (the comment); all run at every world size the tests use.
CONFIGS = {
    # uneven shards, mean, a target on every shard's first class (edges)
    "plain_mean_edges": dict(v=501, reduction="mean", edges=True),
    # smoothing over the GLOBAL vocab, with class weights sharded with the vocab
    "smoothing_class_weight_sum": dict(v=501, reduction="sum", label_smoothing=0.1, class_weight=True),
    # every option at once, reduction none with a random upstream, 3-D logits
    "all_none_3d": dict(v=500, reduction="none", label_smoothing=0.1, softcap=5.0, z_loss_scale=0.05, class_weight=True,
                        token_weight=True, three_d=True),
    # ignore_index 0 is also class 0; rows ignored on every rank; offsets derived by the op
    "index_is_class_derived_offsets": dict(v=7, reduction="mean", ignore_index=0, derive_offsets=True),
    # the gradient written into the shard (declared in-place)
    "inplace_sum": dict(v=501, reduction="sum", inplace=True),
}  # fmt: skip


def problem(cfg: dict, world: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    n, v = 12, cfg["v"]
    x = torch.randn(n, v, generator=g) * 3
    t = torch.randint(0, v, (n,), generator=g)
    ignore = cfg.get("ignore_index", -100)
    t[::5] = ignore
    if cfg.get("edges"):  # the first class of the last shard, the last class of the first
        bounds = [b for b in shard_bounds(v, world) if b[1] > b[0]]
        t[1::5], t[2::5] = bounds[-1][0], bounds[0][1] - 1
    w = torch.rand(v, generator=g) + 0.2 if cfg.get("class_weight") else None
    tw = torch.rand(n, generator=g) + 0.1 if cfg.get("token_weight") else None
    up = torch.rand(n, generator=g) - 0.3 if cfg["reduction"] == "none" else torch.tensor(1.7)
    return x, t, w, tw, up, ignore


def _run(fn, x, t, up, shape, **kw):
    leaf = x.detach().clone().reshape(*shape, x.shape[-1]).requires_grad_(True)
    loss, z = fn(leaf, t.reshape(shape), **kw)
    loss.backward(up.reshape(loss.shape) if loss.dim() else up)
    return loss.detach(), z.detach(), None if leaf.grad is None else leaf.grad.reshape(-1, x.shape[-1])


def check_rank(rank: int, group, world: int, name: str) -> None:
    """This rank's loss, z-loss and gradient shard against the float64 truth (tolerance rule)."""
    from ligerbench.kernels.vocab_parallel_cross_entropy import vocab_parallel_cross_entropy

    cfg = CONFIGS[name]
    x, t, w, tw, up, ignore = problem(cfg, world)
    lo, hi = shard_bounds(cfg["v"], world)[rank]
    shape = (3, 4) if cfg.get("three_d") else (12,)
    opts = dict(
        ignore_index=ignore, reduction=cfg["reduction"], label_smoothing=cfg.get("label_smoothing", 0.0),
        softcap=cfg.get("softcap"), z_loss_scale=cfg.get("z_loss_scale", 0.0),
    )  # fmt: skip
    tw_s = None if tw is None else tw.reshape(shape)

    def ours(leaf, target, **kw):
        shard = leaf[..., lo:hi]
        if cfg.get("inplace"):  # a leaf of its own, so that writing into it is allowed
            shard = shard.detach().clone().requires_grad_(True)
        out = vocab_parallel_cross_entropy(
            shard, target, group=group, vocab_start=None if cfg.get("derive_offsets") else lo,
            class_weight_shard=None if w is None else w[lo:hi], token_weight=tw_s, return_z_loss=True,
            inplace_backward=cfg.get("inplace", False), **kw,
        )  # fmt: skip
        if cfg.get("inplace"):
            ours.shard = shard
        return out

    def truth(leaf, target, dtype):  # ce_torch takes [N, V]
        loss, z = ce_torch(
            leaf.reshape(-1, cfg["v"]).to(dtype), target.reshape(-1), weight=None if w is None else w.to(dtype),
            token_weight=None if tw is None else tw.to(dtype), **opts,
        )  # fmt: skip
        return (loss.reshape(target.shape), z.reshape(target.shape)) if loss.dim() else (loss, z)

    loss, z, grad = _run(ours, x, t, up, shape, **opts)
    if cfg.get("inplace"):
        shard = ours.shard
        assert shard.grad is not None
        grad = torch.zeros_like(x)
        grad[:, lo:hi] = shard.grad.reshape(-1, hi - lo)
    ref = _run(lambda leaf, target, **kw: truth(leaf, target, torch.float64), x.double(), t, up.double(), shape)
    eager = _run(lambda leaf, target, **kw: truth(leaf, target, torch.float32), x, t, up, shape)
    got = (loss, z, grad[:, lo:hi])
    for i, q in enumerate(("loss", "z_loss", "grad_shard")):
        r = ref[i][:, lo:hi] if q == "grad_shard" else ref[i]
        e = eager[i][:, lo:hi] if q == "grad_shard" else eager[i]
        err = tolerance.rel_error(got[i], r)
        limit = tolerance.limit_for(tolerance.rel_error(e, r), torch.float32)
        assert err <= limit, f"{name} rank {rank}/{world} {q}: error {err:.3g} > limit {limit:.3g}"
    assert loss.dtype == torch.float32


def check_all(rank: int, group, world: int) -> None:
    for name in CONFIGS:
        check_rank(rank, group, world, name)


# ----------------------------------------------------------------------------- real gloo ranks


def _gloo_rank(rank: int, world: int, store: str, target, args) -> None:
    dist.init_process_group(
        "gloo", init_method=f"file://{store}", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=30)
    )
    try:
        target(rank, None, world, *args)
        # Without this, about 1 run in 10 of the DTensor check aborted at exit ("terminate called
        # without an active exception"): a rank tore gloo down while its peer's last collective
        # was in flight. Measured: 56 of 56 clean with the barrier, 3 of 32 aborted without.
        dist.barrier()
    finally:
        gc.collect()  # drop DTensor/DeviceMesh references to the group before destroying it
        dist.destroy_process_group()


# The ranks start from a fork server that has imported these once (per test process): a spawned
# rank spent about 3 CPU seconds importing torch, transformers and our kernels before its check
# began, on CI's two cores the larger part of a short check. Each rank is still a process of its
# own, forked from a server that has run nothing but these imports (no thread, no process group).
PRELOAD = ["torch", "torch.distributed", "vp_checks", "fsdp_checks", "mesh_2d_checks", "converge_2rank_checks"]


def run_gloo(world: int, target, *args, store: str, timeout_s: float = 120.0) -> None:
    """target(rank, group=None, world, *args) on `world` real gloo ranks; raises what a rank
    raised, or TimeoutError (the ranks then terminated) past timeout_s."""
    mp.set_forkserver_preload(PRELOAD)  # read when the server starts: the first call in this process
    ctx = mp.start_processes(
        _gloo_rank, args=(world, store, target, args), nprocs=world, join=False, start_method="forkserver"
    )
    deadline = time.monotonic() + timeout_s
    while not ctx.join(timeout=1):
        if time.monotonic() > deadline:
            for p in ctx.processes:
                if p.is_alive():
                    p.terminate()
            raise TimeoutError(f"gloo ranks still running after {timeout_s} s")


# ----------------------------------------------------------------------------- several checks, one launch

PASSED = "passed"


def _log_check(folder: str, rank: int, **entry) -> None:
    with open(Path(folder) / f"rank{rank}.jsonl", "a") as f:
        f.write(json.dumps({**entry, "at": time.time()}) + "\n")


def _checks_on_rank(rank: int, group, world: int, checks: dict, folder: str) -> None:
    """Each check of `checks` (name: (target, bound in s, *args)) in turn on this rank, each
    start, pass and failure logged to folder/rank<R>.jsonl. A check that raises ends the run as a
    lone run_gloo would (the other ranks may be waiting in its collectives); the checks after it
    do not run."""
    for name, (target, _, *args) in checks.items():
        _log_check(folder, rank, check=name, state="started")
        try:
            target(rank, group, world, *args)
        except BaseException:
            _log_check(folder, rank, check=name, state="failed", error=traceback.format_exc())
            raise
        _log_check(folder, rank, check=name, state=PASSED)


def _check_log(folder: Path, rank: int) -> list[dict]:
    path = folder / f"rank{rank}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _terminate(ctx) -> None:
    """End every rank still running, each given 10 s to go."""
    for p in ctx.processes:
        if p.is_alive():
            p.terminate()
    for p in ctx.processes:
        p.join(timeout=10)


def run_gloo_checks(world: int, checks: dict, *, folder: Path, store: str) -> dict[str, str]:
    """Several checks on ONE set of `world` real gloo ranks (the ranks' start-up, transformers'
    imports included, paid once), one after the other in the order given: `checks` maps a name
    to (target, bound in s, *args), each target called as run_gloo calls it. Each check is
    bounded on its own: a rank still in one past its bound ends the run (the ranks terminated).
    Returns each check's outcome: PASSED once every rank finished it, else what a rank raised in
    it, or why it never finished (a check before it failed, the bound ran out)."""
    folder.mkdir(parents=True, exist_ok=True)
    mp.set_forkserver_preload(PRELOAD)
    ctx = mp.start_processes(
        _gloo_rank, args=(world, store, _checks_on_rank, (checks, str(folder))), nprocs=world, join=False,
        start_method="forkserver",
    )  # fmt: skip
    stopped = None  # why the ranks stopped before every check had passed
    # the whole launch is bounded too: a rank stuck before its first check (the group's start-up)
    # logs nothing a check's bound could see
    deadline = time.time() + sum(check[1] for check in checks.values()) + 120.0
    try:
        while not ctx.join(timeout=1):
            if time.time() > deadline:
                stopped = "the launch ran past the sum of its checks' bounds + 120 s"
                _terminate(ctx)
                break
            for rank in range(world):
                log = _check_log(folder, rank)
                if log and log[-1]["state"] == "started":
                    name, bound = log[-1]["check"], checks[log[-1]["check"]][1]
                    if time.time() - log[-1]["at"] > bound:
                        stopped = f"rank {rank} was still in check {name} after its bound of {bound} s"
                        _terminate(ctx)
                        break
            if stopped:
                break
    except Exception as exc:  # a rank raised (its traceback is in its log too) or died
        stopped = f"{type(exc).__name__}: {exc}"
    outcomes = {}
    logs = {rank: _check_log(folder, rank) for rank in range(world)}
    ended_in = [e["check"] for r in range(world) for e in logs[r] if e["state"] == "failed"]
    if ended_in:
        stopped = f"the launch ended at check {ended_in[0]}, which failed; {stopped}"
    for name in checks:
        passed = [r for r in range(world) if any(e["check"] == name and e["state"] == PASSED for e in logs[r])]
        failed = [
            (r, e["error"]) for r in range(world) for e in logs[r] if e["check"] == name and e["state"] == "failed"
        ]
        if len(passed) == world:
            outcomes[name] = PASSED
        elif failed:
            outcomes[name] = "".join(f"check {name} failed on rank {r}:\n{error}" for r, error in failed)
        else:
            outcomes[name] = f"check {name} did not finish on every rank (finished on {passed or 'none'}): {stopped}"
    return outcomes


def check_dtensor(rank: int, group, world: int) -> None:
    """A DTensor sharded on the vocab dim (uneven: torch.chunk's split) gives the loss and the
    sharded gradient of the unsharded problem."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    from ligerbench.kernels.vocab_parallel_cross_entropy import vocab_parallel_cross_entropy

    mesh = init_device_mesh("cpu", (world,))
    g = torch.Generator().manual_seed(1)
    x = torch.randn(6, 11, generator=g)
    t = torch.tensor([0, 5, 6, 10, -100, 3])
    dx = distribute_tensor(x, mesh, [Shard(1)]).requires_grad_(True)
    loss = vocab_parallel_cross_entropy(dx, t, label_smoothing=0.1)
    loss.backward()
    ref_x = x.double().requires_grad_(True)
    ref = ce_torch(ref_x, t, label_smoothing=0.1)[0]
    ref.backward()
    assert abs(loss.item() - ref.item()) < 1e-5 * abs(ref.item()), (loss.item(), ref.item())
    full_grad = dx.grad.full_tensor()
    assert torch.allclose(full_grad.double(), ref_x.grad, atol=1e-6), (full_grad - ref_x.grad).abs().max()
    # a DTensor not sharded on the vocab dim is refused, not silently taken as a shard
    replicated = distribute_tensor(x, mesh, [Replicate()])
    try:
        vocab_parallel_cross_entropy(replicated, t)
    except ValueError as exc:
        assert "sharded on its last dim" in str(exc)
    else:
        raise AssertionError("a replicated DTensor was accepted as a vocab shard")


def count_collectives(group, calls: list, rank: int, *, dtypes: bool = False) -> None:
    """Wrap a simulated group's collectives so every call is recorded in `calls` as (rank, kind,
    shape), with the reduced tensor's dtype after them when `dtypes` (an all_reduce's precision)."""
    gather, reduce = group.all_gather_into_tensor, group.all_reduce

    def counted_gather(out, inp):
        calls.append((rank, "all_gather", tuple(inp.shape)))
        gather(out, inp)

    def counted_reduce(t):
        calls.append((rank, "all_reduce", tuple(t.shape), *((t.dtype,) if dtypes else ())))
        reduce(t)

    group.all_gather_into_tensor, group.all_reduce = counted_gather, counted_reduce
