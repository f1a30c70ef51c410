"""Providers of the `ce` kernel: ours, PyTorch eager, torch.compile, Liger-Kernel.

Each provider's callable takes (logits, target, *, weight, ignore_index, reduction,
label_smoothing, softcap, z_loss_scale, token_weight) and returns the loss or (loss, z_loss).
Imports of kernels and peers happen in `load()`: a missing package makes one provider
unavailable, not the tool, and our Triton kernels are imported only after the command has chosen
Triton's mode (compiled or interpreted: ligerbench/kernels/triton_mode.py).
"""

from __future__ import annotations

import functools

from ligerbench.cases import OPTIONS, Case
from ligerbench.registry import OURS, Provider
from ligerbench.suites.ce.spec import ce_torch
from ligerbench.suites.common.compiled import compiled


def _load_ours(inplace: bool):
    from ligerbench.kernels.cross_entropy import cross_entropy

    return functools.partial(cross_entropy, return_z_loss=True, inplace_backward=inplace)


def ce_upcast(logits, target, *, weight=None, token_weight=None, **options):
    """PyTorch as transformers' loss runs it: the logits upcast to float32 first (the float32 loss;
    the gradient rounded once to the logits' dtype by the cast's backward). PyTorch's own 16-bit
    path is not a fair peer: its bf16 true-class gradient is ~100% wrong on confident rows
    (ligerbench/tolerance.py)."""
    up = {k: None if t is None else t.float() for k, t in (("weight", weight), ("token_weight", token_weight))}
    return ce_torch(logits.float(), target, **up, **options)


def _inplace_supports(case: Case) -> str | None:
    """In place, the gradient can only be formed in forward, for an upstream of 1; a random
    upstream then scales it, a second rounding of a 16-bit gradient (docs/bugs.md, bug 13):
    one step of the dtype off on many elements, past the strict rule. ours forms it once."""
    if case.dtype in ("bf16", "fp16") and case.upstream == "random":
        return (
            "in place, a 16-bit gradient formed in forward is rounded again when a random upstream scales it "
            "(docs/bugs.md, bug 13)"
        )
    return None


def _load_eager():
    return ce_upcast


@functools.cache
def _load_compiled():
    return compiled(ce_torch, dynamic=False)


# Liger-Kernel as its peer module pins it (suites/peers/liger.py reads its pin from here: the
# peers depend on the kernels' suites, never the other way round), so `audit liger` reaches ce and flce
LIGER = {"library": "liger-kernel", "pinned": "0.8.5"}


def _load_liger():
    from liger_kernel.transformers.functional import liger_cross_entropy

    def call(logits, target, *, weight, ignore_index, reduction, label_smoothing, softcap, z_loss_scale, token_weight):
        out = liger_cross_entropy(
            logits,
            target,
            weight=weight,
            ignore_index=ignore_index,
            reduction=reduction,
            label_smoothing=label_smoothing,
            lse_square_scale=z_loss_scale,
            softcap=softcap,
            return_z_loss=True,
        )
        return loss_and_z_loss(out)

    return call


def loss_and_z_loss(out):
    """What Liger's cross entropy and fused linear cross entropy (flce's provider) return with
    return_z_loss=True, as (loss, z_loss): 0.8.x returns a CrossEntropyOutput record; older, a tuple."""
    if hasattr(out, "loss"):
        return out.loss, out.z_loss
    return tuple(out) if isinstance(out, (tuple, list)) else out


def ce_options_lacking(case: Case) -> str | None:
    """The options of a ce or flce case that Liger's cross entropies lack or compute otherwise."""
    opts = OPTIONS[case.option]
    if opts.get("token_weight"):
        return "Liger-Kernel has no per-token weights"
    if opts.get("z_loss_scale") and opts.get("class_weight"):
        return "Liger-Kernel normalises the z-loss differently when class weights are set"
    return None


def _liger_supports(case: Case) -> str | None:
    if case.layout in ("3d", "padded_vocab"):
        return "Liger-Kernel's cross entropy takes 2-D logits [BT, V] only"
    return ce_options_lacking(case)


PROVIDERS = (
    Provider(
        name="ours",
        **OURS,
        kernel="ce",
        description="kernels/cross_entropy.py (Triton; loss and gradient in one kernel)",
        load=lambda: _load_ours(inplace=False),
    ),
    Provider(
        name="ours_inplace",
        **OURS,
        kernel="ce",
        description="kernels/cross_entropy.py with inplace_backward=True (gradient written into the logits)",
        load=lambda: _load_ours(inplace=True),
        mutates_input=True,
        supports=_inplace_supports,
    ),
    Provider(
        name="eager",
        kernel="ce",
        description="PyTorch eager on the logits upcast to float32, as transformers' loss does",
        load=_load_eager,
    ),
    Provider(
        name="textbook",
        kernel="ce",
        description="PyTorch as users write it: F.cross_entropy on the upcast logits, the softcap through "
        "autograd's tanh (fails --strict where its slope cancels)",
        load=lambda: functools.partial(ce_upcast, textbook=True),
    ),
    Provider(
        name="torch_compile",
        kernel="ce",
        description="torch.compile of the eager formula",
        load=_load_compiled,
        devices=("cuda",),
    ),
    Provider(
        name="liger",
        kernel="ce",
        description="Liger-Kernel liger_cross_entropy (in-place gradient)",
        load=_load_liger,
        **LIGER,
        mutates_input=True,
        # its kernels fail or round differently under Triton's interpreter: a GPU peer only
        devices=("cuda",),
        supports=_liger_supports,
    ),
)
