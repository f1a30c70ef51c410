"""A peer judged by its own promise (ligerbench/tolerance.py, docs/checks.md): a provider's
documented reference (Provider.promise) is one more yardstick of that provider alone under the
default verdict; a provider that promises float32 logits (Provider.promises_float32_logits) is
held without the model code's 16-bit logits. Both can fail: without the promise the same code
fails, and the model code's own semantics fail a provider that promised more."""

from __future__ import annotations

import dataclasses

import pytest
import torch.nn.functional as F

from ligerbench.registry import Provider
from ligerbench.suites.flce.spec import model_code
from ligerbench.suites.peers.torch_native import flce_promise
from ligerbench.testing import run_provider

# bf16, confident rows: a softmax in bf16 is 10-50% off there (docs/bugs.md, bug 6)
WHERE = dict(dtype="bf16", logits="confident", option="plain", layout="2d")


def _bf16_composition(hidden, weight, target, *, bias=None, class_weight=None, ignore_index=-100,
                      reduction="mean", label_smoothing=0.0, **_):  # fmt: skip
    """F.cross_entropy(F.linear(...)) in bf16: what torch's linear_cross_entropy promises to be."""
    cw = None if class_weight is None else class_weight.to(hidden.dtype)
    return F.cross_entropy(F.linear(hidden, weight, bias), target, weight=cw, ignore_index=ignore_index,
                           reduction=reduction, label_smoothing=label_smoothing)  # fmt: skip


def _provider(fn, **declared) -> Provider:
    return Provider(name="under_test", kernel="flce", description="under test", load=lambda: fn, **declared)


def _failed(result) -> set[str]:
    return set(result.failures["quantity"])


def test_a_provider_that_keeps_its_promise_passes_by_default_and_fails_strict_with_the_figure():
    promised = _provider(_bf16_composition, promise=flce_promise, promise_quote="cross_entropy(linear(...))")
    result = run_provider("flce", promised, **WHERE)
    assert result.compared >= 6
    assert result.failures.empty, result.failures[["case", "quantity", "message"]].to_string()
    losses = result.records[(result.records.quantity == "loss") & (result.records.verdict == "pass")]
    assert len(losses) and (losses["promise"] > 0).all()  # its promise's own error is a records column
    strict = run_provider("flce", promised, strict=True, **WHERE)
    assert {"loss", "grad_hidden"} <= _failed(strict)


def test_the_same_code_without_the_promise_fails_the_default():
    result = run_provider("flce", _provider(_bf16_composition), **WHERE)
    assert {"loss", "grad_hidden"} <= _failed(result)


@pytest.mark.parametrize("promises, fails", [(False, False), (True, True)])
def test_the_model_codes_16_bit_logits_are_no_yardstick_of_a_provider_that_promised_float32(promises, fails):
    provider = _provider(model_code, promises_float32_logits=promises)
    result = run_provider("flce", provider, dtype="bf16", logits="confident", option="plain")
    assert result.compared >= 10
    assert bool(_failed(result)) is fails, result.failures[["case", "quantity", "message"]].to_string()


def test_a_promise_never_reaches_another_provider():
    assert dataclasses.fields(Provider)  # the promise is a field of the one provider that declares it
    plain = run_provider("flce", _provider(_bf16_composition), **WHERE)
    assert plain.records["promise"].isna().all()
