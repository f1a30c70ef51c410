"""kernels/distill.py against the float64 semantics (suites/families/distill.py), directly:
every divergence against each teacher it allows, the teacher's gradient only when asked, a
self-distilled teacher's exact zero, and the refusals."""

from __future__ import annotations

import pytest
import torch

from ligerbench.kernels import cross_entropy as ce_module
from ligerbench.kernels.distill import distill_loss
from ligerbench.suites.families import distill as semantics

V = 300  # under one block: a partial block masked


def _inputs(n=6, v=V, k=None, seed=0):
    g = torch.Generator().manual_seed(seed)
    s = torch.randn(n, v, generator=g)
    t = torch.randn(n, v, generator=g) * 2.0
    labels = torch.randint(0, v, (n,), generator=g)
    labels[1] = -100
    if k is None:
        return s, t, None, labels
    logp, ids = semantics.top_k(t, k)
    return s, logp, ids, labels


def _both(s, t, ids, labels, **options):
    """(loss, grad student, grad teacher) of ours and of the float64 semantics."""
    out = []
    for fn, dtype in ((distill_loss, torch.float32), (semantics.reference, torch.float64)):
        x = s.to(dtype).clone().requires_grad_(True)
        y = t.to(dtype).clone().requires_grad_(True)
        loss = fn(x, y, labels, teacher_ids=ids, **options)
        loss.sum().backward()
        out.append((loss.detach().double(), x.grad, y.grad))
    return out


# every divergence and jsd's ends (taken exactly), each against a full and a top-K teacher
# (reverse KL is infinite against a top-K teacher: refused, tested below)
@pytest.mark.interpreter
@pytest.mark.parametrize("divergence, beta", [("forward_kl", 0.5), ("reverse_kl", 0.5), ("jsd", 0.5), ("jsd", 0.1),
                                              ("jsd", 0.0), ("jsd", 1.0), ("tvd", 0.5)])  # fmt: skip
