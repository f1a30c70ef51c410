"""QuACK (`quack-kernels`, CuTe DSL kernels by Tri Dao's group) as a provider of `ce` and `flce`,
called as its own modules document the call.

    ligerbench verify --kernel flce --provider quack --preset full --device cuda
    ligerbench verify --kernel ce --provider quack --preset quick --device cuda

(flce's quick grid holds no case within its limits: each has a bias, reduction "none", 3-D
hidden states or a row count not a multiple of 8; the full grid has 63.)
    ligerbench bench --kernel flce --sweep heads --provider ours --provider quack --provider quack_chunk_1024

- `ce` (`quack`): `quack.cross_entropy.cross_entropy(logits, target, weight=class_weight,
  ignore_index=..., reduction=...)`, its autograd function (loss in float32, the gradient formed
  in backward).
- `flce` (`quack`): `quack.linear_cross_entropy.chunked_linear_cross_entropy(hidden, weight,
  target, ignore_index=..., reduction=...)` at its default chunk of 4096 rows: the cross entropy in
  its GEMM's epilogue, the logits' gradient formed on load into the backward products, the weight
  gradient accumulated in float32 by the GEMM. `quack_chunk_1024` (bench only): the same at
  chunk_size=1024, its leaner setting.

Its limits (declared in `supports`, each a skip with the reason): a CUDA device of SM90 or newer;
2-D inputs only ("Input must be 2D"); no label smoothing, softcap, z-loss or per-token weights (it
has no parameter for them); its linear cross entropy has no bias and no class weights, and only
the "mean" and "sum" reductions ("Invalid reduction") and 16-bit inputs (its SM90 GEMM raises
"a_dtype should be float16 or float8" for float32); its row count a multiple of 8
(`assert B_L % 8 == 0`); the cross entropy's vocabulary a multiple of its 16-byte vector
(`Input N ... is not divisible by vector size`).

Installing it: QuACK fingerprints every function defined outside a folder named `site-packages`
and then refuses the CUTLASS DSL's module globals (a TypeError naming a Logger with
nvidia-cutlass-dsl 4.7.1, a ContextVar with 4.8.1). One `pip install --target
<dir>/site-packages` of quack-kernels, nvidia-cutlass-dsl 4.7.1 with its libs (core, base and
cu13: the `cutlass` Python package is in libs-core, without which `import quack` fails with "No
module named 'cutlass.cutlass_dsl'"), nvidia-cuda-nvdisasm, apache-tvm-ffi and torch-c-dlpack-ext,
with `<dir>/site-packages` and `<dir>/site-packages/nvidia_cutlass_dsl/dsl_packages` on
PYTHONPATH, runs (docs/peers.md).
"""

from __future__ import annotations

import functools

from ligerbench.cases import OPTIONS, Case
from ligerbench.registry import Provider
from ligerbench.suites.peers.limits import refusal

DISTRIBUTION = "quack-kernels"
PINNED = "0.6.5"
PEER = {"library": DISTRIBUTION, "pinned": PINNED}
_VECTOR_BYTES = 16  # its cross entropy loads 16 bytes a thread: the row length a multiple of it
_ELEMENT_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}

# option -> what it is, for the options neither of its losses has a parameter for
_LACKS = {"label_smoothing": "label smoothing", "softcap": "a softcap", "z_loss_scale": "a z-loss",
          "token_weight": "per-token weights"}  # fmt: skip


def _lacking(case: Case, extra: dict[str, str]) -> str | None:
    opts = OPTIONS[case.option]
    return refusal("QuACK", [what for key, what in {**_LACKS, **extra}.items() if opts.get(key)])


def _load_ce():
    from quack.cross_entropy import cross_entropy

    def call(logits, target, *, weight, ignore_index, reduction, **_):
        return cross_entropy(logits, target, weight=weight, ignore_index=ignore_index, reduction=reduction)

    return call


def ce_supports(case: Case) -> str | None:
    if case.layout != "2d":
        return "QuACK's cross entropy takes 2-D logits [BT, V] only (it asserts 'Input must be 2D')"
    if (case.v * _ELEMENT_BYTES[case.dtype]) % _VECTOR_BYTES:
        return f"QuACK's cross entropy needs V a multiple of {_VECTOR_BYTES} bytes (it asserts so); V={case.v}"
    return _lacking(case, {})


def _load_flce(chunk_size: int | None = None):
    from quack.linear_cross_entropy import chunked_linear_cross_entropy

    chunk = {} if chunk_size is None else {"chunk_size": chunk_size}

    def call(hidden, weight, target, *, ignore_index, reduction, **_):
        return chunked_linear_cross_entropy(hidden, weight, target, ignore_index=ignore_index, reduction=reduction,
                                            **chunk)  # fmt: skip

    return call


def flce_supports(case: Case) -> str | None:
    if case.layout != "2d":
        return "QuACK's linear cross entropy takes 2-D hidden states [BT, H] only"
    if case.reduction == "none":
        return "QuACK's linear cross entropy has the 'mean' and 'sum' reductions only"
    if case.n % 8:
        return f"QuACK's linear cross entropy needs a row count that is a multiple of 8 (it asserts so); N={case.n}"
    if case.bias:
        return "QuACK's linear cross entropy has no bias"
    if case.dtype == "fp32":
        # its SM90 GEMM raises TypeError("a_dtype should be float16 or float8") (H200, 2026-11-28)
        return "QuACK's linear cross entropy takes 16-bit inputs only (its GEMM: 'a_dtype should be float16 or float8')"
    return _lacking(case, {"class_weight": "class weights"})


GPU_PEER = {**PEER, "devices": ("cuda",)}  # CuTe DSL kernels: SM90 or newer
PROVIDERS = (
    Provider(name="quack", kernel="ce", **GPU_PEER, load=_load_ce, supports=ce_supports,
             description="QuACK quack.cross_entropy.cross_entropy (CuTe DSL)"),
    Provider(name="quack", kernel="flce", **GPU_PEER, load=_load_flce, supports=flce_supports,
             description="QuACK quack.linear_cross_entropy.chunked_linear_cross_entropy, its default chunk of 4096 "
             "rows (CuTe DSL: the cross entropy in the GEMM's epilogue)"),
    Provider(name="quack_chunk_1024", kernel="flce", **GPU_PEER, load=functools.partial(_load_flce, 1024),
             supports=flce_supports, bench_only=True,
             description="QuACK's chunked linear cross entropy at chunk_size=1024, its leaner setting"),
)  # fmt: skip
