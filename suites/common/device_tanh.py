"""A softcap's tanh as a GPU may give it: a textbook yardstick form (ligerbench/tolerance.py).

Users write a softcap as softcap * tanh(x / softcap), its slope 1 - tanh^2, with whatever tanh
their device has; CUDA's tanhf and libdevice's tanh promise 2 ulps, not the correctly rounded
value. Where |tanh| -> 1 the slope cancels, and one ulp of tanh moves it far more than a
rounding: on an H100 (softcap_slope_probe.py, results/README.md#where-the-probes-went) Liger's cross
entropy (libdevice tanh) landed 1.06-3.1x PyTorch's error on large and confident float32 rows,
PyTorch with the correctly rounded tanh where PyTorch lands, and with every tanh one ulp toward 0
4-25x farther. A draw of which elements are off is no yardstick: a few saturated elements carry
the error, and on CPU one draw passed where another of the same size failed 10 checks of 968.
So the form moves every element one ulp toward 0, each slope its largest one-ulp change, and
FACTOR (2) leaves the second ulp the device may take. Where the slope does not cancel (|tanh|
well below 1) an ulp of tanh is an ulp of the slope, and nothing changes."""

from __future__ import annotations

import torch


class _TanhAsGiven(torch.autograd.Function):
    @staticmethod
    def forward(ctx, u, t):
        ctx.save_for_backward(t)
        return t

    @staticmethod
    def backward(ctx, grad):
        (t,) = ctx.saved_tensors
        return grad * (1 - t * t), None  # the slope from the tanh returned, as autograd's tanh forms it


def tanh_as_given(u: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """`t` standing for tanh(u) (another device's, or a moved one), its slope 1 - t^2 formed from
    t as autograd forms torch.tanh's from its output."""
    return _TanhAsGiven.apply(u, t.detach())


def forms_on(forms: tuple, softcap: float | None) -> tuple:
    """The textbook forms that differ on a case: "tanh_ulp" (the softcap's tanh one ulp nearer
    0) only where there is a softcap."""
    return tuple(f for f in forms if softcap or f != "tanh_ulp")


def tanh_one_ulp_low(u: torch.Tensor) -> torch.Tensor:
    """tanh(u) with every float32 element one ulp nearer 0, its slope 1 - t^2 of the value
    returned. Other dtypes get torch.tanh (the 16-bit yardsticks run in float32)."""
    if u.dtype != torch.float32:
        return torch.tanh(u)
    t = torch.tanh(u.detach())
    return tanh_as_given(u, torch.nextafter(t, torch.zeros_like(t)))
