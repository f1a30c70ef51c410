"""Planted bugs of `pref` (DPO, IPO, KTO; docs/bugs.md, "Bug classes in RL losses"), each a wrapper
around the public op doing what a real trainer got wrong; each must be killed by verify
(tests/test_selftest.py, MUST_KILL)."""

from __future__ import annotations

import torch

from ligerbench.registry import Provider


def _op():
    from ligerbench.kernels.preference_loss import preference_loss

    return preference_loss


def _label_smoothing_ignored(*args, label_smoothing=0.0, **options):
    # an option accepted and ignored (TRL #7062: DPO label_smoothing; Liger #1194's kind)
    return _op()(*args, **options)


def _kto_weights_ignored(*args, desirable_weight=1.0, undesirable_weight=1.0, **options):
    # KTO's class weights accepted and ignored (TRL #7062)
    return _op()(*args, **options)


def _ipo_on_sums(hidden, weight, ids, mask, ref_logps, **options):
    # IPO on summed log-probs: the per-token averaging that IPO's target 1 / (2 beta) assumes left out
    from ligerbench.kernels.preference_loss import preference_from_log_probs, sequence_log_probs

    logps = sequence_log_probs(hidden, weight, ids, mask)
    return preference_from_log_probs(logps, ref_logps, torch.ones_like(mask.sum(-1)), **options)


def _kto_point_not_detached(hidden, weight, ids, mask, ref_logps, *, kl_ref=None, **options):
    # the KL reference point taken from the batch with its gradient: the loss then pushes on the
    # point as well as on each row's log-ratio
    from ligerbench.kernels.preference_loss import preference_from_log_probs, sequence_log_probs

    logps = sequence_log_probs(hidden, weight, ids, mask)
    r = logps - ref_logps
    point = r.mean() if kl_ref is None else torch.as_tensor(kl_ref, dtype=r.dtype)
    shifted = logps - point.clamp(min=0.0)  # r - z, with z's gradient kept
    return preference_from_log_probs(shifted, ref_logps, mask.sum(-1), kl_ref=0.0, **options)


def _kto_point_per_microbatch(*args, kl_ref=None, **options):
    # each micro-batch estimates its own reference point: the step's loss depends on how the
    # batch is split (verl #7200's class)
    return _op()(*args, **options)


def _mutant(name: str, description: str, fn, *targets) -> Provider:
    return Provider(name=f"mutant_pref_{name}", kernel="pref", description=description, load=lambda: fn,
                    mutant=True, targets=targets)  # fmt: skip


PROVIDERS = (
    _mutant("label_smoothing_ignored", "cDPO's label_smoothing accepted and ignored", _label_smoothing_ignored,
            {"label_smoothing": 0.1}),
    _mutant("kto_weights_ignored", "KTO's desirable / undesirable weights accepted and ignored",
            _kto_weights_ignored, {"loss_type": "kto", "weights": "skewed"}),
    _mutant("ipo_on_sums", "IPO on summed, not length-averaged, log-probs", _ipo_on_sums, {"loss_type": "ipo"}),
    _mutant("kto_point_not_detached", "KTO's KL reference point keeps its gradient", _kto_point_not_detached,
            {"loss_type": "kto", "split": "none"}),
    _mutant("kto_point_per_microbatch", "KTO's reference point estimated per micro-batch, the step's ignored",
            _kto_point_per_microbatch, {"loss_type": "kto", "split": "accum2"}),
)  # fmt: skip
