"""A backward that writes each column from that column alone may run one block a program (a
2-D grid: kernels/log_probs.py split_blocks, BWD_SPLIT) instead of one program walking the row:
the same bits, ignored rows and a top-K teacher's gradient included; and never where the
gradient lies under the logits of its own row (fp32_products.grad_under_logits), where only a
program walking the row in order may write."""

from __future__ import annotations

import pytest
import torch

from ligerbench.kernels import distill, log_probs
from ligerbench.kernels.fp32_products import grad_under_logits

pytestmark = pytest.mark.interpreter


@pytest.fixture
def split(monkeypatch):
    def on(config=(64, 4)):
        monkeypatch.setitem(log_probs.BWD_SPLIT, "cpu", config)
        monkeypatch.setitem(distill.BWD_SPLIT, "cpu", config)

    return on


def _lp_grad(logits, grad, softcap):
    g = torch.Generator().manual_seed(1)
    n, v = logits.shape
    target = torch.randint(0, v, (n, 2), generator=g)
    target[1] = -100  # an ignored row
    target[3, 1] = -100
    opts = dict(temperature=0.7, softcap=softcap, logit_scale=1.0, ignore_index=-100)
    _, _, stats = log_probs.log_probs_rows(logits, target, **opts)
    dlogp, dent = torch.randn(n, 2, generator=g), torch.randn(n, generator=g)
    return log_probs.log_probs_grad_rows(logits, target, stats, dlogp, dent, grad, **opts)


@pytest.mark.parametrize("softcap", [None, 20.0])
def test_log_probs_backward_split_gives_the_same_bits(split, softcap):
    logits = 4 * torch.randn(6, 301, generator=torch.Generator().manual_seed(0))
    want = _lp_grad(logits, torch.empty(6, 301, dtype=torch.bfloat16), softcap)
    split()
    assert log_probs.split_blocks(logits, want, log_probs.BWD_SPLIT["cpu"])
    got = _lp_grad(logits, torch.empty(6, 301, dtype=torch.bfloat16), softcap)
    assert torch.equal(got, want) and want.abs().max() > 0
    inplace = logits.clone()  # the gradient over its own logits, block for block: still split
    assert log_probs.split_blocks(inplace, inplace, (64, 4))
    assert torch.equal(_lp_grad(inplace, inplace, softcap), _lp_grad(logits.clone(), torch.empty(6, 301), softcap))


def test_no_split_where_the_gradient_lies_under_the_logits_of_its_row():
    logits = torch.randn(4, 300)
    assert not log_probs.split_blocks(logits, grad_under_logits(logits, torch.bfloat16), (64, 4))
    assert not log_probs.split_blocks(logits, torch.empty(4, 300), None)  # no config: the row walk


def test_distillation_backward_split_gives_the_same_bits(split):
    g = torch.Generator().manual_seed(2)
    n, v, k = 5, 301, 7
    student = 3 * torch.randn(n, v, generator=g)
    teacher_lp = torch.log_softmax(torch.randn(n, k, generator=g), -1)
    ids = torch.stack([torch.randperm(v, generator=g)[:k] for _ in range(n)])
    labels = torch.tensor([0, -100, 2, 3, 4])
    opts = dict(divergence="jsd", beta=0.3, temperature=1.5, ignore_index=-100)
    _, stats = distill.distill_rows(student, teacher_lp, ids, labels, **opts)
    scale = torch.full((n,), 0.5)

    def grads():
        gs, gt = torch.empty(n, v), torch.empty(n, k)
        distill.distill_grad_rows(student, teacher_lp, ids, labels, stats, scale, gs, gt, **opts)
        return gs, gt

    want = grads()
    split()
    got = grads()
    for a, b in zip(got, want, strict=True):
        assert torch.equal(a, b) and b.abs().max() > 0
