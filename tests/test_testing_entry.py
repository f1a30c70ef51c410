"""ligerbench.testing, the pytest entry: a kernel's grid for a callable, failing the test with
the failing cases named (error, limit, the float64 reference's value), and never passing on a
run that compared nothing."""

from __future__ import annotations

import pytest

from helpers import register_plugin
from ligerbench.builtin import default_registry
from ligerbench.registry import Provider
from ligerbench.suites.ce.spec import ce_torch
from ligerbench.suites.flce.spec import flce_torch
from ligerbench.testing import cases, run_provider, verify_provider

# one fp32 case per test where a single case shows the behaviour: mean over a leading run
ONE = dict(dtype="fp32", reduction="mean", ignore_pattern="leading_run", option="plain", logits="normal")


def loss_one_percent_high(logits, target, **options):
    loss, z = ce_torch(logits, target, **options)
    return loss * 1.01, z


def raises(logits, target, **options):
    raise RuntimeError("kernel launch failed")


def test_a_correct_callable_passes_and_the_result_says_what_was_compared():
    result = verify_provider("ce", ce_torch, **ONE)
    # loss, gradient, and the contracts: logits unchanged and handed over as built (no z-loss on plain)
    assert result.passed and result.compared == len(result.records) > 0
    assert set(result.records["quantity"]) == {"loss", "grad_logits", "input_unchanged", "input_layout"}
    assert set(result.records["verdict"]) == {"pass"}


def test_flce_callables_are_checked_too():
    result = verify_provider("flce", flce_torch, dtype="fp32", reduction="mean", option="plain", logits="normal")
    assert {"grad_hidden", "grad_weight"} <= set(result.records["quantity"])


def test_a_registered_provider_object_is_accepted():
    eager = default_registry(plugins=False).provider("ce", "eager")
    assert verify_provider("ce", eager, **ONE).provider == "eager"
    # a Provider object named like a registered one is the one checked, not its namesake
    wrong = Provider(name="eager", kernel="ce", description="", load=lambda: loss_one_percent_high)
    with pytest.raises(AssertionError, match="eager failed"):
        verify_provider("ce", wrong, **ONE)


def test_a_wrong_loss_fails_naming_case_error_limit_and_reference():
    with pytest.raises(AssertionError) as caught:
        verify_provider("ce", loss_one_percent_high, **ONE)
    text = str(caught.value)
    compared = len(verify_provider("ce", ce_torch, **ONE).records)
    cases = compared // 4  # loss, gradient, and the two contract checks per case
    assert f"failed {2 * cases} of {compared} checks" in text  # loss and gradient; the contracts pass
    assert "FAIL correctness/loss ce/n16/v1000/fp32/mean/up-ones/leading_run/plain/normal" in text
    assert "error 0.01 > limit" in text and "float64 reference" in text and "got " in text


def test_a_raising_callable_fails_with_its_error():
    with pytest.raises(AssertionError, match="ERROR .*RuntimeError: kernel launch failed"):
        verify_provider("ce", raises, **ONE)


def test_nothing_compared_is_a_failure_with_the_reasons():
    with pytest.raises(AssertionError, match="nothing was compared.*only on Tuesdays"):
        verify_provider("ce", ce_torch, supports=lambda case: "only on Tuesdays", **ONE)
    result = run_provider("ce", ce_torch, supports=lambda case: "only on Tuesdays", **ONE)
    assert not result.passed and result.compared == 0


def test_a_supports_attribute_skips_its_cases():
    def no_bf16(logits, target, **options):
        return ce_torch(logits, target, **options)

    no_bf16.supports = lambda case: "no bf16" if case.dtype == "bf16" else None
    result = verify_provider("ce", no_bf16, reduction="mean", ignore_pattern="leading_run")
    skipped = result.records[result.records["verdict"] == "skip"]
    assert set(skipped["dtype"]) == {"bf16"} and set(skipped["message"]) == {"no bf16"}


@pytest.mark.parametrize(
    "filters, match",
    [
        ({"reduktion": "none"}, "'reduktion' is not an axis of kernel ce"),
        ({"reduction": "nothing"}, r"\['nothing'\]: not a reduction .* choose from none, mean, sum"),
    ],
)
def test_a_typo_in_a_filter_is_an_error_not_an_empty_selection(filters, match):
    with pytest.raises(ValueError, match=match):
        verify_provider("ce", ce_torch, **filters)


@pytest.mark.parametrize("case", cases("ce", **ONE), ids=lambda c: c.id)
def test_one_test_per_case(case):
    result = verify_provider("ce", ce_torch, cases=[case])
    assert set(result.records["case"]) == {case.id}


def test_a_case_outside_the_grid_is_refused():
    (case,) = cases("ce", **ONE)[:1]
    with pytest.raises(ValueError, match="not cases of kernel ce"):
        verify_provider("ce", ce_torch, cases=[case.replace(n=17)])


def test_an_unknown_kernel_names_the_plugin_that_failed_to_bring_it(monkeypatch):
    def broken(reg):
        raise ImportError("No module named 'kl_dependency'")

    register_plugin(monkeypatch, broken, name="kl_plugin")
    with pytest.raises(ValueError, match="unknown kernel 'kl'.*plugin 'kl_plugin' failed to load: ImportError"):
        verify_provider("kl", ce_torch)
