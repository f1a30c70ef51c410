"""Providers of the `flce` kernel: ours (default chunking, and forced small chunks), PyTorch
eager with full logits, torch.compile of it, Liger-Kernel's and Apple's Cut Cross-Entropy.

Each provider's callable takes (hidden, weight, target, *, bias, class_weight, ignore_index,
reduction, label_smoothing, softcap, z_loss_scale, token_weight) and returns the loss or
(loss, z_loss). Imports happen in `load()`, so a missing package makes one provider
unavailable, not the tool. A peer that lacks an option says so through `supports`.
"""

from __future__ import annotations

import functools

from ligerbench.cases import OPTIONS, Case
from ligerbench.registry import OURS, Provider
from ligerbench.suites.ce.providers import LIGER, ce_options_lacking, loss_and_z_loss
from ligerbench.suites.common.compiled import compiled
from ligerbench.suites.flce.spec import flce_torch

# Forced chunk for `ours_small_chunks`: 5 divides none of the grid's token counts (suites/flce/
# grid.py), so every case but one-token ones has a partial last chunk, and the leading_run
# and all ignore patterns make whole chunks entirely ignored.
SMALL_CHUNK_TOKENS = 5


# The chunk-count providers cut every case into this many chunks (1-token chunks at the CPU grid's
# 72 tokens), past the 64 where a 16-bit weight-gradient accumulation's error shows, for "fp32"
# and "auto" ("auto" resolves to "fp32" past 32 chunks). "dtype" (a running sum in the weight's
# dtype, rounded once per chunk) is claimed within the tolerance rule only up to the kernel's
# AUTO_DTYPE_MAX_CHUNKS (32): it is verified at exactly that many chunks. Past it the error grows
# as sqrt(chunks) by design (measured: 1.05x the limit at 72 chunks in this grid, 1.08-1.14x at
# 820 on an H100), which is why "auto" leaves it there.
MANY_CHUNKS = 72
DTYPE_CHUNKS = 32  # the kernel's AUTO_DTYPE_MAX_CHUNKS: the most chunks "dtype" is claimed for


def _load_ours(**fixed):
    from ligerbench.kernels.fused_linear_cross_entropy import fused_linear_cross_entropy

    return functools.partial(fused_linear_cross_entropy, return_z_loss=True, **fixed)


