"""Shared by the vocab-parallel fused linear tests: one rank's check of our op against the
float64 truth of the global problem (the same function on simulated ranks and on a real gloo
group; tests/vp_checks.py launches the gloo ranks). A top-level module so spawned ranks import it."""

from __future__ import annotations

import torch

from ligerbench import tolerance
from ligerbench.suites.flce.spec import flce_torch
from ligerbench.suites.vp_ce.spec import shard_bounds

N, H = 13, 8  # 13 tokens: chunks of 5 leave a partial last one
# Each config is there for one reason (the comment); all run at every world size the tests use.
CONFIGS = {
    # uneven shards, mean, a bias, targets on shards' first and last classes, 3 chunks
    "plain_mean_edges_bias": dict(v=37, reduction="mean", edges=True, bias=True, chunk_tokens=5),
    # smoothing over the GLOBAL vocab, class weights sharded (the mean's denominator spans ranks)
    "smoothing_class_weight_mean": dict(v=37, reduction="mean", label_smoothing=0.1, class_weight=True),
    # every option, reduction none with a random upstream (gradients formed in backward), [B, T, H]
    "all_none_3d": dict(v=36, reduction="none", label_smoothing=0.1, softcap=5.0, z_loss_scale=0.05, class_weight=True,
                        token_weight=True, bias=True, three_d=True, chunk_tokens=5),
    # ignore_index 0 is also class 0; offsets derived by the op
    "index_is_class_derived_offsets": dict(v=7, reduction="sum", ignore_index=0, derive_offsets=True),
    # bf16 with the weight gradient accumulated in fp32 over 3 chunks
    "bf16_fp32_accum_sum": dict(v=37, reduction="sum", dtype=torch.bfloat16, chunk_tokens=5, accum="fp32"),
    # hidden states that need no gradient: no dh, no all_reduce; the weight gradient still right
    "frozen_hidden": dict(v=37, reduction="sum", frozen_hidden=True, bias=True),
}  # fmt: skip


