"""How `kd` and `flkd` cases are built and judged, beyond the kernels themselves: inputs moved to
a device keep their layout (an H200 run read past a kept slice: suites/families/distill.py,
upcast), a self-distilled teacher's gradients are judged against their natural magnitude, the
textbook yardstick takes each way users write a divergence, and the peers' declared limits."""

from __future__ import annotations

import functools

import pytest
import torch

from ligerbench.builtin import default_registry
from ligerbench.registry import Provider
from ligerbench.suites.families import distill as semantics
from ligerbench.suites.families.distill_mutants import on_head
from ligerbench.suites.flkd import axes as flkd_axes
from ligerbench.suites.flkd import spec as flkd_spec
from ligerbench.suites.kd import axes as kd_axes
from ligerbench.suites.kd import spec as kd_spec

KERNELS = {"kd": (kd_axes, kd_spec), "flkd": (flkd_axes, flkd_spec)}
SHAPES = {"kd": dict(n=8, v=1000), "flkd": dict(n=12, v=500, h=32)}


def _extent(t: torch.Tensor) -> int:
    """Elements of storage the view reaches: its offset, then its last element."""
    return t.storage_offset() + sum((size - 1) * stride for size, stride in zip(t.shape, t.stride(), strict=True)) + 1


def _tensors(problem) -> dict[str, torch.Tensor]:
    return {k: v for k, v in vars(problem).items() if torch.is_tensor(v) and v.is_floating_point()}


@pytest.mark.parametrize("kernel, layout", [(k, lay) for k, (axes, _) in KERNELS.items()
                                            for lay in axes.LAYOUT.values_for("quick")])  # fmt: skip
# fp32: nothing to convert, the move alone; bf16: a conversion and a move in one
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_inputs_moved_to_a_device_keep_their_layout(kernel, layout, dtype):
    """The meta device is a real move on a CPU-only machine: `.to(device)` of a view that is not
    dense (flkd's kept_slice) makes a dense copy, and the case's strides then point past its end
    (on CUDA: "setStorage ... out of bounds" in every provider's reference)."""
    axes, spec = KERNELS[kernel]
    case = axes.case(**SHAPES[kernel], dtype=dtype, layout=layout)
    here = spec.make_problem(case, 0, torch.device("cpu"))
    there = spec.make_problem(case, 0, torch.device("meta"))
    for name, t in _tensors(there).items():
        src = getattr(here, name)
        assert (t.shape, t.stride(), t.storage_offset()) == (src.shape, src.stride(), src.storage_offset()), name
        assert t.untyped_storage().nbytes() == src.untyped_storage().nbytes(), f"{name}: storage not moved whole"
        assert _extent(t) * t.element_size() <= t.untyped_storage().nbytes(), f"{name} reads past its storage"


# ----------------------------------------------------------------------------- a truth exactly 0


def _judged(kernel: str, fn, **params) -> dict[str, tuple[str, float, float]]:
    """quantity -> (verdict, error, limit) of `fn` on one case built here (16-bit cases too, off
    the CPU grid), judged strictly as our own kernel is."""
    from ligerbench.verify.engine import Yardsticks, _compare

    spec = default_registry().kernel(kernel)
    case = KERNELS[kernel][0].case(**SHAPES[kernel], **params)
    problem = spec.make_problem(case, 0, torch.device("cpu"))
    ref = spec.reference(problem)
    yard = Yardsticks(spec.eager(problem), spec.textbook(problem))
    provider = Provider(name="under_test", kernel=kernel, description="", load=lambda: fn, strict=True)
    outcome = spec.run(fn, problem)
    out = {}
    for q in spec.quantities:
        if q in ref.values or q == "teacher_no_grad":
            f = _compare(q, case, provider, outcome, ref, yard, strict=True)
            out[q] = (f["verdict"], f["value"], f["limit"])
    return out


def _teacher_rounded_to_bf16(student_hidden, student_weight, teacher_hidden, teacher_weight, labels=None, **options):
    """A planted bug that leaves noise at p == q: the teacher's logits rounded to bf16, the
    student's not (a teacher run under autocast beside a float32 student)."""
    xs = student_hidden.float() @ student_weight.float().t()
    xt = (teacher_hidden.float() @ teacher_weight.float().t()).to(torch.bfloat16).float()
    return semantics.reference(xs, xt, labels, **options)


def _eager(kernel: str):
    return default_registry().providers[(kernel, "eager")].load()


GRADS = ("grad_student_hidden", "grad_student_weight")


