"""Planted bugs in the model patch: the convergence suite must fail on each (tests prove it).

Each is a `CausalLMPatch` with one thing wrong, the way real patches have gone wrong:
  not_applied               enters and exits without touching the model: everything then
                            compares transformers with itself and agrees perfectly
  logits_to_keep_eval_only  slices the hidden states by logits_to_keep in eval mode only,
                            while transformers slices in every mode (docs/bugs.md, bug 5)
  not_reverted              leaves the patched forward on the instance after the context
                            (docs/bugs.md, bug 7: later cases then compare the kernel with itself)
  per_token_when_packed     asked for per-sequence normalisation of packed rows, weights every
                            token alike (a plain per-token mean; docs/bugs.md, bug 4)
  loss_scaled               a loss 1% too large (a wrong normalisation): the per-step loss
                            against the float64 run must see it from step 0, where chaos has
                            amplified nothing yet
  mean_over_every_position  a normaliser over every position, prompt and padding included,
                            not the counted targets: the loss and its gradient scaled by the
                            counted share (~0.6 here); loss_per_step and the step-0 gradients
  logits_rounded_16bit      the logits rounded to bf16 before the loss (in a float32 model): one
                            16-bit rounding, the loss, its gradient and so the whole trajectory off
                            by ~2**-9, thousands of float32 roundings (an equivalent mutant in bf16)
  grad_scaled               the loss right, its gradient twice what it should be (a backward
                            scaled wrong): only the step-0 gradients see it, since AdamW is blind
                            to a gradient's scale
  labels_not_shifted        position t scored against token t instead of t + 1 (the shift lost):
                            another objective, so the loss, the parameters and the eval
                            log-probs all depart, in bf16 too
SoftcapDropped (not in MUTANTS: on llama-mini, selftest's model, it would be an equivalent
mutant) trains Gemma-2 without its final-logit softcap: a wrong loss and a wrong trajectory.
"""

from __future__ import annotations

import torch

from ligerbench.converge.parallel import Normalisation
from ligerbench.kernels.hf import CausalLMPatch


class NotApplied(CausalLMPatch):
    def __enter__(self):
        self.active = True
        return self

    def __exit__(self, *exc):
        self.active = False


class LogitsToKeepEvalOnly(CausalLMPatch):
    def slice_hidden(self, model, hidden, logits_to_keep):
        return hidden if model.training else super().slice_hidden(model, hidden, logits_to_keep)


class NotReverted(CausalLMPatch):
    def __exit__(self, *exc):
        self.active = False  # says it is off, but the instance keeps the patched forward


class LossScaled(CausalLMPatch):
    def _ce_loss(self, *args):
        return 1.01 * super()._ce_loss(*args)

    def _fused_loss(self, *args):
        return 1.01 * super()._fused_loss(*args)


class PerTokenWhenPacked(CausalLMPatch):
    def _targets(self, labels, position_ids, kwargs):
        target, weights, reduction, divisor = super()._targets(labels, position_ids, kwargs)
        if weights is not None:  # per-sequence weights replaced by a uniform per-token mean
            counted = (target != kwargs.get("ignore_index", -100)).to(weights.dtype)
            weights = counted / counted.sum().clamp_min(1)
        return target, weights, reduction, divisor


class SoftcapDropped(CausalLMPatch):
    def _ce_loss(self, raw_logits, labels, position_ids, cap, kwargs):
        return super()._ce_loss(raw_logits, labels, position_ids, None, kwargs)

    def _fused_loss(self, model, hidden, labels, position_ids, cap, kwargs):
        return super()._fused_loss(model, hidden, labels, position_ids, None, kwargs)


class MeanOverEveryPosition(CausalLMPatch):
    def _targets(self, labels, position_ids, kwargs):
        target, weights, reduction, divisor = super()._targets(labels, position_ids, kwargs)
        if reduction == "mean":  # summed, then divided by every position: ignored ones counted too
            return target, weights, "sum", target.numel()
        return target, weights, reduction, divisor


class LogitsRounded16bit(CausalLMPatch):
    def _ce_loss(self, raw_logits, *args):
        return super()._ce_loss(raw_logits.to(torch.bfloat16).to(raw_logits.dtype), *args)


class _TwiceTheGradient(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        return 2 * grad


class GradScaled(CausalLMPatch):
    def _ce_loss(self, *args):
        return _TwiceTheGradient.apply(super()._ce_loss(*args))

    def _fused_loss(self, *args):
        return _TwiceTheGradient.apply(super()._fused_loss(*args))


class LabelsNotShifted(CausalLMPatch):
    def _targets(self, labels, position_ids, kwargs):
        target, weights, reduction, divisor = super()._targets(labels, position_ids, kwargs)
        if kwargs.get("shift_labels") is None and not self.per_sequence_mean:
            target = labels.reshape(-1)  # the labels as given, unshifted
        return target, weights, reduction, divisor


MUTANTS = {
    "not_applied": NotApplied,
    "logits_to_keep_eval_only": LogitsToKeepEvalOnly,
    "not_reverted": NotReverted,
    "loss_scaled": LossScaled,
    "per_token_when_packed": PerTokenWhenPacked,
    "mean_over_every_position": MeanOverEveryPosition,
    "logits_rounded_16bit": LogitsRounded16bit,
    "grad_scaled": GradScaled,
    "labels_not_shifted": LabelsNotShifted,
}


def grad_divided_by_world_twice(dp_size: int) -> float:
    """Data parallel (converge --parallel ddp|fsdp2|fsdp2_tp): the loss normalised by the GLOBAL
    token count and backpropagated as it is, while DDP / FSDP2 average the gradients over the dp
    ranks again: the gradient comes out `dp_size` times too small (the correct backward scale is
    `dp_size`: ligerbench/converge/parallel.py, backward_scale). The loss logged is right."""
    return 1.0


# planted bugs of the parallel runs: name -> how their data-parallel step normalises
PARALLEL_MUTANTS = {
    "grad_divided_by_world_twice": Normalisation(scale=grad_divided_by_world_twice),
    # each micro-batch (and rank) its own mean, averaged: a micro-batch with few counted targets
    # weighs as much as one with many (transformers' gradient accumulation before its 2024 fix)
    "mean_per_micro_batch": Normalisation(scale=lambda dp_size: 1.0, per_micro_batch=True),
    # 2-D plans: the count all-reduced over every rank, as on a 1-D mesh, while the tp ranks of a
    # replica hold the same tokens: each counted TP_SIZE times, the loss and gradient halved
    "count_over_tp_too": Normalisation(count_over_world=True),
}
