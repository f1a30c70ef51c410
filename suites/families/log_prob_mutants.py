"""Planted bugs of the log-prob kernels (`lp`, `flp`), one per real bug class of docs/bugs.md
("Bug classes in log-probs and entropy"), each a PyTorch rendering of the semantics with the bug
in it, on float32 logits: the verify grid must catch every one, and `ligerbench selftest` shows
which case does.

    bug                      where it was real
    temperature_on_logp      TRL #4159, prime-rl #697: log_softmax(x)[t] / T, not log_softmax(x / T)[t]
    scale_after_softcap      unsloth-zoo #593, TRL #5691: the logit scale outside the tanh
    mass_on_padding          unsloth #10616: padding columns read as 0 (a masked load's other=0), not -inf
    entropy_grad_dropped     TRL #6625: the entropy computed from detached probabilities
    max_from_zero            verl #7439: the row max starts at 0, not -inf
    entropy_nan_at_zero      VeOmni #720: p * log p with log p = -inf where p = 0
    ignores_logit_scale      Liger #974 / #1194 kind: an option accepted and ignored
"""

from __future__ import annotations

import torch

from ligerbench.suites.families.log_prob import at_targets


def buggy(bug: str):
    """fn(logits, target, **options) -> (logp, entropy) with `bug` planted."""

    def fn(logits, target, *, temperature=1.0, softcap=None, logit_scale=1.0, ignore_index=-100):
        x = logits.float()
        if bug == "ignores_logit_scale":
            logit_scale = 1.0
        if bug == "mass_on_padding":
            x = torch.where(x == float("-inf"), 0.0, x)
        z = logit_scale * x
        if softcap:
            if bug == "scale_after_softcap":
                z = logit_scale * (softcap * torch.tanh(x / softcap))
            else:
                z = torch.where(z == float("-inf"), z, softcap * torch.tanh(z / softcap))
        if bug != "temperature_on_logp":
            z = z / temperature
        if bug == "max_from_zero":
            m = z.max(-1, keepdim=True).values.clamp(min=0.0)
            log_sm = z - (m + torch.log(torch.exp(z - m).sum(-1, keepdim=True)))
        else:  # the accurate form of the semantics (log1p), so that only the planted bug differs
            m, at = z.max(-1, keepdim=True)
            zm = z - m
            log_sm = zm - torch.log1p(torch.exp(zm).scatter(-1, at, 0.0).sum(-1, keepdim=True))
        p = log_sm.exp()
        if bug == "entropy_grad_dropped":
            p = p.detach()
            log_sm_h = log_sm.detach()
        else:
            log_sm_h = log_sm
        if bug == "entropy_nan_at_zero":
            entropy = -(p * torch.log(p)).sum(-1)
        else:
            entropy = -(p * torch.where(p > 0, log_sm_h, 0.0)).sum(-1)
        if bug == "temperature_on_logp":
            log_sm = log_sm / temperature
        return at_targets(log_sm, entropy, target, ignore_index)

    return fn


# bug -> (what it is, the case slices where it shows)
BUGS = {
    "temperature_on_logp": ("temperature applied to the log-probs, not the logits", ({"temperature": 0.6},)),
    "scale_after_softcap": ("the logit scale applied outside the softcap", ({"softcap": 30.0, "logit_scale": 0.5,
                                                                            "dtype": "fp32"},)),
    "mass_on_padding": ("padding columns read as 0, not -inf: the padding gets mass", ({},)),
    "entropy_grad_dropped": ("entropy from detached probabilities: no gradient", ({"upstream": "entropy"},)),
    "max_from_zero": ("the row max starts at 0, not -inf", ({"logits": "shifted"},)),
    "entropy_nan_at_zero": ("p * log p with log 0 = -inf: NaN where p = 0", ({"softcap": 0.0},)),
    "ignores_logit_scale": ("logit_scale accepted and ignored", ({"logit_scale": 0.5},)),
}  # fmt: skip
