"""Bad input to the cross-entropy kernel: a clear error naming the argument, or the result
PyTorch gives."""

import pytest
import torch
import torch.nn.functional as F

from helpers import run
from ligerbench import tolerance
from ligerbench.kernels.cross_entropy import cross_entropy

V = 7


def _xt(device, n=4):
    g = torch.Generator().manual_seed(0)
    return torch.randn(n, V, generator=g).to(device), torch.randint(0, V, (n,), generator=g).to(device)


@pytest.mark.parametrize(
    "mutate,match",
    [
        (lambda x, t: (x, t.float()), "target must be int64 or int32"),
        (lambda x, t: (x, t[:2]), "target shape"),
        (lambda x, t: (x, t.to("meta")), "target is on meta"),
        (lambda x, t: (x[0], t[0]), "logits must be 2-D"),
        (lambda x, t: (x.view(1, 2, 2, V), t.view(1, 2, 2)), "logits must be 2-D"),
        (lambda x, t: (x.long(), t), "logits must be float32, bfloat16 or float16"),
    ],
    ids=["target-dtype", "target-shape", "target-device", "logits-1d", "logits-4d", "logits-dtype"],
)
def test_bad_arguments_are_named(device, mutate, match):
    x, t = mutate(*_xt(device))
    with pytest.raises((ValueError, TypeError), match=match):
        cross_entropy(x, t)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"reduction": "avg"}, "reduction must be one of"),
        ({"label_smoothing": 1.5}, "label_smoothing"),
        ({"softcap": -1.0}, "softcap must be positive"),
        ({"weight": torch.ones(V + 1)}, "weight must have shape"),
        ({"token_weight": torch.ones(3)}, "token_weight must have"),
    ],
)
def test_bad_options_are_named(device, kwargs, match):
    x, t = _xt(device)
    kwargs = {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in kwargs.items()}
    with pytest.raises(ValueError, match=match):
        cross_entropy(x, t, **kwargs)


@pytest.mark.parametrize("bad", [V, -3, 10**6])
def test_target_out_of_range(device, bad):
    x, t = _xt(device)
    t[1] = bad
    # the default checks on the host on CPU; on a GPU it checks on the device, where a failure
    # ends the CUDA context (tests/test_no_sync.py runs that in a child process)
    with pytest.raises(ValueError, match=f"target holds {bad}"):
        cross_entropy(x, t, check_targets="host")
    if device == "cpu":
        with pytest.raises(ValueError, match=f"target holds {bad}"):
            cross_entropy(x, t)


@pytest.mark.interpreter  # CPU tensors: needs the interpreter
@pytest.mark.parametrize("bad", [V, -3])
def test_device_check_flags_out_of_range_target(bad):
    # the device check on CPU: the kernel's flag, then torch._assert_async raises at once
    x, t = _xt("cpu")
    t[2] = bad
    with pytest.raises(RuntimeError, match=rf"outside \[0, {V}\)"):
        cross_entropy(x, t, check_targets="device")
    t[2] = -100  # ignore_index is no error
    assert torch.isfinite(cross_entropy(x, t, check_targets="device"))


def test_check_targets_keyword_is_validated(device):
    x, t = _xt(device)
    with pytest.raises(ValueError, match="check_targets must be one of"):
        cross_entropy(x, t, check_targets="sometimes")


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_zero_tokens_match_pytorch(device, reduction):
    x, t = torch.zeros(0, V, device=device), torch.zeros(0, dtype=torch.long, device=device)
    ours, g_ours = run(cross_entropy, x, t, reduction=reduction)
    theirs, g_theirs = run(F.cross_entropy, x.double(), t, reduction=reduction)
    assert ours.shape == theirs.shape and g_ours.shape == g_theirs.shape == (0, V)
    assert tolerance.rel_error(ours, theirs) == 0.0  # NaN for mean, 0 for sum, [] for none


@pytest.mark.parametrize("reduction", ["none", "sum"])
def test_nan_and_inf_propagate_as_in_pytorch(device, reduction):
    x, t = _xt(device)
    t[:] = torch.tensor([0, 0, 0, 1])
    x[1, 2] = float("nan")  # NaN in a row: NaN loss and gradient for that row
    x[2, 3] = float("inf")  # +inf: NaN, as log_softmax gives
    x[3, :1] = float("-inf")  # -inf on a non-target class (a masked vocabulary): finite
    ours, g_ours = run(cross_entropy, x, t, reduction=reduction)
    theirs, g_theirs = run(F.cross_entropy, x.double(), t, reduction=reduction)
    # rel_error demands NaN and inf exactly where the reference has them
    assert tolerance.rel_error(ours, theirs) < 1e-6
    assert tolerance.rel_error(g_ours, g_theirs) < 1e-6


def test_very_large_logits_stay_finite(device):
    x, t = _xt(device)
    x = x * 1e4
    ours, g_ours = run(cross_entropy, x, t, reduction="none")
    theirs, g_theirs = run(F.cross_entropy, x.double(), t, reduction="none")
    assert torch.isfinite(ours).all() and torch.isfinite(g_ours).all()
    assert tolerance.rel_error(ours, theirs) < 1e-6
    assert tolerance.rel_error(g_ours, g_theirs) < 1e-6


@pytest.mark.gpu
@pytest.mark.slow
def test_more_than_2_31_elements(device):
    """N * V > 2**31: row offsets must be 64-bit. Checked on a few rows at each end."""
    n, v = 17000, 128256
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(n, v, device="cuda", dtype=torch.bfloat16, generator=g)
    t = torch.randint(0, v, (n,), device="cuda", generator=g)
    assert x.numel() > 2**31
    xo = x.detach().requires_grad_()
    loss = cross_entropy(xo, t, reduction="none")
    loss.sum().backward()
    rows = torch.cat([torch.arange(0, 8), torch.arange(n - 8, n)]).cuda()
    xr = x[rows].double().requires_grad_()
    ref = F.cross_entropy(xr, t[rows], reduction="none")
    ref.sum().backward()
    assert tolerance.rel_error(loss[rows], ref) < 1e-5
    assert tolerance.rel_error(xo.grad[rows], xr.grad) < 1e-2  # bf16 gradient
