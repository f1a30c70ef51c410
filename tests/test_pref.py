"""kernels/preference_loss.py against hand-written formulas on small numbers, its argument checks,
and the split recipe (docstring, 'Splitting a step'). The float64 checks over the case grid are
`ligerbench verify --kernel pref` (tests/test_selftest.py runs its planted bugs)."""

from __future__ import annotations

import math

import pytest
import torch

from ligerbench.kernels.preference_loss import preference_from_log_probs, preference_loss, sequence_log_probs

pytestmark = pytest.mark.interpreter


def test_dpo_sigmoid_with_label_smoothing_by_hand():
    logps = torch.tensor([-3.0, -5.0, -4.0, -4.5], dtype=torch.float64)  # chosen 0, 1; rejected 2, 3
    ref = torch.tensor([-3.5, -5.0, -4.2, -4.0], dtype=torch.float64)
    h = [0.1 * ((0.5) - (0.2)), 0.1 * ((0.0) - (-0.5))]

    def nls(x):  # -log sigmoid(x)
        return math.log1p(math.exp(-x))

    want = sum(0.9 * nls(x) + 0.1 * nls(-x) for x in h) / 2
    got = preference_from_log_probs(logps, ref, torch.ones(4), loss_type="sigmoid", beta=0.1, label_smoothing=0.1)
    assert got.item() == pytest.approx(want, rel=1e-12)


def test_ipo_averages_each_sequence_over_its_tokens():
    logps = torch.tensor([-6.0, -9.0], dtype=torch.float64)
    ref = torch.tensor([-8.0, -8.0], dtype=torch.float64)
    lengths = torch.tensor([2, 3])
    h = (2.0 / 2) - (-1.0 / 3)
    want = (h - 1 / (2 * 0.5)) ** 2
    assert preference_from_log_probs(logps, ref, lengths, loss_type="ipo", beta=0.5).item() == pytest.approx(want)


def test_kto_reference_point_is_clamped_detached_and_weighted():
    logps = torch.tensor([-1.0, -2.0, -3.0], dtype=torch.float64, requires_grad=True)
    ref = torch.tensor([-2.0, -1.0, -3.5], dtype=torch.float64)
    desirable = torch.tensor([True, False, True])
    r = [1.0, -1.0, 0.5]
    z = max(0.0, sum(r) / 3)

    def sig(x):
        return 1 / (1 + math.exp(-x))

    want = (1.0 * (1 - sig(0.5 * (r[0] - z))) + 2.0 * (1 - sig(0.5 * (z - r[1]))) + (1 - sig(0.5 * (r[2] - z)))) / 3
    got = preference_from_log_probs(logps, ref, torch.ones(3), loss_type="kto", beta=0.5, desirable=desirable,
                                    undesirable_weight=2.0)  # fmt: skip
    assert got.item() == pytest.approx(want, rel=1e-12)
    got.backward()
    # detached point: d loss / d logp_0 has only row 0's own term
    s0 = sig(0.5 * (r[0] - z))
    assert logps.grad[0].item() == pytest.approx(-0.5 * s0 * (1 - s0) / 3, rel=1e-9)
    negative = preference_from_log_probs(logps.detach(), ref, torch.ones(3), loss_type="kto", beta=0.5,
                                         desirable=desirable, kl_ref=-4.0)  # fmt: skip
    zero = preference_from_log_probs(logps.detach(), ref, torch.ones(3), loss_type="kto", beta=0.5,
                                     desirable=desirable, kl_ref=0.0)  # fmt: skip
    assert negative.item() == zero.item()  # a negative KL estimate is clamped to 0


def test_sequence_log_probs_sum_the_completion_tokens_only():
    g = torch.Generator().manual_seed(0)
    hidden, weight = torch.randn(2, 5, 8, generator=g), torch.randn(30, 8, generator=g)
    ids = torch.randint(0, 30, (2, 5), generator=g)
    mask = torch.tensor([[1, 1, 0, 0, 0], [1, 1, 1, 1, 1]])
    z = torch.log_softmax(hidden.double() @ weight.double().T, -1).gather(-1, ids[..., None]).squeeze(-1)
    want = (z * mask).sum(-1)
    assert torch.allclose(sequence_log_probs(hidden, weight, ids, mask).double(), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(loss_type="orpo"), "loss_type"),
        (dict(beta=0.0), "beta"),
        (dict(loss_type="ipo", label_smoothing=0.1), "sigmoid loss only"),
        (dict(loss_type="kto"), "desirable"),
    ],
)
def test_bad_arguments_are_named(kwargs, message):
    hidden, weight = torch.randn(4, 3, 8), torch.randn(16, 8)
    ids, mask = torch.zeros(4, 3, dtype=torch.long), torch.ones(4, 3, dtype=torch.long)
    with pytest.raises(ValueError, match=message):
        preference_loss(hidden, weight, ids, mask, torch.zeros(4), **kwargs)


def test_paired_losses_need_an_even_batch():
    with pytest.raises(ValueError, match="even"):
        preference_loss(torch.randn(3, 2, 8), torch.randn(16, 8), torch.zeros(3, 2, dtype=torch.long),
                        torch.ones(3, 2, dtype=torch.long), torch.zeros(3))  # fmt: skip
