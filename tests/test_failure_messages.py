"""A failing check's message says what went wrong in the numbers: NaN or inf where the float64
reference is finite (and the reverse), the worst element's row and column, both values; a result
of the wrong size is a failed check, not a crash. The records' columns stay as they are."""

from __future__ import annotations

import math

import pytest
import torch

from ligerbench.problems import Outcome
from ligerbench.records import FIELDS
from ligerbench.registry import Provider
from ligerbench.suites.ce.axes import case as ce_case
from ligerbench.verify.engine import Yardsticks, _compare, explain

REF = torch.arange(12, dtype=torch.float64).reshape(3, 4) / 10 - 0.5  # a finite 3 x 4 reference


def _with(index, value) -> torch.Tensor:
    out = REF.float().clone()
    out[index] = value
    return out


# each row: what the provider returned, against what truth, and the words the message must hold
@pytest.mark.parametrize(
    "got, truth, words",
    [
        (_with((1, 2), float("nan")), REF, ["NaN where the float64 reference is 0.1", "first at row 1, column 2"]),
        (_with((2, 0), float("inf")), REF, ["inf where the float64 reference is 0.3", "at row 2, column 0"]),
        (_with((0, 3), -float("inf")), REF, ["-inf where the float64 reference is -0.2"]),
        # the all-ignored mean: the truth is NaN, a finite value is wrong and said to be
        (torch.tensor(0.0), torch.tensor(math.nan, dtype=torch.float64), ["0 where the float64 reference is nan"]),
        (_with((2, 1), 9.0), REF, ["worst element at row 2, column 1: got 9, float64 reference 0.4"]),
        (torch.tensor([1.0, 2.5, 3.0]), torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64), ["at row 1: got 2.5"]),
        (torch.tensor(2.0), torch.tensor(1.0, dtype=torch.float64), ["got 2, float64 reference 1"]),
        (None, REF, ["no value came back"]),
    ],
)
def test_explain_names_the_numbers(got, truth, words):
    message = explain(got, truth)
    for w in words:
        assert w in message, message


CASE = ce_case(n=3, v=4, dtype="fp32")
PROVIDER = Provider(name="p", kernel="ce", description="", load=lambda: None)


def _check(got: torch.Tensor) -> dict:
    ref = Outcome(values={"grad_logits": REF})
    careful = Outcome(values={"grad_logits": REF.float()})
    yard = Yardsticks(careful, None)
    return _compare("grad_logits", CASE, PROVIDER, Outcome(values={"grad_logits": got}), ref, yard, strict=False)


def test_a_failing_comparison_carries_the_explanation_in_its_message():
    fields = _check(_with((1, 2), float("nan")))
    assert fields["verdict"] == "fail" and fields["value"] == math.inf
    assert fields["message"].startswith("error inf > limit")
    assert "NaN where the float64 reference is 0.1" in fields["message"]
    assert set(fields) <= set(FIELDS)  # no new record columns: the detail lives in `message`


def test_a_passing_comparison_has_no_message():
    fields = _check(REF.float())
    assert fields["verdict"] == "pass" and fields["message"] == ""


def test_a_result_of_the_wrong_size_is_a_failed_check():
    fields = _check(torch.zeros(3))
    assert fields["verdict"] == "fail" and fields["value"] == math.inf
    assert "shape (3,) where the float64 reference has (3, 4)" in fields["message"]


TWO_D_ONLY = '''
import torch.nn.functional as F


def ce_2d_only(logits, target, *, weight=None, ignore_index=-100, reduction="mean", label_smoothing=0.0,
               softcap=None, z_loss_scale=0.0, token_weight=None):
    """A correct cross entropy that takes [N, V] logits with a contiguous last dim only."""
    if logits.dim() != 2 or logits.stride(-1) != 1 or logits.stride(0) != logits.shape[-1]:
        raise ValueError("this kernel takes dense [N, V] logits")
    return F.cross_entropy(logits.float(), target, reduction=reduction, ignore_index=ignore_index)
'''


def test_an_authors_failures_are_counted_per_case_and_their_shared_layout_named(tmp_path):
    """A correct 2-D-only kernel met 23 crashing cases and nothing said they were all the non-2-D
    layouts; now the output counts failing cases and names what they share."""
    from typer.testing import CliRunner

    from ligerbench.cli import app

    path = tmp_path / "mine.py"
    path.write_text(TWO_D_ONLY)
    args = ["verify", "--kernel", "ce", "--device", "cpu", "--out", str(tmp_path / "out"), "--provider",
            f"{path}:ce_2d_only", "--where", "option=plain", "--where", "dtype=fp32"]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 1, result.output
    assert "failing checks in" in result.output and " cases" in result.output
    line = next(x for x in result.output.splitlines() if x.startswith("all ") and "layout in {" in x)
    assert "3d" in line and "padded_vocab" in line and "transposed" in line and "2d" not in line.split("{")[1]
    assert "declare them unsupported (`supports`" in line