def problem(cfg: dict, world: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    v, n, hd = cfg["v"], cfg.get("n", N), cfg.get("h", H)
    h = torch.randn(n, hd, generator=g)
    w = torch.randn(v, hd, generator=g) / hd**0.5 * 2
    b = torch.randn(v, generator=g) if cfg.get("bias") else None
    t = torch.randint(0, v, (n,), generator=g)
    ignore = cfg.get("ignore_index", -100)
    t[::4] = ignore
    if cfg.get("edges"):
        bounds = [s for s in shard_bounds(v, world) if s[1] > s[0]]
        t[1::4], t[2::4] = bounds[-1][0], bounds[0][1] - 1
    cw = torch.rand(v, generator=g) + 0.2 if cfg.get("class_weight") else None
    tw = torch.rand(n, generator=g) + 0.1 if cfg.get("token_weight") else None
    up = torch.rand(n, generator=g) - 0.3 if cfg["reduction"] == "none" else torch.tensor(1.7)
    return h, w, b, t, cw, tw, up, ignore


def _opts(cfg, ignore):
    return dict(
        ignore_index=ignore, reduction=cfg["reduction"], label_smoothing=cfg.get("label_smoothing", 0.0),
        softcap=cfg.get("softcap"), z_loss_scale=cfg.get("z_loss_scale", 0.0),
    )  # fmt: skip


def _truth(cfg, h, w, b, t, cw, tw, up, ignore, dtype):
    """(loss, z_loss, grad_hidden, grad_weight, grad_bias) of the global problem in `dtype`."""
    n, hd = h.shape
    shape = (n,) if not cfg.get("three_d") else (1, n)
    leaves = [x.to(dtype).requires_grad_(not (i == 0 and cfg.get("frozen_hidden")))
              if x is not None else None for i, x in enumerate((h, w, b))]  # fmt: skip
    loss, z = flce_torch(
        leaves[0].reshape(*shape, hd), leaves[1], t.reshape(shape), bias=leaves[2],
        class_weight=None if cw is None else cw.to(dtype),
        token_weight=None if tw is None else tw.to(dtype).reshape(shape),
        **_opts(cfg, ignore),
    )  # fmt: skip
    loss.backward(up.to(dtype).reshape(loss.shape) if loss.dim() else up.to(dtype))
    grads = [None if x is None or x.grad is None else x.grad for x in leaves]
    return (loss.detach().reshape(-1), z.detach().reshape(-1), *grads)


def check_rank(rank: int, group, world: int, name: str, *, device: str = "cpu", cfg: dict | None = None) -> None:
    """This rank's loss, z-loss, hidden gradient and weight/bias gradient shards against the float64
    truth (the tolerance rule: 2x eager's error in the case dtype + one rounding). The op runs on
    `device`; the truth and eager's yardstick on CPU. `cfg`: a config not in CONFIGS (`name`
    then only names it)."""
    from ligerbench.kernels.vocab_parallel_fused_linear_cross_entropy import vocab_parallel_fused_linear_cross_entropy

    cfg = CONFIGS[name] if cfg is None else cfg
    dtype = cfg.get("dtype", torch.float32)
    h, w, b, t, cw, tw, up, ignore = problem(cfg, world)
    n, hd = h.shape
    lo, hi = shard_bounds(cfg["v"], world)[rank]
    shape = (1, n) if cfg.get("three_d") else (n,)

    def on(x):
        return None if x is None else x.to(device)

    hid = h.to(dtype).reshape(*shape, hd).to(device, copy=True).requires_grad_(not cfg.get("frozen_hidden"))
    ws = w[lo:hi].to(dtype).to(device, copy=True).requires_grad_(True)
    bs = None if b is None else b[lo:hi].to(dtype).to(device, copy=True).requires_grad_(True)
    loss, z = vocab_parallel_fused_linear_cross_entropy(
        hid, ws, on(t).reshape(shape), group=group, vocab_start=None if cfg.get("derive_offsets") else lo,
        bias_shard=bs, class_weight_shard=None if cw is None else on(cw[lo:hi]),
        token_weight=None if tw is None else on(tw).reshape(shape), return_z_loss=True,
        chunk_tokens=cfg.get("chunk_tokens"), grad_weight_accum=cfg.get("accum", "auto"), **_opts(cfg, ignore),
    )  # fmt: skip
    loss.backward(on(up).reshape(loss.shape) if loss.dim() else on(up))
    assert loss.dtype == torch.float32
    got = tuple(None if x is None else x.cpu() for x in (loss.reshape(-1), z.reshape(-1), hid.grad, ws.grad,
                                                         None if bs is None else bs.grad))  # fmt: skip
    ref = _truth(cfg, h.double(), w.double(), None if b is None else b.double(), t,
                 None if cw is None else cw.double(), None if tw is None else tw.double(), up.double(), ignore,
                 torch.float64)  # fmt: skip
    eager = _truth(cfg, h, w, b, t, cw, tw, up, ignore, dtype)
    for i, q in enumerate(("loss", "z_loss", "grad_hidden", "grad_weight", "grad_bias")):
        if ref[i] is None:
            assert got[i] is None, f"{name} rank {rank}: {q} came back where none is due"
            continue
        r, e = ref[i], eager[i]
        if q in ("grad_weight", "grad_bias"):
            r, e = r[lo:hi], e[lo:hi]
        assert got[i] is not None, f"{name} rank {rank}/{world}: no {q}"
        err = tolerance.rel_error(got[i].reshape(r.shape), r)
        limit = tolerance.limit_for(tolerance.rel_error(e.reshape(r.shape), r), dtype)
        assert err <= limit, f"{name} rank {rank}/{world} {q}: error {err:.3g} > limit {limit:.3g}"


def check_all(rank: int, group, world: int) -> None:
    for name in CONFIGS:
        check_rank(rank, group, world, name)
