"""Providers of `flkd`: ours at two cuttings (the result must not depend on them) and PyTorch
(the peers' adapters live in suites/peers/)."""

from __future__ import annotations

import functools

from ligerbench.registry import OURS, Provider
from ligerbench.suites.families import distill as semantics
from ligerbench.suites.kd.providers import pytorch_providers


def _ours(**settings):
    from ligerbench.kernels.fused_linear_distill import fused_linear_distill

    return functools.partial(fused_linear_distill, **settings) if settings else fused_linear_distill


def eager_fp32(student_hidden, student_weight, teacher_hidden, teacher_weight, labels=None, *, textbook=False,
               **options):  # fmt: skip
    """Both heads' logits in float32 from upcast operands, then the semantics in PyTorch."""
    xs = student_hidden.float() @ student_weight.float().t()
    xt = teacher_hidden.float() @ teacher_weight.float().t()
    return semantics.reference(xs, xt, labels, textbook=textbook, **options)


PROVIDERS = (
    Provider(name="ours", **OURS, kernel="flkd", load=_ours,
             description="kernels/fused_linear_distill.py (scalar losses: gradients formed in forward; 'none': "
                         "recomputed in backward)"),
    Provider(name="ours_recompute", **OURS, kernel="flkd", load=lambda: _ours(gradients="backward"),
             settings={"gradients": "backward"},
             description="ours with the gradients formed in backward for every reduction (both heads recomputed)"),
    Provider(name="ours_small_chunks", **OURS, kernel="flkd", load=lambda: _ours(chunk_bytes=16 * 1024),
             settings={"chunk_bytes": 16 * 1024}, description="ours with 16 KiB pieces: many chunks and slices"),
    *pytorch_providers("flkd", eager_fp32, "PyTorch on float32 logits from upcast operands"),
)  # fmt: skip
