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


@pytest.mark.interpreter  # CPU tensors through the Triton passes
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


@pytest.mark.interpreter  # CPU tensors through the Triton passes
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


@pytest.mark.interpreter  # CPU tensors through the Triton passes
def test_the_staged_passes_are_the_triton_ones(monkeypatch):
    """ "triton" and "fused" make the statistics pass in Triton, "auto" on a CPU tensor in
    PyTorch, and a planted failure in the Triton pass surfaces: proof that the tests above
    compare two different implementations."""
    calls = []
    monkeypatch.setattr(vp.passes, "shard_stats", lambda *a: calls.append("stats"))
    x, t, _ = _problem(torch.float32)
    xs, lt, own, _, _ = _shard_inputs(x, t, None, 0, SPLIT, False)
    for which in ("triton", "fused", "auto"):
        monkeypatch.setattr(vp, "PASSES", which)
        vp._local_stats(xs, lt, own, None, 0.0, None)  # "auto", a CPU tensor: the PyTorch pass
    assert calls == ["stats", "stats"]
    monkeypatch.setattr(vp, "PASSES", "fast")
    with pytest.raises(ValueError, match="PASSES"):
        vp._local_stats(xs, lt, own, None, 0.0, None)


# ----------------------------------------------------------------------------- the fused path


def _op_on_two_ranks(monkeypatch, which, x, t, w, *, reduction, upstream=None, tw=None, **kw):
    """(loss, z-loss, the gradient [N, V]) of the op on two simulated ranks, with PASSES=`which`."""
    from ligerbench.kernels.vocab_parallel_cross_entropy import vocab_parallel_cross_entropy

    monkeypatch.setattr(vp, "PASSES", which)

    def rank(r, group):
        lo, hi = ((0, SPLIT), (SPLIT, V))[r]
        leaf = x[:, lo:hi].clone().requires_grad_(True)
        loss, z = vocab_parallel_cross_entropy(
            leaf, t, group=group, vocab_start=lo, reduction=reduction, token_weight=tw, return_z_loss=True,
            class_weight_shard=None if w is None else w[lo:hi], ignore_index=IGNORE, **kw,
        )  # fmt: skip
        loss.backward(upstream if reduction == "none" else torch.tensor(1.5))
        return loss.detach(), z, leaf.grad

    (l0, z0, g0), (l1, z1, g1) = run_ranks(2, rank)
    assert torch.equal(l0, l1) and torch.equal(z0, z1), "the ranks disagree on the loss"
    return l0, z0, torch.cat([g0, g1], dim=1)


# every reduction in float32; bf16 once (mean): its rounding is the same in every reduction
@pytest.mark.interpreter  # CPU tensors through the Triton passes
@pytest.mark.parametrize(
    "reduction, dtype",
    [("none", torch.float32), ("mean", torch.float32), ("sum", torch.float32), ("mean", torch.bfloat16)],
)
@pytest.mark.parametrize("name", list(OPTIONS))
def test_the_fused_path_matches_the_pytorch_one(monkeypatch, name, reduction, dtype):
    """Loss, z-loss and gradient of the fused path (statistics kernel, finishing kernel) within
    a rounding or two of the PyTorch path's, on a problem with a confident row, targets on both
    shard edges, ignored rows, token weights and a random upstream."""
    opts = dict(OPTIONS[name])
    x, t, w = _problem(dtype)
    w = w if opts.pop("class_weight", False) else None
    g = torch.Generator().manual_seed(5)
    tw, up = torch.rand(N, generator=g) + 0.5, torch.rand(N, generator=g) - 0.3
    ref = _op_on_two_ranks(monkeypatch, "torch", x, t, w, reduction=reduction, upstream=up, tw=tw, **opts)
    got = _op_on_two_ranks(monkeypatch, "fused", x, t, w, reduction=reduction, upstream=up, tw=tw, **opts)
    for what, a, b in zip(("loss", "z_loss"), got[:2], ref[:2], strict=True):
        torch.testing.assert_close(a, b, rtol=4e-6, atol=1e-6, msg=f"{what} differs")
    if reduction == "none":
        assert torch.equal(got[0][[5, 9]], torch.zeros(2)), "ignored rows' loss not 0"
    grad, ref_grad = got[2].float(), ref[2].float()
    assert torch.equal(grad[[5, 9]], torch.zeros_like(grad[[5, 9]])), "ignored rows' gradient not 0"
    # the row sums come from two implementations (a Triton block sum, a PyTorch sum), a few ulps
    # apart, and every probability of the row inherits that: 4 roundings of the dtype
    err = (grad - ref_grad).abs().amax() / ref_grad.abs().amax()
    assert err <= 4 * torch.finfo(dtype).eps, f"{name} {reduction} {dtype}: gradient {err:.3g} apart"


