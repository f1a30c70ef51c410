"""Planted bugs of `grpo` (docs/bugs.md, "Bug classes in RL losses"), each a wrapper around the
public op that does what a real trainer or kernel got wrong, or (mutant_grpo_eager_*) the op's eager
path with one of its parts replaced (a subclass of kernels/grpo_loss.py's EagerGRPOFunction); each
must be killed by verify (tests/test_selftest.py, MUST_KILL)."""

from __future__ import annotations

import torch

from ligerbench.registry import Provider
from ligerbench.suites.common import split_step


def _op():
    from ligerbench.kernels.grpo_loss import grpo_loss

    return grpo_loss


def _num_items_ignored(*args, num_items=None, **options):
    # the normaliser of the micro-batch (or rank) it sees: Liger #1082, TRL #6024, verl #5625
    return _op()(*args, **options)


def _dr_grpo_as_mean(*args, loss_type, **options):
    # Dr. GRPO's constant normaliser replaced by the token mean it exists to avoid (verl #3741)
    return _op()(*args, loss_type="bnpo" if loss_type == "dr_grpo" else loss_type, **options)


def _k3_for_k1(*args, kl_estimator, **options):
    # an estimator option that falls through to the default (verl #179)
    return _op()(*args, kl_estimator="k3", **options)


def _eps_high_ignored(*args, eps_low, eps_high, **options):
    # clip-higher accepted and ignored: the symmetric range (an option ignored: Liger #1194's kind)
    return _op()(*args, eps_low=eps_low, eps_high=eps_low, **options)


def _temperature_ignored(*args, temperature, **options):
    # the log-probs of the logits as they are, not at the sampling temperature (TRL #4159)
    return _op()(*args, temperature=1.0, **options)


def _kl_sign_flipped(hidden, weight, completion_ids, old_logp, ref_logp, advantages, mask, *, beta, kl_estimator,
                     temperature, **options):  # fmt: skip
    # k1 taken as ref_logp - logp: the penalty rewards moving away from the reference (verl #179)
    from ligerbench.kernels.fused_linear_log_probs import fused_linear_log_probs
    from ligerbench.kernels.grpo_loss import policy_loss

    logp, _ = fused_linear_log_probs(hidden, weight, torch.where(mask.bool(), completion_ids, -100),
                                     temperature=temperature)  # fmt: skip
    return policy_loss(logp, old_logp, ref_logp, advantages, mask, beta=-beta, kl_estimator="k1", **options)


def _clip_max(hidden, weight, completion_ids, old_logp, ref_logp, advantages, mask, *, eps_low, eps_high,
              temperature, loss_type, **options):  # fmt: skip
    # the optimistic bound: max where PPO takes min (wrong for negative advantages: the clip
    # no longer stops a step that pushes a bad token's probability down too far)
    from ligerbench.kernels.fused_linear_log_probs import fused_linear_log_probs

    logp, _ = fused_linear_log_probs(hidden, weight, torch.where(mask.bool(), completion_ids, -100),
                                     temperature=temperature)  # fmt: skip
    r = torch.exp(logp - old_logp)
    a = advantages[:, None]
    per_token = -torch.maximum(r * a, r.clamp(1 - eps_low, 1 + eps_high) * a) * mask
    return (per_token.sum(-1) / mask.sum(-1).clamp(min=1)).mean()


def _eager_with(**parts):
    """The eager path (gradients formed in forward) with some of its parts replaced."""
    from ligerbench.kernels.chunking import DEFAULT_CHUNK_BYTES
    from ligerbench.kernels.grpo_loss import EagerGRPOFunction, eager_loss

    buggy = type("Buggy", (EagerGRPOFunction,), parts)

    def call(hidden, weight, completion_ids, old_logp, ref_logp, advantages, mask, **options):
        options = {"num_items": None, "max_completion_length": None, **options}
        return eager_loss(buggy, hidden, weight, completion_ids, old_logp, ref_logp, advantages, mask, bias=None,
                          options=options, chunk_bytes=DEFAULT_CHUNK_BYTES, grad_weight_accum="auto")  # fmt: skip

    return call


