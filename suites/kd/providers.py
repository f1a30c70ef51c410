"""Providers of `kd`: ours and PyTorch (the peers' adapters live in suites/peers/)."""

from __future__ import annotations

import functools

from ligerbench.registry import OURS, Provider
from ligerbench.suites.common.compiled import compiled_on_gpu
from ligerbench.suites.families import distill as semantics


def _ours():
    from ligerbench.kernels.distill import distill_loss

    return distill_loss


def eager_fp32(student, teacher, labels=None, *, textbook=False, **options):
    """Both logits upcast to float32, then the semantics in PyTorch (textbook: F.kl_div on
    torch.log_softmax, TRL's generalized_jsd_loss)."""
    return semantics.reference(student.float(), teacher.float(), labels, textbook=textbook, **options)


def textbook_supports(case) -> str | None:
    """The textbook JSD on a self-distilled teacher: logaddexp leaves -1e-8 where the truth is
    exactly 0, an infinite relative error: a skip that says so, not a verdict on PyTorch."""
    if case.divergence == "jsd" and case.beta not in (0.0, 1.0) and case.logits == "self":
        return "the textbook JSD of a teacher equal to the student is rounding noise (-1e-8), not 0"
    return None


def pytorch_providers(kernel: str, eager_fp32, eager_description: str) -> tuple[Provider, ...]:
    """A distillation kernel's PyTorch providers (kd's and flkd's), from its float32 form
    `eager_fp32` (textbook=True: the form users write): eager, textbook, torch_compile."""
    return (
        Provider(name="eager", kernel=kernel, load=lambda: eager_fp32, description=eager_description),
        Provider(name="textbook", kernel=kernel, load=lambda: functools.partial(eager_fp32, textbook=True),
                 supports=textbook_supports,
                 description="PyTorch as users write it: F.kl_div(log_softmax), TRL's generalized_jsd_loss"),
        Provider(name="torch_compile", kernel=kernel, load=lambda: compiled_on_gpu(eager_fp32, dynamic=True),
                 devices=("cuda",), description="torch.compile of the float32 PyTorch semantics"),
    )  # fmt: skip


PROVIDERS = (
    Provider(name="ours", **OURS, kernel="kd", load=_ours,
             description="kernels/distill.py (Triton; forward and backward kernels)"),
    *pytorch_providers("kd", eager_fp32, "PyTorch on float32 logits (the careful yardstick's own formula)"),
)  # fmt: skip