@pytest.mark.parametrize("k", [None, 5])
# every reduction: mean over counted rows, batchmean over all of them
@pytest.mark.parametrize("reduction", ["none", "mean", "batchmean"])
def test_matches_float64(divergence, beta, k, reduction):
    if k is not None and (divergence == "reverse_kl" or beta == 1.0):
        pytest.skip("infinite against a top-K teacher")
    s, t, ids, labels = _inputs(k=k)
    opts = dict(divergence=divergence, beta=beta, temperature=1.7, reduction=reduction, teacher_grad=True)
    (loss, gs, gt), (ref, rs, rt) = _both(s, t, ids, labels, **opts)
    torch.testing.assert_close(loss, ref, rtol=2e-6, atol=1e-7)
    torch.testing.assert_close(gs.double(), rs, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(gt.double(), rt, rtol=1e-5, atol=1e-7)
    assert gs[1].abs().max() == 0 and gt[1].abs().max() == 0  # the ignored row


# 64-column blocks (a GPU's are 1024-8192 wide, so every CPU-sized row would sit in one): each
# side's running max rises and ties between blocks; a row's max met again in a later block, a row
# of equal logits, a padded start with a whole block of -inf (confident rows: the verify suites,
# whose rule allows what float32 logits cost a tiny divergence)
@pytest.mark.interpreter
@pytest.mark.parametrize("divergence, beta", [("forward_kl", 0.5), ("reverse_kl", 0.5), ("jsd", 0.3), ("tvd", 0.5)])
def test_rows_over_several_blocks(divergence, beta, monkeypatch):
    monkeypatch.setattr(ce_module, "_MAX_BLOCK_V", 64)
    s, t, _, labels = _inputs()
    s[0, [3, 200]] = 6.0
    t[0, [70, 250]] = 9.0
    s[2] = 0.5
    t[2, 130] = 3.0
    s[4, :70] = float("-inf")
    t[4, :70] = float("-inf")
    opts = dict(divergence=divergence, beta=beta, temperature=1.3, reduction="none", teacher_grad=True)
    (loss, gs, gt), (ref, rs, rt) = _both(s, t, None, labels, **opts)
    torch.testing.assert_close(loss, ref, rtol=2e-6, atol=1e-7)
    torch.testing.assert_close(gs.double(), rs, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(gt.double(), rt, rtol=1e-5, atol=1e-7)


@pytest.mark.interpreter
@pytest.mark.parametrize("divergence", ["forward_kl", "reverse_kl", "jsd", "tvd"])
def test_self_distillation_is_exactly_zero(divergence):
    s, _, _, labels = _inputs()
    x = s.clone().requires_grad_(True)
    loss = distill_loss(x, s.clone(), labels, divergence=divergence)
    loss.backward()
    assert loss.item() == 0.0 and x.grad.abs().max().item() == 0.0


@pytest.mark.interpreter
def test_a_frozen_teacher_gets_no_gradient_and_nothing_is_written():
    s, t, _, labels = _inputs()
    x, y = s.clone().requires_grad_(True), t.clone().requires_grad_(True)
    distill_loss(x, y, labels, divergence="jsd").backward()
    assert y.grad is None
    assert torch.equal(x.detach(), s) and torch.equal(y.detach(), t)


@pytest.mark.interpreter
def test_mean_of_no_counted_row_is_zero_with_a_zero_gradient():
    s, t, _, labels = _inputs()
    x = s.clone().requires_grad_(True)
    loss = distill_loss(x, t, torch.full_like(labels, -100), divergence="tvd")
    loss.backward()
    assert loss.item() == 0.0 and torch.isfinite(x.grad).all() and x.grad.abs().max() == 0


def test_refusals():
    s, logp, ids, _ = _inputs(k=4)
    with pytest.raises(ValueError, match="infinite"):
        distill_loss(s, logp, teacher_ids=ids, divergence="reverse_kl")
    with pytest.raises(ValueError, match="beta"):
        distill_loss(s, s, divergence="jsd", beta=1.5)
    with pytest.raises(ValueError, match="reduction"):
        distill_loss(s, s, reduction="batchsum")


def test_the_gpu_launch_config_is_the_callers_not_the_row_counts():
    # A block or warp count picked by N sets the order a row's sums are taken in, so a row's bits
    # would depend on the batch around it (kd on an H200: 18 ulp of a loss, 65 of a gradient
    # between a batch of 2048 rows and its first 1024). Only the caller's sub-chunking picks it.
    import inspect

    from ligerbench.kernels import distill

    assert list(inspect.signature(distill._fwd_config).parameters) == ["n_cols", "device", "sub_chunks"]
    cuda = torch.device("cuda")
    assert distill._fwd_config(128256, cuda, False) == (1024, 4)
    assert distill._fwd_config(128256, cuda, True) == (8192, 16)
    assert distill._fwd_config(300, cuda, True) == (512, 16)


# A row's backward over several programs (as a GPU does with a fused head's 128-row sub-chunks):
# blocks a program 1 and 2 of a 300-column row's 5 (64-column blocks); a full and a top-K teacher
# (its K gradients written by one program of the row), an ignored row. Every bit is the whole
# row's, the student's gradient and the teacher's.
@pytest.mark.interpreter
@pytest.mark.parametrize("per_program", [1, 2])
@pytest.mark.parametrize("k", [None, 5])
@pytest.mark.parametrize("divergence", ["forward_kl", "jsd", "tvd"])
def test_a_row_split_over_programs_gives_the_whole_rows_bits(per_program, k, divergence, monkeypatch):
    from ligerbench.kernels import distill as distill_module

    monkeypatch.setattr(ce_module, "_MAX_BLOCK_V", 64)
    s, t, ids, labels = _inputs(k=k, seed=per_program)
    n_rows, n_blocks = s.shape[0], -(-V // 64)
    wanted = n_rows * -(-n_blocks // per_program)
    assert distill_module.blocks_per_program(n_rows, n_blocks, wanted) == per_program
    opts = dict(divergence=divergence, beta=0.3, temperature=1.3, reduction="none", teacher_grad=True)
    got = []
    for programs in (0, wanted):
        monkeypatch.setattr(distill_module, "_CPU_BWD_PROGRAMS", programs)
        x, y = s.clone().requires_grad_(True), t.clone().requires_grad_(True)
        distill_loss(x, y, labels, teacher_ids=ids, **opts).sum().backward()
        got.append((x.grad, y.grad))
    (gs, gt), (split_s, split_t) = got
    assert gs.abs().sum() > 0 and (gt.abs().sum() > 0 or (k, divergence) == (5, "tvd"))  # (its exact 0 there)
    assert torch.equal(split_s, gs) and torch.equal(split_t, gt)
