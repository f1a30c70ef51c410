"""Liger-Kernel (LinkedIn) as providers of the RL kernels, called as its own frontends call them.

- `flp` (`liger`): `LigerFusedLinearScaledCrossEntropyFunction`, its fused NLL + entropy (on SM90
  its frontend picks a CuTe DSL path that needs `nvidia-cutlass-dsl`; elsewhere a PyTorch path);
  `liger_torch_path` (bench only): that PyTorch fallback called directly.
- `grpo` (`liger_triton`): `triton_grpo_loss` over the full logits [B, T+1, V] (it reads one
  position past the last completion token), reduced as TRL's compute_loss reduces (its
  `reduce=True`, `num_items_in_batch`); `liger_fused_linear`: `LigerFusedLinearGRPOLoss`, the
  chunked fused-linear loss (torch.compile'd chunks), as Liger's docs build it.
  Liger's KL is the k3 estimator only: k1 cases are skipped (its documented limit).

Liger's cross entropy and fused linear cross entropy providers live with `ce` and `flce`.
"""

from __future__ import annotations

import torch

from ligerbench.cases import Case
from ligerbench.registry import Provider

DISTRIBUTION = "liger-kernel"
PINNED = "0.8.5"
PEER = {"library": DISTRIBUTION, "pinned": PINNED}


# ---- flp


def _flp():
    from liger_kernel.ops.fused_linear_scaled_cross_entropy import LigerFusedLinearScaledCrossEntropyFunction as F

    if torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9:
        import cutlass  # noqa: F401 -- on SM90 its frontend takes the CuTe DSL path (nvidia-cutlass-dsl)

    def call(hidden, weight, target, *, temperature=1.0, ignore_index=-100, **_):
        # Liger takes [M, H] and [M] only: [B, T, H] flattened as a trainer would (a copy where
        # the strides do not allow a view), its outputs shaped back
        rows = hidden.reshape(-1, hidden.shape[-1])
        # (input, weight, target, temperature, ignore_index, m_tiles_per_cluster, return_entropy)
        nll, entropy = F.apply(rows, weight, target.reshape(-1), temperature, ignore_index, 1, True)
        return -nll.reshape(target.shape), entropy.reshape(hidden.shape[:-1])

    return call


def _flp_torch_path():
    """The fused NLL + entropy's PyTorch fallback (512-row chunks), called directly: on an H100
    the frontend picks the CuTe DSL path, which needs nvidia-cutlass-dsl."""
    from liger_kernel.ops.fused_linear_scaled_cross_entropy import _FusedLinearPPOFallbackFunction as F

    def call(hidden, weight, target, *, temperature=1.0, ignore_index=-100, **_):
        rows = hidden.reshape(-1, hidden.shape[-1])
        # (input, weight, target, temperature, ignore_index, return_entropy)
        nll, entropy = F.apply(rows, weight, target.reshape(-1), temperature, ignore_index, True)
        return -nll.reshape(target.shape), entropy.reshape(hidden.shape[:-1])

    return call


def flp_supports(case: Case) -> str | None:
    """What Liger-Kernel 0.8.5's fused NLL + entropy has no parameter for (it would be ignored)."""
    missing = [
        what
        for what, absent in (
            ("softcap", not case.get("softcap")),
            ("logit scale", case.get("logit_scale") == 1.0),
            ("bias", not case.get("bias")),
            ("K targets per row", case.get("targets") == 1),
        )
        if not absent
    ]
    return f"Liger's fused NLL + entropy has no parameter for: {', '.join(missing)}" if missing else None


# ---- grpo


def grpo_supports(case: Case) -> str | None:
    if case.get("kl") == "k1":
        return "Liger's GRPO losses take the k3 KL estimator only (no k1)"
    return None


def _raw_bound(loss_type: str, eps_high: float) -> float:
    """Liger (as TRL) takes CISPO's `epsilon_high` as the raw bound on the ratio (min(r, eps_high));
    grpo's contract passes the excess over 1 (min(r, 1 + eps_high)), as for the PPO clip."""
    return 1.0 + eps_high if loss_type == "cispo" else eps_high


def _triton_grpo(logits_dtype=None):
    """logits_dtype None: the product in the inputs' dtype, as a trainer's model forward forms it."""
    from liger_kernel.transformers.grpo_loss import triton_grpo_loss

    def call(hidden, weight, completion_ids, old_logp, ref_logp, advantages, mask, *, loss_type, importance_level,
             eps_low, eps_high, beta, temperature, num_items=None, max_completion_length=None, **_):  # fmt: skip
        eps_high = _raw_bound(loss_type, eps_high)
        padded = torch.nn.functional.pad(hidden, (0, 0, 0, 1))
        logits = padded @ weight.t() if logits_dtype is None else padded.to(logits_dtype) @ weight.to(logits_dtype).t()
        loss, _ = triton_grpo_loss(logits, old_logp, ref_logp if beta else None, completion_ids, advantages, mask,
                                   temperature=temperature, beta=beta, eps_low=eps_low, eps_high=eps_high,
                                   loss_type=loss_type, max_completion_length=max_completion_length,
                                   importance_sampling_level=importance_level, reduce=True,
                                   num_items_in_batch=num_items)  # fmt: skip
        return loss

    return call


def _fused_linear_grpo():
    from liger_kernel.chunked_loss import LigerFusedLinearGRPOLoss

    modules = {}

    def call(hidden, weight, completion_ids, old_logp, ref_logp, advantages, mask, *, loss_type, importance_level,
             eps_low, eps_high, beta, temperature, num_items=None, max_completion_length=None, **_):  # fmt: skip
        eps_high = _raw_bound(loss_type, eps_high)
        max_completion_length = max_completion_length or mask.shape[-1]  # required for dr_grpo; TRL passes its own
        key = (loss_type, importance_level, eps_low, eps_high, beta, temperature, max_completion_length)
        if key not in modules:
            modules[key] = LigerFusedLinearGRPOLoss(
                beta=beta, loss_type=loss_type, importance_sampling_level=importance_level, epsilon_low=eps_low,
                epsilon_high=eps_high, temperature=temperature, use_ref_model=bool(beta),
                max_completion_length=max_completion_length)  # fmt: skip
        out = modules[key](hidden, weight, completion_ids, mask, advantages, ref_per_token_logps=ref_logp,
                           old_per_token_logps=old_logp, num_items_in_batch=num_items)  # fmt: skip
        return out[0] if isinstance(out, tuple) else out

    return call


PROVIDERS = (
    Provider(name="liger", kernel="flp", **PEER, load=_flp, supports=flp_supports,
             description="Liger-Kernel's fused NLL + entropy (LigerFusedLinearScaledCrossEntropyFunction; its "
             "PyTorch path off SM90)"),
    Provider(name="liger_torch_path", kernel="flp", **PEER, bench_only=True, load=_flp_torch_path,
             supports=flp_supports, description="Liger-Kernel's fused NLL + entropy, its PyTorch path"),
    Provider(name="liger_triton", kernel="grpo", **PEER, load=_triton_grpo, supports=grpo_supports,
             description="Liger-Kernel's triton_grpo_loss on the full logits (the product in the inputs' dtype)"),
    Provider(name="liger_fused_linear", kernel="grpo", **PEER, load=_fused_linear_grpo, supports=grpo_supports,
             devices=("cuda",), description="Liger-Kernel's LigerFusedLinearGRPOLoss (chunked, compiled)"),
)  # fmt: skip
