"""Providers of `lp`: ours and the peers (docs/peers.md). Each returns (logp, entropy) float32."""

from __future__ import annotations

import functools

from ligerbench.registry import OURS, Provider
from ligerbench.suites.common.compiled import compiled_on_gpu
from ligerbench.suites.families import log_prob as semantics


def _ours():
    from ligerbench.kernels.log_probs import log_probs

    return log_probs


def eager_fp32(logits, target, *, temperature=1.0, softcap=None, logit_scale=1.0, ignore_index=-100,
               textbook=False):  # fmt: skip
    """The logits upcast to float32, then the semantics in PyTorch (textbook: as TRL and verl
    users write them, `torch.log_softmax` and -(p * logp).sum(-1))."""
    return semantics.reference(logits.float(), target, temperature=temperature, softcap=softcap,
                               logit_scale=logit_scale, ignore_index=ignore_index, textbook=textbook)  # fmt: skip


PROVIDERS = (
    Provider(name="ours", **OURS, kernel="lp", load=_ours,
             description="kernels/log_probs.py (Triton; forward and backward kernels)"),
    Provider(name="eager", kernel="lp", description="PyTorch on float32 logits (the yardstick's own formula)",
             load=lambda: eager_fp32),
    Provider(name="textbook", kernel="lp", load=lambda: functools.partial(eager_fp32, textbook=True),
             description="PyTorch as users write it: torch.log_softmax, -(p * logp).sum(-1) (fails --strict "
             "where the formula cancels: the entropy of a peaked row)"),
    Provider(name="torch_compile", kernel="lp", description="torch.compile of the float32 PyTorch semantics",
             load=lambda: compiled_on_gpu(eager_fp32, dynamic=True), devices=("cuda",)),
)  # fmt: skip
