"""The Triton per-shard passes of the vocab-parallel losses (kernels/vocab_parallel_passes.py, the
GPU path) against the PyTorch passes beside them (the CPU path, itself held to the float64 truth
by tests/test_vp_ce_op.py), here through Triton's interpreter on one global problem split in two
shards: targets on either shard, ignored rows, every option that changes a pass."""

from __future__ import annotations

import pytest
import torch
from vp_checks import CONFIGS as CE_CONFIGS
from vp_checks import check_rank as ce_check_rank
from vp_flce_checks import CONFIGS as FLCE_CONFIGS
from vp_flce_checks import check_rank as flce_check_rank

from ligerbench.distributed.simulated import run_ranks
from ligerbench.kernels import vocab_parallel_cross_entropy as vp

N, V, SPLIT, IGNORE = 13, 37, 20, -100
# each option changes what a pass computes: smoothing (the smoothing sum, the eps/V term), class
# weights (w_y, the weighted smoothing sum), softcap (capped logits and the slope), z-loss (a)
OPTIONS = {
    "plain": {},
    "smoothing": {"label_smoothing": 0.1},
    "smoothing_class_weight": {"label_smoothing": 0.2, "class_weight": True},
    "softcap": {"softcap": 3.0},
    "all": {"label_smoothing": 0.1, "class_weight": True, "softcap": 3.0, "z_loss_scale": 0.01},
}


def _problem(dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(N, V, generator=g) * 4).to(dtype)
    x[0, 3] = 30.0  # a confident row: p_y close to 1 on the first shard
    t = torch.randint(0, V, (N,), generator=g)
    t[0], t[1], t[2] = 3, SPLIT, SPLIT - 1  # the shard edges
    t[5] = t[9] = IGNORE
    w = torch.rand(V, generator=g) + 0.3
    return x, t, w


def _shard_inputs(x, t, w, lo, hi, use_w):
    counted = t != IGNORE
    local_t = t - lo
    owned = vp.owns(local_t, hi - lo, counted)
    return x[:, lo:hi].contiguous(), local_t.clamp(0, hi - lo - 1), owned, counted, (w[lo:hi] if use_w else None)


def _with_passes(monkeypatch, which, fn):
    monkeypatch.setattr(vp, "PASSES", which)
    return fn()


def _merged(x, t, w, opts):
    parts = []
    for lo, hi in ((0, SPLIT), (SPLIT, V)):
        xs, lt, own, _, ws = _shard_inputs(x, t, w, lo, hi, opts.get("class_weight"))
        stats = torch.zeros(N + 1, vp.N_STATS)
        stats[:N] = vp._local_stats(xs, lt, own, ws, opts.get("label_smoothing", 0.0), opts.get("softcap"))
        stats[N, 0], stats[N, 1] = hi - lo, lo
        if ws is not None:
            stats[N, 2] = ws.sum()
        parts.append(stats)
    return vp._Merged(torch.stack(parts), N, opts.get("class_weight", False), rank=1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", list(OPTIONS))
def test_the_triton_statistics_pass_matches_the_pytorch_one(monkeypatch, name, dtype):
    opts = OPTIONS[name]
    x, t, w = _problem(dtype)
    for lo, hi in ((0, SPLIT), (SPLIT, V)):
        xs, lt, own, _, ws = _shard_inputs(x, t, w, lo, hi, opts.get("class_weight"))
        args = (xs, lt, own, ws, opts.get("label_smoothing", 0.0), opts.get("softcap"))
        ref = _with_passes(monkeypatch, "torch", lambda a=args: vp._local_stats(*a))
        got = _with_passes(monkeypatch, "triton", lambda a=args: vp._local_stats(*a))
        if not opts.get("softcap"):  # capped logits differ by an ulp (two tanh implementations)
            assert torch.equal(got[:, 0], ref[:, 0]), "the row max differs"
        assert torch.equal(got[:, 3], ref[:, 3]), "ownership differs"
        torch.testing.assert_close(got, ref, rtol=2e-6, atol=1e-5)


@pytest.mark.parametrize("inplace", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", list(OPTIONS))
def test_the_triton_gradient_pass_matches_the_pytorch_one(monkeypatch, name, dtype, inplace):
    opts = OPTIONS[name]
    x, t, w = _problem(dtype)
    merged = _merged(x, t, w, opts)
    valid = merged.owners == 1.0
    tw = torch.rand(N, generator=torch.Generator().manual_seed(3)) + 0.5
    denom = torch.tensor(7.0)
    xs, lt, own, counted, ws = _shard_inputs(x, t, w, SPLIT, V, opts.get("class_weight"))
    knobs = (opts.get("label_smoothing", 0.0), opts.get("softcap"), opts.get("z_loss_scale", 0.0))

    def grad():
        src = xs.clone()
        out = src if inplace else torch.full_like(src, float("nan"))
        vp._write_grad(src, out, merged, lt, own, counted, valid, ws, tw, denom, knobs)
        return out

    ref = _with_passes(monkeypatch, "torch", grad)
    got = _with_passes(monkeypatch, "triton", grad)
    assert torch.isfinite(got).all()
    assert torch.equal(got[5], torch.zeros_like(got[5])) and torch.equal(got[9], got[5]), "ignored rows not 0"
    # within one rounding of the gradient's dtype of each other, relative to the row's scale
    ulp = torch.finfo(dtype).eps
    err = (got.float() - ref.float()).abs().amax() / ref.float().abs().amax()
    assert err <= 2 * ulp, f"{name} {dtype}: {err:.3g}"


def test_the_gpu_path_is_the_triton_one(monkeypatch):
    """A GPU tensor takes the Triton passes ("auto"), and a planted failure in them surfaces:
    proof that the tests above compare two different implementations."""
    calls = []
    monkeypatch.setattr(vp.passes, "shard_stats", lambda *a: calls.append("stats"))
    x, t, _ = _problem(torch.float32)
    xs, lt, own, _, _ = _shard_inputs(x, t, None, 0, SPLIT, False)
    monkeypatch.setattr(vp, "PASSES", "triton")
    vp._local_stats(xs, lt, own, None, 0.0, None)
    monkeypatch.setattr(vp, "PASSES", "auto")
    vp._local_stats(xs, lt, own, None, 0.0, None)  # a CPU tensor: the PyTorch pass
    assert calls == ["stats"]
    monkeypatch.setattr(vp, "PASSES", "fast")
    with pytest.raises(ValueError, match="PASSES"):
        vp._local_stats(xs, lt, own, None, 0.0, None)


# the whole ops with the Triton passes, against the float64 truth (the checks of
# tests/test_vp_ce_op.py and tests/test_vp_flce_op.py): world 1 (no collective), 2 and 3 (uneven)
@pytest.mark.parametrize("world", [1, 2, 3])
@pytest.mark.parametrize("name", list(CE_CONFIGS))
def test_vp_ce_with_the_triton_passes_meets_the_rule(monkeypatch, world, name):
    monkeypatch.setattr(vp, "PASSES", "triton")
    run_ranks(world, lambda rank, group: ce_check_rank(rank, group, world, name))


@pytest.mark.parametrize("world", [1, 2])
@pytest.mark.parametrize("name", list(FLCE_CONFIGS))
def test_vp_flce_with_the_triton_passes_meets_the_rule(monkeypatch, world, name):
    monkeypatch.setattr(vp, "PASSES", "triton")
    run_ranks(world, lambda rank, group: flce_check_rank(rank, group, world, name))