@pytest.mark.interpreter  # CPU tensors through the Triton passes
def test_the_fused_path_is_the_one_that_runs(monkeypatch):
    """The op on "fused" goes through the finishing kernel (a planted failure there surfaces);
    a subclass that replaces OWNS (a planted bug) and says FUSED = False takes the staged path,
    where OWNS runs; one that leaves FUSED alone takes the fused path."""
    x, t, w = _problem(torch.float32)

    def broken(*a, **k):
        raise RuntimeError("the finishing kernel ran")

    monkeypatch.setattr(vp.passes, "finish", broken)
    with pytest.raises(RuntimeError, match="the finishing kernel ran"):
        _op_on_two_ranks(monkeypatch, "fused", x, t, None, reduction="sum")
    _op_on_two_ranks(monkeypatch, "triton", x, t, None, reduction="sum")  # staged: not called

    seen = []

    class Planted(vp.VocabParallelCrossEntropyFunction):
        OWNS = staticmethod(lambda *a: seen.append(1) or vp.owns(*a))
        FUSED = False

    monkeypatch.setattr(vp, "PASSES", "fused")  # the finishing kernel still broken: not reached
    xs, ts = x[:, :V].clone().requires_grad_(True), t
    Planted.apply(xs, ts, None, None, None, 0, IGNORE, "sum", 0.0, None, 0.0, False, True)
    assert seen == [1]

    class Undeclared(Planted):
        FUSED = True

    with pytest.raises(RuntimeError, match="the finishing kernel ran"):
        Undeclared.apply(xs, ts, None, None, None, 0, IGNORE, "sum", 0.0, None, 0.0, False, True)


def _layout_call(which, monkeypatch, *, target=None, starts=(0, SPLIT), check="device"):
    from ligerbench.kernels.vocab_parallel_cross_entropy import vocab_parallel_cross_entropy

    monkeypatch.setattr(vp, "PASSES", which)
    x, t, _ = _problem(torch.float32)
    t = t if target is None else target

    def rank(r, group):
        lo, hi = ((0, SPLIT), (SPLIT, V))[r]
        return vocab_parallel_cross_entropy(
            x[:, lo:hi], t, group=group, vocab_start=starts[r], ignore_index=IGNORE, reduction="none",
            check_targets=check,
        )  # fmt: skip

    return run_ranks(2, rank)


@pytest.mark.interpreter  # CPU tensors through the Triton passes
@pytest.mark.parametrize("check", ["device", "host"])
@pytest.mark.parametrize("which", ["torch", "fused"])
def test_the_fused_path_checks_the_layout_as_the_pytorch_one(monkeypatch, which, check):
    """A target past V, shards that overlap or leave a hole: an error on every path (on CPU the
    device check's torch._assert_async raises RuntimeError; the host check a ValueError)."""
    err = RuntimeError if check == "device" else ValueError
    _, t, _ = _problem(torch.float32)
    for target, starts in ((t.clone().index_fill_(0, torch.tensor([3]), V), (0, SPLIT)),  # past V
                           (t, (0, 0)),  # overlap (and a hole at the end)
                           (t, (0, SPLIT + 1)),  # a hole between the shards
                           (t, (SPLIT, 0))):  # out of rank order: fine  # fmt: skip
        if starts == (SPLIT, 0):
            continue
        with pytest.raises(err, match="outside|do not tile"):
            _layout_call(which, monkeypatch, target=target, starts=starts, check=check)
    assert all(torch.isfinite(loss).all() for loss in _layout_call(which, monkeypatch, check=check))
    bad_t = t.clone().index_fill_(0, torch.tensor([3]), V)
    for loss in _layout_call(which, monkeypatch, target=bad_t, check=False):  # unchecked: NaN there
        assert torch.isnan(loss[3]) and torch.isfinite(loss[[0, 1, 2]]).all()


# the whole ops with the Triton passes, against the float64 truth (the checks of
# tests/test_vp_ce_op.py and tests/test_vp_flce_op.py): world 1 (no collective), 2 and 3 (uneven)
@pytest.mark.interpreter  # CPU tensors through the Triton passes
@pytest.mark.parametrize("which", ["triton", "fused"])
@pytest.mark.parametrize("world", [1, 2, 3])
@pytest.mark.parametrize("name", list(CE_CONFIGS))
def test_vp_ce_with_the_triton_passes_meets_the_rule(monkeypatch, world, name, which):
    monkeypatch.setattr(vp, "PASSES", which)
    run_ranks(world, lambda rank, group: ce_check_rank(rank, group, world, name))