@pytest.mark.parametrize("divergence", ["forward_kl", "reverse_kl"])
def test_self_distilled_16bit_gradients_are_judged_against_their_natural_magnitude(divergence):
    """The H200's fp16 self-distillation failures, reproduced on CPU: eager's fp16 weight gradient
    holds a subnormal (5.96e-8) where the careful yardstick's rounds to exact zeros, and "2x the
    yardstick's noise of a float64 1e-17" failed it by 8e8. Judged against the gradient's natural
    magnitude it passes, as does ours."""
    for fn in (_eager("flkd"), _ours_flkd()):
        got = _judged("flkd", fn, dtype="fp16", divergence=divergence, logits="self")
        for q in GRADS:
            verdict, err, limit = got[q]
            assert verdict == "pass", f"{q}: {err:.3g} > {limit:.3g}"
            assert limit < 2**-10, "the limit is one rounding of the natural size, not a loosened one"


def _ours_flkd():
    from ligerbench.kernels.fused_linear_distill import fused_linear_distill

    return fused_linear_distill


@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
# each planted bug that shows at p == q, with the quantity that must kill it there (a swapped KL
# direction or a mixture's log are exactly 0 at p == q under any rule: the other teachers kill them)
# (margin: how far over the limit the gradient must be; a bf16 teacher in an fp16 case is a
# rounding of the natural size, 3x the fp16 limit; in fp32 it is 1e3x)
@pytest.mark.parametrize("bug, params, killed_by, margin", [
    ("temperature_student_only", dict(temperature=2.0), GRADS, 100.0),
    ("teacher_rounded_to_bf16", {}, GRADS, 2.0),
    ("teacher_gets_grad", {}, ("teacher_no_grad",), 0.0),
])  # fmt: skip
def test_planted_bugs_are_still_killed_on_self_distilled_cases(dtype, bug, params, killed_by, margin):
    fn = _teacher_rounded_to_bf16 if bug == "teacher_rounded_to_bf16" else on_head(bug)
    got = _judged("flkd", fn, dtype=dtype, logits="self", **params)
    for q in killed_by:
        verdict, err, limit = got[q]
        assert verdict == "fail", f"{bug} survives {q} on a self-distilled {dtype} case: {err:.3g} <= {limit:.3g}"
        assert err > margin * limit, f"{bug}: {q} {err:.3g} only just over {limit:.3g}"


def test_self_distilled_loss_noise_of_a_logaddexp_jsd_passes_and_a_bug_does_not():
    """TRL's JSD (the textbook form: the mixture's log by logsumexp) leaves a loss of -2e-9 where
    the truth is exactly 0 (inf relative to 0: TRL's provider failed the CPU quick run there);
    relative to the loss's natural size (the entropy) it is float32 rounding. A temperature on
    one side is a loss of natural size there, and fails."""
    from ligerbench.suites.flkd.providers import eager_fp32

    textbook = functools.partial(eager_fp32, textbook=True)
    for dtype in ("fp32", "bf16"):
        verdict, err, limit = _judged("flkd", textbook, dtype=dtype, divergence="jsd", logits="self")["loss"]
        assert verdict == "pass", f"{dtype}: {err:.3g} > {limit:.3g}"
    bug = on_head("temperature_student_only")
    verdict, err, limit = _judged("flkd", bug, divergence="jsd", logits="self", temperature=2.0)["loss"]
    assert verdict == "fail" and err > 100 * limit, f"{err:.3g} vs {limit:.3g}"


def test_kd_self_distilled_scales_cover_the_teacher_gradient():
    """kd with a teacher gradient asked for: both gradients' truths are 0, both get a scale."""
    _, spec = KERNELS["kd"]
    case = kd_axes.case(n=8, v=1000, logits="self", teacher_grad=True)
    ref = spec.reference(spec.make_problem(case, 0, torch.device("cpu")))
    assert set(ref.scales) == {"loss", "grad_student", "grad_teacher"}
    assert all(s > 0 for s in ref.scales.values())
    case = kd_axes.case(n=8, v=1000, logits="self", teacher="top8")  # the student's top 8: p != q, no scale
    assert not spec.reference(spec.make_problem(case, 0, torch.device("cpu"))).scales


# ----------------------------------------------------------------------------- the peers' limits


@pytest.mark.parametrize("layout", ["padded_vocab", "2d"])
def test_liger_log_space_losses_declare_masked_columns(layout):
    """LigerJSD and LigerKLDIVLoss take log-probs: -inf columns in both give NaN at every beta,
    as F.kl_div(log_target=True) does (docs/repro/liger_distill.py). Declared, so the H200's NaN
    is a visible skip; LigerTVDLoss takes probabilities (a masked column is a 0) and runs."""
    from ligerbench.suites.peers import liger

    case = kd_axes.case(n=8, v=1000, layout=layout)
    for supports in (liger.kd_jsd_supports, liger.kd_kldiv_supports):
        reason = supports(case.replace(ignore_pattern="none", reduction="sum")) or ""
        assert (liger.MASKED_COLUMNS in reason) == (layout == "padded_vocab"), reason
    tvd = case.replace(divergence="tvd")
    assert liger.MASKED_COLUMNS not in (liger.kd_tvd_supports(tvd) or "")
