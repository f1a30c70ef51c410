"""lp's and flp's textbook yardsticks with a softcap (ligerbench/tolerance.py): beside
log_softmax and x_t - logsumexp, the softcap's tanh one ulp nearer 0 (suites/common/device_tanh.py),
as ce's has had since 99d129c.

Why: a softcap's slope 1 - tanh^2 cancels where |tanh| -> 1, and a device's tanh (CUDA's and
libdevice's promise 2 ulps) moves it far more than a rounding. Before the form, on CPU, PyTorch's
log-probs with a tanh one ulp off on half the elements failed lp's default verdict on 2 checks
of 48 at each of seeds 0 and 1 (grad_logits at 1.46x and 1.78x the limit); so did every tanh one
ulp nearer 0 (1.90x, 1.92x)."""

from __future__ import annotations

import pytest
import torch

from ligerbench.suites.common.device_tanh import tanh_as_given
from ligerbench.suites.families import log_prob as semantics
from ligerbench.testing import run_provider

SOFTCAP = dict(dtype="fp32", softcap=30.0)


def _log_probs_with(tanh):
    """PyTorch's log-probs and entropy as users write them, the softcap's tanh given by
    `tanh(u)` (a float32 tensor)."""

    def fn(logits, target, *, temperature=1.0, softcap=None, logit_scale=1.0, ignore_index=-100):
        z = logit_scale * logits
        if softcap:
            u = z / softcap
            z = torch.where(z == float("-inf"), z, softcap * tanh_as_given(u, tanh(u.detach())))
        return semantics.reference(z, target, temperature=temperature, ignore_index=ignore_index, textbook=True)

    return fn


def _one_ulp_off_on_some(u):
    """The correctly rounded tanh, a quarter of the elements one ulp up, a quarter one ulp down
    (chosen by the input's bits): a tanh within its documented error."""
    t, bits = torch.tanh(u.double()).float(), u.view(torch.int32)
    up = torch.where((bits & 8).bool(), 2.0, -2.0)
    return torch.where((bits & 4).bool(), torch.nextafter(t, up).clamp(-1, 1), t)


def _every_one_ulp_low(u):
    t = torch.tanh(u)
    return torch.nextafter(t, torch.zeros_like(t))


def _rounded_to_bf16(u):
    """A bug: tanh taken in bf16 (a 16-bit intermediate in a float32 kernel)."""
    return torch.tanh(u).bfloat16().float()


def test_the_tanh_form_is_a_yardstick_only_with_a_softcap():
    assert "tanh_ulp" in semantics.textbook_forms(30.0)
    assert "tanh_ulp" not in semantics.textbook_forms(None)
    assert set(semantics.textbook_forms(None)) | {"tanh_ulp"} == set(semantics.TEXTBOOK_FORMS)


def test_the_tanh_form_moves_float32_and_leaves_float64():
    x = torch.linspace(-400, 400, 513)
    t = torch.zeros(1, dtype=torch.long)
    same = semantics.reference(x.double()[None], t, softcap=30.0, textbook="tanh_ulp")
    given = semantics.reference(x.double()[None], t, softcap=30.0, textbook=True)
    assert all(torch.equal(a, b) for a, b in zip(same, given, strict=True))
    grads = []
    for form in ("tanh_ulp", True):
        leaf = x[None].clone().requires_grad_()
        semantics.reference(leaf, t, softcap=30.0, textbook=form)[0].sum().backward()
        grads.append(leaf.grad)
    assert not torch.equal(*grads)  # the slope where |tanh| -> 1


@pytest.mark.parametrize("tanh", [_one_ulp_off_on_some, _every_one_ulp_low])
@pytest.mark.parametrize("seed", [0, 1])
def test_a_tanh_within_an_ulp_passes_the_default_verdict(tanh, seed):
    r = run_provider("lp", _log_probs_with(tanh), seed=seed, **SOFTCAP)
    assert r.compared >= 48
    failed = [f"{row.case} {row.quantity} {row.message}" for _, row in r.failures.iterrows()]
    assert not failed, "\n".join(failed)


def test_a_tanh_rounded_to_bf16_still_fails():
    r = run_provider("lp", _log_probs_with(_rounded_to_bf16), seed=0, **SOFTCAP)
    assert r.compared >= 48
    assert {"logp", "entropy", "grad_logits"} <= set(r.failures.quantity)


def test_flp_judges_by_the_tanh_form_too(monkeypatch):
    """flp's textbook yardsticks are lp's forms on flp's problem: with a softcap, three of them."""
    from ligerbench.suites.flp import spec as flp_spec

    seen = []
    real = flp_spec.eager_in_dtype
    monkeypatch.setattr(flp_spec, "eager_in_dtype", lambda p: seen.append(p.options["textbook"]) or real(p))
    problem = flp_spec.make_problem(next(iter(_flp_cases())), 0, torch.device("cpu"))
    assert len(flp_spec.textbook(problem)) == 3
    assert seen == list(semantics.TEXTBOOK_FORMS)


def _flp_cases():
    from ligerbench.testing import cases

    return cases("flp", dtype="fp32", softcap=30.0)


def test_without_the_tanh_form_the_default_verdict_failed_it(monkeypatch):
    monkeypatch.setattr(semantics, "TEXTBOOK_FORMS", (True, "logsumexp"))
    r = run_provider("lp", _log_probs_with(_one_ulp_off_on_some), seed=0, **SOFTCAP)
    assert "grad_logits" in set(r.failures.quantity)