@pytest.mark.interpreter  # CPU tensors through the Triton passes
@pytest.mark.parametrize("world", [1, 2])
@pytest.mark.parametrize("name", list(FLCE_CONFIGS))
def test_vp_flce_with_the_triton_passes_meets_the_rule(monkeypatch, world, name):
    monkeypatch.setattr(vp, "PASSES", "triton")
    run_ranks(world, lambda rank, group: flce_check_rank(rank, group, world, name))


@pytest.mark.parametrize(
    "device", [pytest.param("cpu", marks=pytest.mark.interpreter), pytest.param("cuda", marks=pytest.mark.gpu)]
)
@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_the_fused_path_takes_an_empty_shard(monkeypatch, reduction, device):
    """V=2 over 3 ranks: the last shard is empty (its kernels get stand-in pointers and touch
    nothing: compiled Triton refuses a tensor without memory); every rank's loss and gradient
    equal the PyTorch path's. On CPU through the interpreter, on a GPU compiled."""
    from ligerbench.kernels.vocab_parallel_cross_entropy import vocab_parallel_cross_entropy
    from ligerbench.suites.vp_ce.spec import shard_bounds

    g = torch.Generator().manual_seed(2)
    x, t = torch.randn(6, 2, generator=g).to(device), torch.tensor([0, 1, 1, -100, 0, 1], device=device)
    bounds = shard_bounds(2, 3)
    assert bounds[-1][0] == bounds[-1][1], "the last shard should be empty"

    def run(which):
        monkeypatch.setattr(vp, "PASSES", which)

        def rank(r, group):
            lo, hi = bounds[r]
            leaf = x[:, lo:hi].clone().requires_grad_(True)
            loss = vocab_parallel_cross_entropy(leaf, t, group=group, vocab_start=lo, reduction=reduction)
            loss.backward(torch.ones_like(loss))
            return loss.detach(), leaf.grad

        return run_ranks(3, rank)

    ref, got = run("torch"), run("fused")
    for (l_ref, g_ref), (l_got, g_got) in zip(ref, got, strict=True):
        torch.testing.assert_close(l_got, l_ref, rtol=4e-6, atol=1e-6)
        torch.testing.assert_close(g_got, g_ref, rtol=4e-6, atol=1e-6)
    assert got[-1][1].shape == (6, 0)


@pytest.mark.interpreter  # CPU tensors through the Triton passes
@pytest.mark.parametrize("which", ["torch", "triton", "fused"])
@pytest.mark.parametrize("class_weight", [False, True])
def test_label_smoothing_keeps_its_digits_on_far_shifted_logits(monkeypatch, which, class_weight):
    """Logits 1e4 + N(0, 1) in float32: W * lse and sum_j w_j x_j are both about 1e4 * W and
    their difference (the smoothing term) is about W * log V. Taken as a subtraction it kept
    ~3 of its digits (error ~6e-4 relative, far over the rule's limit: PyTorch eager takes it
    from log_softmax); as W * log s + sum_j w_j (m - x_j) it keeps them all."""
    from ligerbench import tolerance
    from ligerbench.kernels.vocab_parallel_cross_entropy import vocab_parallel_cross_entropy
    from ligerbench.suites.ce.spec import ce_torch

    monkeypatch.setattr(vp, "PASSES", which)
    g = torch.Generator().manual_seed(4)
    x = 1e4 + torch.randn(N, V, generator=g)
    t = torch.randint(0, V, (N,), generator=g)
    w = torch.rand(V, generator=g) + 0.5 if class_weight else None
    opts = dict(reduction="none", label_smoothing=0.3)

    def rank(r, group):
        lo, hi = ((0, SPLIT), (SPLIT, V))[r]
        cw = None if w is None else w[lo:hi]
        return vocab_parallel_cross_entropy(x[:, lo:hi], t, group=group, vocab_start=lo, class_weight_shard=cw, **opts)

    got = run_ranks(2, rank)[0]
    truth, _ = ce_torch(x.double(), t, weight=None if w is None else w.double(), **opts)
    eager, _ = ce_torch(x, t, weight=w, **opts)
    err, limit = tolerance.rel_error(got, truth), tolerance.limit_for(tolerance.rel_error(eager, truth), torch.float32)
    assert err <= limit, f"{which}: smoothing loss error {err:.3g} > limit {limit:.3g}"