BF16_IN_TRITON = '''
import torch
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def _scale(x_ptr, y_ptr, o_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    y = tl.load(y_ptr + offs, mask=offs < n)
    tl.store(o_ptr + offs, x * y, mask=offs < n)  # in the inputs' dtype: bf16 arithmetic for bf16


def ce_via_triton(logits, target, *, weight=None, ignore_index=-100, reduction="mean", label_smoothing=0.0,
                  softcap=None, z_loss_scale=0.0, token_weight=None):
    """Right on a GPU: the logits pass through a Triton kernel unchanged (times 1), then PyTorch's loss."""
    x = logits.detach().contiguous()
    out = torch.empty_like(x)
    _scale[(triton.cdiv(x.numel(), 1024),)](x, torch.ones_like(x), out, x.numel(), BLOCK=1024)
    through = logits + (out - logits).detach()
    return F.cross_entropy(through.reshape(-1, logits.shape[-1]).float(), target.reshape(-1),
                           reduction=reduction, ignore_index=ignore_index)
'''


@pytest.mark.interpreter
def test_failures_only_where_the_interpreter_is_known_wrong_are_named_as_such(tmp_path):
    """bf16 arithmetic inside a third-party Triton kernel is garbage under the CPU interpreter
    (docs/providers.md, "Triton's interpreter on CPU"); the failure stays a failure and the output
    says which defect to suspect."""
    from typer.testing import CliRunner

    from ligerbench.cli import app

    path = tmp_path / "theirs.py"
    path.write_text(BF16_IN_TRITON)
    args = ["verify", "--kernel", "ce", "--device", "cpu", "--out", str(tmp_path / "out"), "--provider",
            f"{path}:ce_via_triton", "--where", "option=plain", "--where", "reduction=mean",
            "--where", "layout=2d"]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 1, result.output
    hint = next(x for x in result.output.splitlines() if "known defects" in x)
    assert "all in 16-bit cases" in hint and "bfloat16 values gives garbage" in hint and "on a GPU" in hint


def test_no_interpreter_hint_for_failures_in_float32_or_when_compiled():
    import pandas as pd

    from ligerbench.verify.diagnose import interpreter_hints

    df = pd.DataFrame({"provider": ["p", "p"], "case": ["a", "b"], "dtype": ["fp32", "bf16"],
                       "verdict": ["fail", "pass"], "message": ["", ""]})  # fmt: skip
    defects = {"bf16_arithmetic": "x"}
    assert interpreter_hints(df, "interpreter", defects) == []  # an fp32 failure: not the interpreter's
    bf16 = df.assign(dtype=["bf16", "fp32"])
    assert len(interpreter_hints(bf16, "interpreter", defects)) == 1
    assert interpreter_hints(bf16, "compiled", defects) == [] and interpreter_hints(bf16, "interpreter", {}) == []


def test_a_signature_mismatch_is_said_once_with_the_contract(tmp_path):
    """The same TypeError on every case was printed once per case and quantity; now once per
    provider, with the kernel's calling contract."""
    from typer.testing import CliRunner

    from ligerbench.cli import app

    path = tmp_path / "bad.py"
    path.write_text("import torch.nn.functional as F\n\n\ndef ce(logits, target, reduction='mean'):\n"
                    "    return F.cross_entropy(logits.float(), target, reduction=reduction)\n")  # fmt: skip
    args = ["verify", "--kernel", "ce", "--device", "cpu", "--out", str(tmp_path / "out"), "--provider",
            f"{path}:ce", "--where", "option=plain", "--where", "reduction=none"]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 1, result.output
    out = result.output.replace("\n", " ")
    assert "raised the same error in all" in out and "unexpected keyword argument" in out
    assert "the contract is fn(logits, target, *, weight" in out
    assert "  ERROR " not in result.output  # not repeated per case and quantity


def test_a_case_with_nothing_to_compute_tells_no_failing_case_apart():
    """A provider that passed only the cases with every target ignored got "all N failing cases
    have ignore_pattern in {...} (its passing cases never do)": a case with nothing to compute is
    no evidence. With another passing case the line is still said."""
    import pandas as pd

    from ligerbench.verify.diagnose import shared_values

    rows = [("c1", "random_10", "fail"), ("c2", "none", "fail"), ("c3", "all", "pass")]
    df = pd.DataFrame([dict(provider="p", case=c, ignore_pattern=i, verdict=v) for c, i, v in rows])
    assert shared_values(df, ["ignore_pattern"]) == []
    df = pd.concat([df, pd.DataFrame([dict(provider="p", case="c4", ignore_pattern="leading_run", verdict="pass")])])
    (line,) = shared_values(df, ["ignore_pattern"])
    assert "ignore_pattern in {none, random_10}" in line


@pytest.mark.parametrize("error, shown", [(0.02, True), (0.5, False), (math.inf, False), (math.nan, False)])
def test_a_rounding_hint_is_named_only_for_an_error_it_can_make(error, shown):
    from ligerbench.suites.common.hints import SIXTEEN_BITS, numerical_hints

    case = ce_case(n=16, v=1000, dtype="bf16")
    assert (SIXTEEN_BITS in numerical_hints(case, "grad_logits", error)) is shown
    assert SIXTEEN_BITS in numerical_hints(case, "grad_logits")  # without the error: every pattern the axes name