def _load_ours_chunks(accum: str, chunks: int):
    from ligerbench.kernels.fused_linear_cross_entropy import AUTO_DTYPE_MAX_CHUNKS, fused_linear_cross_entropy

    assert accum != "dtype" or chunks <= AUTO_DTYPE_MAX_CHUNKS, "'dtype' is claimed up to AUTO_DTYPE_MAX_CHUNKS only"

    def call(hidden, weight, target, **opts):
        per_chunk = -(-target.numel() // chunks)  # ceil: exactly `chunks` chunks when N >= 72
        return fused_linear_cross_entropy(
            hidden, weight, target, chunk_tokens=per_chunk, grad_weight_accum=accum, return_z_loss=True, **opts
        )

    return call


def _vocab_split_supports(case: Case) -> str | None:
    opts = OPTIONS[case.option]
    if opts.get("label_smoothing") or opts.get("z_loss_scale"):
        return "split='vocab' has no label smoothing and no z-loss (the kernel refuses them)"
    return None


def _shifted16_supports(case: Case) -> str | None:
    opts = OPTIONS[case.option]
    if case.dtype != "bf16":
        return "store='shifted16' is for bfloat16 inputs (the kernel refuses others)"
    if opts.get("label_smoothing") or opts.get("z_loss_scale") or opts.get("softcap"):
        return "store='shifted16' has no label smoothing, softcap or z-loss (the kernel refuses them)"
    return None


def _many_chunks_supports(case: Case) -> str | None:
    if case.dtype == "fp32":
        return "accumulation modes differ only in 16-bit dtypes (in fp32 'dtype' is 'fp32')"
    if case.n < MANY_CHUNKS:
        return f"fewer than {MANY_CHUNKS} tokens: cannot make {MANY_CHUNKS} chunks"
    return None


def flce_upcast(hidden, weight, target, *, bias=None, **options):
    """PyTorch on float32 logits from upcast operands (the product never rounded to 16 bits),
    then ce_torch: a careful eager implementation, the yardstick's computation."""
    return flce_torch(hidden.float(), weight.float(), target, bias=None if bias is None else bias.float(), **options)


def _load_eager():
    return flce_upcast


@functools.cache
def _load_compiled():
    return compiled(flce_torch, dynamic=False)


def _load_liger():
    from liger_kernel.transformers.functional import liger_fused_linear_cross_entropy

    def call(
        hidden,
        weight,
        target,
        *,
        bias,
        class_weight,
        ignore_index,
        reduction,
        label_smoothing,
        softcap,
        z_loss_scale,
        token_weight,
    ):
        out = liger_fused_linear_cross_entropy(
            hidden,
            weight,
            target,
            bias=bias,
            ce_weight=class_weight,
            ignore_index=ignore_index,
            lse_square_scale=z_loss_scale,
            label_smoothing=label_smoothing,
            reduction=reduction,
            softcap=softcap,
            return_z_loss=True,
        )
        return loss_and_z_loss(out)

    return call


def _liger_supports(case: Case) -> str | None:
    if case.layout != "2d":
        return "Liger-Kernel's fused linear cross entropy takes 2-D hidden states [BT, H] only"
    return ce_options_lacking(case)


def _load_cce():
    from cut_cross_entropy import linear_cross_entropy

    def call(
        hidden,
        weight,
        target,
        *,
        bias,
        class_weight,
        ignore_index,
        reduction,
        label_smoothing,
        softcap,
        z_loss_scale,
        token_weight,
    ):
        # filter_eps=None: the exact gradient (the default "high" skips small gradient entries,
        # which is CCE's speed trick, not a bug; the bench suite times both)
        return linear_cross_entropy(
            hidden,
            weight,
            target,
            ignore_index=ignore_index,
            softcap=softcap,
            reduction=reduction,
            shift=False,
            filter_eps=None,
            impl="cce",
        )

    return call


def _cce_supports(case: Case) -> str | None:
    opts = OPTIONS[case.option]
    missing = [k for k in ("label_smoothing", "z_loss_scale", "class_weight", "token_weight") if opts.get(k)]
    if missing:
        return f"Cut Cross-Entropy has no {', '.join(missing)}"
    if case.bias:
        return "Cut Cross-Entropy 25.1 takes no bias"
    if case.dtype == "fp32":
        return "Cut Cross-Entropy 25.1's backward requires bf16 or fp16 inputs"
    return None


PROVIDERS = (
    Provider(
        name="ours",
        **OURS,
        kernel="flce",
        description="kernels/fused_linear_cross_entropy.py, default chunk budget",
        load=_load_ours,
    ),
    Provider(
        name="ours_small_chunks",
        **OURS,
        kernel="flce",
        description=f"ours with {SMALL_CHUNK_TOKENS}-token chunks (partial and fully ignored chunks)",
        load=lambda: _load_ours(chunk_tokens=SMALL_CHUNK_TOKENS),
        settings={"chunk_tokens": SMALL_CHUNK_TOKENS},
    ),
    Provider(
        name="ours_vocab_split",
        **OURS,
        kernel="flce",
        description="ours cut by vocabulary slices (split='vocab', what 'auto' takes at Gemma-2-sized heads)",
        load=lambda: _load_ours(split="vocab"),
        supports=_vocab_split_supports,
        settings={"split": "vocab"},
    ),
    Provider(
        name="ours_float32_store",
        **OURS,
        kernel="flce",
        description="ours with every chunk's logits kept in float32 (store='float32')",
        load=lambda: _load_ours(store="float32"),
        settings={"store": "float32"},
    ),
    Provider(
        name="ours_shifted16_store",
        **OURS,
        kernel="flce",
        description="ours with every chunk's logits kept in 2 bytes (store='shifted16', bf16 without options)",
        load=lambda: _load_ours(store="shifted16"),
        supports=_shifted16_supports,
        settings={"store": "shifted16"},
    ),
    *(
        Provider(
            name=f"ours_{accum}_{chunks}_chunks",
            **OURS,
            kernel="flce",
            description=f"ours cut into {chunks} chunks, grad_weight_accum={accum!r} (16-bit, >= 72 tokens)",
            load=functools.partial(_load_ours_chunks, accum, chunks),
            supports=_many_chunks_supports,
            settings={"chunks": chunks, "grad_weight_accum": accum},
        )
        for accum, chunks in (("dtype", DTYPE_CHUNKS), ("fp32", MANY_CHUNKS), ("auto", MANY_CHUNKS))
    ),
    Provider(
        name="eager",
        kernel="flce",
        description="PyTorch eager, full float32 logits from upcast operands",
        load=_load_eager,
    ),
    Provider(
        name="textbook",
        kernel="flce",
        description="PyTorch as users write it: float32 logits from upcast operands, F.cross_entropy, the "
        "softcap through autograd's tanh (fails --strict where its slope cancels)",
        load=lambda: functools.partial(flce_upcast, textbook=True),
    ),
    Provider(
        name="torch_compile",
        kernel="flce",
        description="torch.compile of the eager formula",
        load=_load_compiled,
        devices=("cuda",),
    ),
    Provider(
        name="liger",
        kernel="flce",
        description="Liger-Kernel liger_fused_linear_cross_entropy (default chunking)",
        load=_load_liger,
        **LIGER,
        # under Triton's interpreter its softcap and class-weight paths raise inside Triton
        # (AttributeError: 'float' object has no attribute 'to'), and it is the slowest provider
        # there: its verdicts on CPU would be about the interpreter, not about Liger
        devices=("cuda",),
        supports=_liger_supports,
    ),
    Provider(
        name="cce",
        kernel="flce",
        description="Apple Cut Cross-Entropy linear_cross_entropy, impl='cce', filter_eps=None",
        load=_load_cce,
        devices=("cuda",),
        supports=_cce_supports,
    ),
)