def _upstream_ignored(g, up):
    # the gradients formed in forward handed back as they are: right only for loss.backward() on
    # the loss itself, wrong once it is scaled (gradient accumulation's 1/k, DDP's 1/world)
    return None


def _cispo_ratio_kept(logp, old_logp, ref_logp, a, m, **terms):
    # CISPO's clipped ratio left in the graph when the weights dL/dlogp are taken: the loss is
    # unchanged, the gradient gains the ratio's own term (what a hand-derived weight that forgets
    # the stop-gradient gives)
    from ligerbench.kernels.grpo_loss import token_terms

    per_token = token_terms(logp, old_logp, ref_logp, a, m, **terms)
    if terms["loss_type"] != "cispo":
        return per_token
    w = torch.clamp(torch.exp(logp - old_logp), max=1.0 + terms["eps_high"])
    return per_token - (w - w.detach()) * a * logp * m


def _mutant(name: str, description: str, fn, *targets) -> Provider:
    return Provider(name=f"mutant_grpo_{name}", kernel="grpo", description=description, load=lambda: fn,
                    mutant=True, targets=targets)  # fmt: skip


PROVIDERS = (
    _mutant("num_items_ignored", "the normaliser of each micro-batch or rank, not the step's (num_items ignored)",
            _num_items_ignored, {"loss_type": ("dapo", "cispo"), "split": ("accum2", "dp2", "accum4", "dp4")}),
    _mutant("dr_grpo_as_mean", "Dr. GRPO's constant normaliser replaced by the token mean", _dr_grpo_as_mean,
            {"loss_type": "dr_grpo"}),
    _mutant("k3_for_k1", "kl_estimator='k1' asked, k3 computed", _k3_for_k1, {"kl": "k1"}),
    _mutant("kl_sign_flipped", "k1 as ref_logp - logp", _kl_sign_flipped, {"kl": "k1"}),
    _mutant("eps_high_ignored", "eps_high accepted and ignored (eps_low both sides)", _eps_high_ignored,
            {"eps": "asym", "loss_type": ("grpo", "bnpo", "dr_grpo", "dapo")}),
    _mutant("clip_max", "max where PPO's clipped objective takes min", _clip_max,
            {"loss_type": "grpo", "importance_level": "token", "kl": "none"}),
    _mutant("temperature_ignored", "log-probs at temperature 1 whatever the sampling temperature",
            _temperature_ignored, {"temperature": 0.7}),
    _mutant("eager_upstream_ignored", "the eager path's gradients not scaled by the upstream gradient of the loss",
            _eager_with(SCALE=staticmethod(_upstream_ignored)), {"importance_level": "token", "split": "dp2"}),
    _mutant("eager_cispo_ratio_kept", "the eager path's weights taken through CISPO's clipped ratio (no stop-gradient)",
            _eager_with(TOKEN_TERMS=staticmethod(_cispo_ratio_kept)), {"importance_level": "token",
                                                                       "loss_type": "cispo"}),
)  # fmt: skip
PROVIDERS += (
    # the trainer's half of the same bug, for the per-sequence normalisers too (suites/common/split_step.py)
    split_step.local_normaliser(
        "grpo", "mutant_grpo_local_normaliser", _op,
        "each piece of a split step normalised by its own sequences (grpo, dr_grpo) or tokens (dapo, cispo), the "
        "pieces averaged (verl's dynamic batch sizes; Megatron-LM #7452 for tokens)",
        # per sequence where the pieces' sequence counts differ; per token wherever their token counts do
        {"spread": "uneven", "loss_type": ("grpo", "dr_grpo", "dapo", "cispo")},
        {"spread": ("one_token", "empty_piece"), "loss_type": ("dapo", "cispo")},
    ),
)  # fmt: skip
