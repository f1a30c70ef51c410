"""PyTorch's own linear cross entropy as `flce` providers (suites/peers/torch_native.py), and the
model code's form among flce's default yardsticks (suites/flce/spec.py `model_code`): a provider
whose semantics are the model code's (bf16 logits, then a float32 loss) passes the default
verdict and fails `--strict`, and a 16-bit cross entropy (options=None) stays caught by both.

    python -m pytest tests/test_torch_native_flce.py
"""

from __future__ import annotations

import pytest
import torch.nn.functional as F

from ligerbench.builtin import default_registry
from ligerbench.suites import peers
from ligerbench.suites.flce.spec import model_code
from ligerbench.suites.peers import torch_native
from ligerbench.testing import cases, run_provider

pytestmark = pytest.mark.skipif(not hasattr(F, "linear_cross_entropy"), reason="torch without linear_cross_entropy")

# bf16 cases of the quick grid: normal rows (the logits' rounding is all there is), and confident
# rows (the target's softmax next to 1: docs/bugs.md, bug 6), where a 16-bit softmax is ~50-90% off
NORMAL = "flce/n12/v256/h32/bf16/mean/up-ones/random_10/plain/normal"
CONFIDENT = "flce/n12/v256/h32/bf16/none/up-random/random_10/plain/confident"
QUANTITIES = ("loss", "grad_hidden", "grad_weight")


def _run(fn, case_id: str, *, strict: bool, name: str | None = None):
    found = [c for c in cases("flce") if c.id == case_id]
    assert found, f"{case_id} left flce's quick grid: pick another bf16 case"
    registry = default_registry(plugins=False)
    if isinstance(fn, str):
        fn = registry.provider("flce", fn)
    res = run_provider("flce", fn, cases=found, suites=["correctness", "gradients"], strict=strict,
                       registry=registry, name=name)  # fmt: skip
    rows = res.records[res.records["quantity"].isin(QUANTITIES)]
    assert len(rows) == len(QUANTITIES), rows[["quantity", "verdict", "message"]]
    return rows.set_index("quantity")


def test_registered_and_pinned():
    registry = default_registry(plugins=False)
    for name in ("torch_native", "torch_native_chunked"):
        p = registry.provider("flce", name)
        assert (p.library, p.pinned) == ("torch", torch_native.PINNED) and not p.strict
    assert peers.pins()["torch"] == torch_native.PINNED


@pytest.mark.parametrize("case_id", [NORMAL, CONFIDENT])
def test_model_code_passes_the_default_and_fails_strict_on_confident_rows(case_id):
    default = _run(model_code, case_id, strict=False, name="model_code")
    assert (default["verdict"] == "pass").all(), default[["value", "limit", "message"]]
    if case_id == CONFIDENT:  # the bf16 logits' rounding is 20x the careful yardstick's error there
        strict = _run(model_code, case_id, strict=True, name="model_code")
        assert (strict.loc[["grad_hidden", "grad_weight"], "verdict"] == "fail").all(), strict[["value", "limit"]]


@pytest.mark.parametrize("case_id", [NORMAL, CONFIDENT])
def test_chunked_path_passes_the_default_on_bf16(case_id):
    rows = _run("torch_native_chunked", case_id, strict=False)
    assert (rows["verdict"] == "pass").all(), rows[["value", "limit", "message"]]


def test_options_none_cross_entropy_in_bf16_keeps_its_promise_and_fails_strict_on_confident_rows():
    # options=None is cross_entropy on the bf16 logits: a 16-bit softmax, not the model code's
    # float32 one. That is what it promises (suites/peers/torch_native.py, PROMISE), so the
    # default verdict, which holds it to its promise too, passes it; --strict fails it 30-90% off
    rows = _run("torch_native", CONFIDENT, strict=False)
    assert (rows["verdict"] == "pass").all(), rows[["value", "limit", "message"]]
    assert (rows["value"] > 0.3).all() and (rows["promise"] > 0.3).all(), rows[["value", "promise"]]
    rows = _run("torch_native", CONFIDENT, strict=True)
    assert (rows["verdict"] == "fail").all(), rows[["value", "limit"]]
    assert (rows["value"] > 0.3).all(), rows["value"]


@pytest.mark.parametrize("layout", ["3d", "kept_slice"])  # [B, T, H]: linear_cross_entropy raises on it
def test_unsupported_layouts_and_options_skip_with_the_reason(layout):
    case = next(c for c in cases("flce", layout=layout))
    assert "[N, H] or [H] only" in torch_native.flce_supports(case)
    for option, word in (("softcap", "softcap"), ("z_loss", "z-loss"), ("token_weight", "per-token")):
        case = next(c for c in cases("flce", option=option, layout="2d"))
        assert word in torch_native.flce_supports(case)
