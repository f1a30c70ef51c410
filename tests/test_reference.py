"""The float64 reference (ligerbench/ce_spec.py) against formulas written out by hand here, so
a mistake in the reference cannot hide behind the kernel agreeing with it."""

import pytest
import torch

from ligerbench.suites.ce.spec import ce_torch

N, V = 10, 13


def _by_hand(x, y, *, weight, ignore_index, reduction, label_smoothing, softcap, z_loss_scale, token_weight):
    if softcap:
        x = softcap * torch.tanh(x / softcap)
    w = weight if weight is not None else torch.ones(V, dtype=x.dtype)
    rows, denom = [], 0.0
    for i in range(N):
        if y[i] == ignore_index:
            rows.append(torch.zeros((), dtype=x.dtype))
            continue
        logp = x[i] - torch.logsumexp(x[i], 0)
        nll = -w[y[i]] * logp[y[i]]
        smooth = -(w * logp).sum() / V
        row = (1 - label_smoothing) * nll + label_smoothing * smooth + z_loss_scale * torch.logsumexp(x[i], 0) ** 2
        rows.append(row * (token_weight[i] if token_weight is not None else 1.0))
        denom += w[y[i]]
    rows = torch.stack(rows)
    return {"none": rows, "sum": rows.sum(), "mean": rows.sum() / denom}[reduction]


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("with_weight", [False, True])
@pytest.mark.parametrize("extras", [{}, {"softcap": 2.0, "z_loss_scale": 0.3, "token_weight": True}])
def test_reference_equals_hand_formula(reduction, with_weight, extras):
    g = torch.Generator().manual_seed(7)
    x = torch.randn(N, V, generator=g, dtype=torch.float64) * 3
    y = torch.randint(0, V, (N,), generator=g)
    y[::3] = -5
    opts = dict(
        weight=torch.rand(V, generator=g, dtype=torch.float64) + 0.1 if with_weight else None,
        ignore_index=-5,
        reduction=reduction,
        label_smoothing=0.2,
        softcap=extras.get("softcap"),
        z_loss_scale=extras.get("z_loss_scale", 0.0),
        token_weight=torch.rand(N, generator=g, dtype=torch.float64) if extras.get("token_weight") else None,
    )
    got, _ = ce_torch(x, y, **opts)
    torch.testing.assert_close(got, _by_hand(x, y, **opts), rtol=1e-12, atol=1e-12)
