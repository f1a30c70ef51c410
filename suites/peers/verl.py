"""verl (ByteDance's RL trainer) as providers, called as its FSDP engine and fused model forward
call them.

- `lp` (`verl`): the engine's path without fused kernels: `logits / temperature` with the
  temperature cast to the logits' dtype (`_scale_logits_by_temperature`), then
  `verl.utils.torch_functional.logprobs_from_logits` and `entropy_from_logits`; masked rows are
  scored and multiplied out by the loss (here: set to 0).
- `flp` (`verl_fused`): `verl.utils.kernel.linear_cross_entropy(hidden, weight, labels,
  temperature, "none")`, as `forward_with_triton_backend` calls it (Triton, CUDA only).
- `vp_flp` (`verl_fused_tp`): the same head over a tensor-parallel group, as its Megatron
  forward calls it (`linear_cross_entropy(hidden, weight_shard, labels, temperature, "none",
  tp_group)`), with the hidden gradient summed over the group by the adapter, as the trainer's
  tensor-parallel layer sums it.

verl's package `__init__` imports its trainer (Ray, hydra, a transformers < 5.11 pin): `load()`
below imports the two modules we call with empty parents for `verl` and `verl.utils`, so that
`__init__` never runs; the modules themselves need torch, triton, transformers and tensordict.
Install it with `pip install --no-deps verl==0.9.1` (docs/peers.md).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import sys
import types
from pathlib import Path

import torch

from ligerbench.cases import Case
from ligerbench.registry import Provider
from ligerbench.suites.families import sampler_masks
from ligerbench.suites.peers.limits import lacking, refusal
from ligerbench.suites.peers.tensor_parallel import default_group, equal_shards, summed_over_group

DISTRIBUTION = "verl"
PINNED = "0.9.1"
PEER = {"library": DISTRIBUTION, "pinned": PINNED}


def load(module: str):
    """verl's `module` (e.g. "verl.utils.torch_functional") without running verl's package
    `__init__`: the parent packages are made empty namespaces over the installed folders."""
    try:
        root = Path(str(importlib.metadata.distribution(DISTRIBUTION).locate_file(""))) / "verl"
    except importlib.metadata.PackageNotFoundError as exc:
        raise ImportError("verl is not installed (pip install --no-deps verl==0.9.1)") from exc
    for name, folder in (("verl", root), ("verl.utils", root / "utils")):
        known = sys.modules.get(name)
        if known is None:
            parent = types.ModuleType(name)
            parent.__path__ = [str(folder)]
            sys.modules[name] = parent
    return importlib.import_module(module)


def _counted_only(counted: torch.Tensor, logp: torch.Tensor, entropy: torch.Tensor):
    """verl's log-probs and entropies in the targets' shape, 0 at the ignored rows (verl has no
    ignore_index: it scores those rows as any other)."""
    return tuple(torch.where(counted, x.view(counted.shape), 0.0) for x in (logp, entropy))


def _lp():
    functional = load("verl.utils.torch_functional")

    def call(logits, target, *, temperature=1.0, ignore_index=-100, **_):
        counted = target != ignore_index
        scaled = logits / torch.tensor(temperature, device=logits.device).clamp(min=1e-8).to(logits.dtype)
        logp = functional.logprobs_from_logits(scaled, torch.where(counted, target, 0), inplace_backward=False)
        entropy = functional.entropy_from_logits(scaled)
        return _counted_only(counted, logp, entropy)

    return call


def lp_supports(case: Case) -> str | None:
    missing = refusal("verl's logprobs_from_logits", lacking(case, "softcap", "logit_scale", "targets"))
    if missing:
        return missing
    if case.get("layout") == "padded_vocab" or case.get("logits") == sampler_masks.KIND:
        return (
            "logits with -inf entries (a vocabulary masked with -inf, or a sampler's masks): entropy_from_logits "
            "forms p * logit, "
            "0 * -inf = NaN; its engine hands it a model's finite logits"
        )
    if case.get("dtype") in ("bf16", "fp16"):
        return (
            "16-bit logits: the temperature is cast to the logits' dtype and log-probs and entropy come back in "
            "it (without flash-attn's cross entropy); lp's contract is float32 (docs/peers.md)"
        )
    return None


def _fused_flp(tensor_parallel: bool = False):
    """verl's fused linear_cross_entropy; tensor_parallel: over the vocabulary shards of the
    group (vp_flp), as its trainer runs it."""
    fused = load("verl.utils.kernel.linear_cross_entropy")

    def call(hidden, weight, target, *, temperature=1.0, ignore_index=-100, group=None, **_):
        on_group = ()
        if tensor_parallel:
            # verl reads dist_process_group=None as no tensor parallelism (rank 0 of 1: each rank's
            # shard taken for the whole vocabulary), where the harness means the default group; and
            # its backward leaves each rank its shard's part of dL/dh, which its trainer's
            # tensor-parallel layer sums (suites/peers/tensor_parallel.py)
            group = default_group(group)
            hidden, on_group = summed_over_group(hidden, group), (group,)
        counted = target != ignore_index
        logp, entropy = fused.linear_cross_entropy(hidden, weight, torch.where(counted, target, 0),
                                                   float(temperature), "none", *on_group)  # fmt: skip
        return _counted_only(counted, logp, entropy)

    return call


def fused_flp_supports(case: Case) -> str | None:
    missing = refusal("verl's linear_cross_entropy", lacking(case, "softcap", "logit_scale", "bias", "targets"))
    if missing:
        return missing
    if case.get("h", 128) % 128:
        return "verl's linear_cross_entropy asserts hidden_size % 128 == 0"
    if case.get("layout") in ("column_major", "kept_slice"):
        return (
            "verl's linear_cross_entropy asserts contiguous hidden ([N, H] or a [B, T, H] it can view); its model "
            "forward hands it the backbone's whole output"
        )
    return None


def _vocab_parallel_flp():
    return _fused_flp(tensor_parallel=True)


def vocab_parallel_supports(case: Case) -> str | None:
    refused = fused_flp_supports(case)
    if refused:
        return refused
    unequal = equal_shards(case)  # its kernels offset the labels by rank * V_local
    return f"verl's vocab-parallel head {unequal}" if unequal else None


PROVIDERS = (
    Provider(name="verl", kernel="lp", **PEER, load=_lp, supports=lp_supports,
             description="verl's engine: logits / temperature (in the logits' dtype), logprobs_from_logits, "
             "entropy_from_logits"),
    Provider(name="verl_fused", kernel="flp", **PEER, load=_fused_flp, supports=fused_flp_supports,
             devices=("cuda",), description="verl's fused Triton linear_cross_entropy (log-probs + entropy)"),
    Provider(name="verl_fused_tp", kernel="vp_flp", **PEER, load=_vocab_parallel_flp,
             supports=vocab_parallel_supports, devices=("cuda",),
             description="verl's linear_cross_entropy over the tensor-parallel group, the hidden gradient summed "
             "over it as its TP layer sums it"),
)  # fmt: skip
