"""Per-row inputs as callers hand them: the upstream of `loss.sum().backward()` (a 1 expanded
over the rows: stride 0, one element of storage) and 1-D targets and token weights with a
stride (a column of a larger tensor). Our ce and flce read the expanded upstream row by row past
its storage until 508b573 (docs/bugs.md, bug 8); the harness hands that upstream as autograd does."""

import pytest
import torch
import torch.nn.functional as F

from ligerbench import tolerance
from ligerbench.cases import draw_upstream
from ligerbench.kernels.cross_entropy import cross_entropy
from ligerbench.kernels.fused_linear_cross_entropy import fused_linear_cross_entropy
from ligerbench.problems import as_handed, upstream_for
from ligerbench.suites.ce.axes import case as ce_case
from ligerbench.suites.common.input_mutants import upstream_read_dense

N, V, H = 24, 97, 16


def test_the_ones_upstream_of_reduction_none_is_what_autograd_hands():
    up = draw_upstream(ce_case(n=N, v=V, reduction="none", upstream="ones"), (N,), torch.Generator().manual_seed(0))
    handed = torch.ones(N, requires_grad=True)
    handed.register_hook(lambda g: seen.append(g))
    seen = []
    handed.sum().backward()
    assert up.stride() == seen[0].stride() == (0,) and bool((up == 1).all())
    loss16 = torch.zeros(4, 6, dtype=torch.bfloat16)
    kept = upstream_for(loss16, up.view(4, 6), "none", (4, 6))
    assert kept.stride() == (0, 0) and kept.dtype == torch.bfloat16  # a dtype change keeps it expanded
    dense = torch.rand(N)
    assert as_handed(dense, dtype=torch.float64).stride() == (1,)  # a materialised one stays materialised


def test_the_planted_dense_read_is_right_on_a_materialised_upstream_only():
    ones = torch.ones(N)
    assert torch.equal(upstream_read_dense(ones), ones)  # why a materialised upstream could not catch it
    wrong = upstream_read_dense(torch.ones(()).expand(N))
    assert wrong[0] == 1 and bool((wrong[1:] == 0).all())


def _truth_ce(x, t, tw=None):
    xr = x.detach().double().requires_grad_()
    loss = F.cross_entropy(xr, t, reduction="none", ignore_index=-100)
    if tw is not None:
        loss = loss * tw.double()
    return loss, xr


@pytest.mark.parametrize("backward", ["sum", "mean"])
def test_ce_none_through_an_expanded_upstream(device, backward):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(N, V, generator=g).to(device).requires_grad_()
    t = torch.randint(0, V, (N,), generator=g).to(device)
    t[3] = -100
    loss = cross_entropy(x, t, reduction="none")
    getattr(loss, backward)().backward()  # autograd hands backward a stride-0 upstream
    ref, xr = _truth_ce(x, t)
    getattr(ref, backward)().backward()
    assert tolerance.rel_error(x.grad, xr.grad) < 1e-6


def test_ce_reads_a_strided_target_and_token_weight(device):
    g = torch.Generator().manual_seed(2)
    x = torch.randn(N, V, generator=g).to(device).requires_grad_()
    t = torch.randint(0, V, (N, 3), generator=g).to(device)[:, 1]  # stride 3
    tw = (torch.rand(N, 2, generator=g) + 0.5).to(device)[:, 0]  # stride 2
    assert t.stride() == (3,) and tw.stride() == (2,)
    loss = cross_entropy(x, t, reduction="none", token_weight=tw)
    loss.sum().backward()
    ref, xr = _truth_ce(x, t, tw)
    ref.sum().backward()
    assert tolerance.rel_error(loss, ref) < 1e-6 and tolerance.rel_error(x.grad, xr.grad) < 1e-6


def test_flce_none_through_an_expanded_upstream(device):
    g = torch.Generator().manual_seed(3)
    h = torch.randn(N, H, generator=g).to(device).requires_grad_()
    w = torch.randn(V, H, generator=g).to(device).requires_grad_()
    t = torch.randint(0, V, (N,), generator=g).to(device)
    fused_linear_cross_entropy(h, w, t, reduction="none", chunk_tokens=7).sum().backward()  # 4 chunks
    hr, wr = h.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    F.cross_entropy(hr @ wr.T, t, reduction="none").sum().backward()
    assert tolerance.rel_error(h.grad, hr.grad) < 1e-6 and tolerance.rel_error(w.grad, wr.grad) < 1e-6


@pytest.mark.parametrize("op", ["lp", "flp"])
def test_log_probs_through_expanded_upstreams_and_a_strided_target(device, op):
    """logp.sum() + entropy.sum(): both upstreams expanded; the target a column of a larger tensor."""
    from ligerbench.kernels.fused_linear_log_probs import fused_linear_log_probs
    from ligerbench.kernels.log_probs import log_probs

    g = torch.Generator().manual_seed(4)
    h = torch.randn(N, H, generator=g).to(device).requires_grad_()
    w = torch.randn(V, H, generator=g).to(device).requires_grad_()
    t = torch.randint(0, V, (N, 2), generator=g).to(device)[:, 1]
    if op == "lp":
        x = (h @ w.T).detach().requires_grad_()
        logp, ent = log_probs(x, t, temperature=0.7)
        leaves, ref_leaves = [x], [x.detach().double().requires_grad_()]
        z = ref_leaves[0] / 0.7
    else:
        logp, ent = fused_linear_log_probs(h, w, t, temperature=0.7, chunk_rows=7)
        leaves = [h, w]
        ref_leaves = [h.detach().double().requires_grad_(), w.detach().double().requires_grad_()]
        z = (ref_leaves[0] @ ref_leaves[1].T) / 0.7
    (logp.sum() + ent.sum()).backward()
    lsm = torch.log_softmax(z, -1)
    ref_logp = lsm.gather(1, t[:, None]).squeeze(1)
    (ref_logp.sum() - (lsm.exp() * lsm).sum()).backward()
    assert tolerance.rel_error(logp, ref_logp) < 1e-5
    for got, ref in zip(leaves, ref_leaves, strict=True):
        assert tolerance.rel_error(got.grad, ref.grad) < 1e-5
