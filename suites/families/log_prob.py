"""What `lp` and `flp` share: the semantics of kernels/log_probs.py in PyTorch (the float64 truth
and, in float32, the tolerance yardstick), the case axes both kernels have, how a case's targets
and upstream gradients are drawn, and how a provider's outputs and gradients are collected.

The yardstick (docs/bugs.md, "Bug classes in log-probs and entropy"): the logits computed in float32
from the unrounded inputs, never rounded to 16 bits (what torch.compile and a careful kernel do),
the semantics in float32, and each 16-bit gradient rounded once at the end (for `flp`, the logits'
gradient once before the products too: suites/common/rounding.py). A kernel that rounds the logits to bf16
before the softmax is then 4-23% off (Liger #1432) against a yardstick within a rounding of the
truth. That is the careful yardstick; `reference(..., textbook=True)` is the textbook one
(ligerbench/tolerance.py).
"""

from __future__ import annotations

import torch

from ligerbench.axes import Axis
from ligerbench.problems import Outcome, Spy, as_handed, copies_of, fresh_view, layout_of, same_bits, written
from ligerbench.suites.common.device_tanh import forms_on, tanh_one_ulp_low

IGNORE = -100


def reference(x, target, *, temperature=1.0, softcap=None, logit_scale=1.0, ignore_index=IGNORE, textbook=False):
    """(logp, entropy) of kernels/log_probs.py's semantics in PyTorch, in x's dtype. textbook:
    written as TRL, verl and transformers users write it (the softcap's slope through autograd's
    tanh), the default verdict's yardsticks (ligerbench/tolerance.py): True, `torch.log_softmax`
    and -(p * logp).sum(-1); "logsumexp", x_t - logsumexp(x) and logsumexp(x) - (p * x).sum(-1)
    (verl's and TRL's PyTorch functions, and the online-softmax kernels' closing formulas);
    "tanh_ulp", as True with the softcap's tanh one ulp nearer 0, as a device's may be
    (suites/common/device_tanh.py)."""
    z = logit_scale * x
    if softcap:
        tanh = tanh_one_ulp_low if textbook == "tanh_ulp" else torch.tanh
        z = torch.where(z == float("-inf"), z, softcap * tanh(z / softcap))
    z = z / temperature
    if textbook == "logsumexp":
        return _logsumexp_form(z, target, ignore_index)
    if textbook:
        logp_all = torch.log_softmax(z, dim=-1)
    else:
        # log_softmax with log s = log1p(sum over all but one copy of the max): confident rows
        # keep their digits (torch.log_softmax rounds log(1 + 1e-19) to 0 even in float64)
        m, at = z.max(-1, keepdim=True)
        zm = z - m
        logp_all = zm - torch.log1p(torch.exp(zm).scatter(-1, at, 0.0).sum(-1, keepdim=True))
    p = logp_all.exp()
    # 0 log 0 = 0, with a zero gradient (a where() after the product would pass 0 * -inf = NaN back)
    entropy = -(p * torch.where(p > 0, logp_all, 0.0)).sum(-1)
    return at_targets(logp_all, entropy, target, ignore_index)


def at_targets(logp_all, entropy, target, ignore_index):
    """(logp, entropy) at the targets ([..] or [.., K]) from every class's log-prob [.., V] and the
    rows' entropies: each target's log-prob, 0 where it is ignored; the entropy, 0 where every
    target of its row is ignored."""
    one = target.dim() == logp_all.dim() - 1
    t = target.unsqueeze(-1) if one else target
    counted = t != ignore_index
    logp = torch.where(counted, logp_all.gather(-1, torch.where(counted, t, 0)), 0.0)
    entropy = torch.where(counted.any(-1), entropy, 0.0)
    return (logp.squeeze(-1) if one else logp), entropy


def _logsumexp_form(z, target, ignore_index):
    lse = torch.logsumexp(z, dim=-1, keepdim=True)
    entropy = lse.squeeze(-1) - (torch.softmax(z, dim=-1) * z).sum(-1)
    one = target.dim() == z.dim() - 1
    t = target.unsqueeze(-1) if one else target
    counted = t != ignore_index
    logp = torch.where(counted, z.gather(-1, torch.where(counted, t, 0)) - lse, 0.0)
    entropy = torch.where(counted.any(-1), entropy, 0.0)
    return (logp.squeeze(-1) if one else logp), entropy


TEXTBOOK_FORMS = (True, "logsumexp", "tanh_ulp")  # the ways users write it: each a textbook yardstick


def textbook_forms(softcap: float | None) -> tuple:
    """TEXTBOOK_FORMS that differ on a case: "tanh_ulp" only where there is a softcap."""
    return forms_on(TEXTBOOK_FORMS, softcap)


def make_target(rows: tuple[int, ...], k: int | None, v: int, pattern: str, gen) -> torch.Tensor:
    """Targets [*rows] (k None) or [*rows, k] with an ignore pattern: none; random (30% of the
    entries, and all of row 1: with K targets both a partly and a fully ignored row);
    leading_run (the first half of the rows and one more: a prompt); all."""
    shape = rows + ((k,) if k else (1,))
    t = torch.randint(0, v, shape, generator=gen)
    flat = t.view(-1, shape[-1])
    if pattern == "random":
        flat[torch.rand(flat.shape, generator=gen) < 0.3] = IGNORE
        flat[min(1, flat.shape[0] - 1)] = IGNORE
    elif pattern == "leading_run":
        flat[: flat.shape[0] // 2 + 1] = IGNORE
    elif pattern == "all":
        flat[:] = IGNORE
    elif pattern != "none":
        raise ValueError(f"unknown ignore pattern {pattern!r}")
    return t if k else t.squeeze(-1)


def ignore_pattern_axis(ids: str) -> Axis:
    """make_target's ignore patterns as a case axis, `ids` naming what it draws (lp's and flp's
    targets, the distillation kernels' labels)."""
    return Axis("ignore_pattern", f"which {ids} are ignore_index (-100)", ("none", "random", "leading_run", "all"),
                default="random", means={
        "none": "every token counted",
        "random": f"padding: 30% of the {ids}, and one whole row",
        "leading_run": "a prompt mask: the first half of the rows and one more",
        "all": "a micro-batch with no completion token",
    })  # fmt: skip


def make_upstream(kind: str, logp_shape, entropy_shape, gen):
    """(dlogp or None, dentropy or None): one output, the other, both, both with some rows
    exactly zero (rows a trainer masks out: they must give exactly nothing, never NaN), or the
    ones autograd hands for `logp.sum() + entropy.sum()`: a 1 expanded over the rows (stride 0,
    one element of storage; kept so on the way to the provider: problems.as_handed)."""
    dl = torch.randn(logp_shape, generator=gen)
    de = torch.randn(entropy_shape, generator=gen) * 0.5
    if kind == "sums":
        return torch.ones(()).expand(logp_shape), torch.ones(()).expand(entropy_shape)
    if kind == "logp":
        return dl, None
    if kind == "entropy":
        return None, de
    if kind == "zero_rows":
        rows = torch.rand(entropy_shape, generator=gen) < 0.5
        dl[rows] = 0.0
        de[rows] = 0.0
    elif kind != "both":
        raise ValueError(f"unknown upstream {kind!r}")
    return dl, de


def run_outputs(fn, tensors: dict, grad_names: tuple[str, ...], side: dict, options: dict, upstream) -> Outcome:
    """Call `fn(*tensors.values(), **side, **options) -> (logp, entropy)` on fresh copies laid out
    exactly as the case built them (leaves for `grad_names`), run backward with the case's
    upstream on the outputs it names, and report logp, entropy, the gradients, the layouts the
    callable received and whether it wrote any input (storage and padding included)."""
    flats, views = {}, {}
    for name, t in tensors.items():
        flats[name], views[name] = fresh_view(t, requires_grad=name in grad_names and t.is_floating_point())
    before = {name: f.clone() for name, f in flats.items()}
    handed = copies_of(side)
    spy = Spy(fn, tuple(tensors))
    logp, entropy = spy(*views.values(), **handed, **options)
    dl, de = upstream
    outs, ups = [], []
    if dl is not None:
        outs.append(logp)
        ups.append(as_handed(dl, device=logp.device, dtype=logp.dtype))
    if de is not None:
        outs.append(entropy)
        ups.append(as_handed(de, device=entropy.device, dtype=entropy.dtype))
    if any(o.requires_grad for o in outs):
        torch.autograd.backward(outs, ups)
    values = {"logp": logp.detach().clone(), "entropy": entropy.detach().clone()}
    # 1 when both outputs are float32 (float64 for the truth), whatever the inputs' dtype: a
    # provider returning bf16 log-probs rounds a PPO ratio's exponent by up to 0.4%
    full = (torch.float32, torch.float64)
    values["outputs_float32"] = torch.tensor(float(logp.dtype in full and entropy.dtype in full), dtype=torch.float64)
    for name in grad_names:
        if name in views and views[name].requires_grad:
            g = views[name].grad
            values[f"grad_{name}"] = torch.zeros_like(views[name]) if g is None else g.detach().clone()
    built = {name: layout_of(t) for name, t in tensors.items()}
    mutated = [n for n in tensors if not same_bits(flats[n], before[n])] + written(side, handed)
    return Outcome(values=values, input_mutated=bool(mutated), built=built, received=spy.seen,
                   mutated_inputs=tuple(mutated))  # fmt: skip


# ----------------------------------------------------------------------------- shared axes
DTYPE = Axis("dtype", "the inputs' dtype", ("fp32", "bf16", "fp16"), default="fp32", means={
    "fp32": "full-precision training: the tightest limits",
    "bf16": "mixed precision, what RL trainers run (the logits must not be rounded to it)",
    "fp16": "fp16 training (GPU grids only)",
})  # fmt: skip
TEMPERATURE = Axis("temperature", "the sampling temperature the logits are divided by", (1.0, 0.6, 1.5), tag="t",
                   default=1.0, means={1.0: "no temperature (SFT-style log-probs)",
                                       0.6: "a sharpening rollout temperature (TRL #4159: applied to the logits)",
                                       1.5: "an exploring rollout temperature"})  # fmt: skip
SOFTCAP = Axis("softcap", "Gemma-2's final-logit softcap (0: none)", (0.0, 30.0), tag="cap", default=0.0,
               means={0.0: "most models",
                      30.0: "Gemma-2 (unsloth-zoo #593: the order with the logit scale)"})  # fmt: skip
LOGIT_SCALE = Axis("logit_scale", "a scale on the logits before softcap and temperature", (1.0, 0.5), tag="s",
                   default=1.0, means={1.0: "most models",
                                       0.5: "a model with a logit scale (Cohere, Granite)"})  # fmt: skip
TARGETS = Axis("targets", "tokens scored per row", (1, 3), tag="k", default=1, means={
    1: "the sampled token (GRPO, PPO, DPO)",
    3: "a teacher's top-K tokens (on-policy distillation)",
})  # fmt: skip
UPSTREAM = Axis("upstream", "which outputs backward receives gradients for", ("both", "logp", "entropy", "zero_rows",
                "sums"),
                tag="up-", default="both", means={
    "both": "a policy loss with an entropy bonus",
    "logp": "a policy loss alone (entropy only logged)",
    "entropy": "an entropy regulariser alone (TRL #6625: its gradient dropped)",
    "zero_rows": "both, with rows a trainer masks out as exact zeros (VeOmni #720: NaN at p = 0)",
    "sums": "logp.sum() + entropy.sum(): each upstream a 1 expanded over the rows, stride 0 (docs/bugs.md bug 8)",
})  # fmt: skip
IGNORE_PATTERN = ignore_pattern_axis("targets")
LOGITS = Axis("logits", "the kind of logits drawn", ("normal", "peaked", "flat", "shifted"), default="normal", means={
    "normal": "an untrained model: random normal logits",
    "peaked": "a trained model: one logit per row 12-20 above the rest (p near 1)",
    "flat": "near-uniform rows (entropy near log V)",
    "shifted": "every logit of a row shifted by +-200 (verl #7439: a row max started at 0)",
})  # fmt: skip
# the axes of the semantics, in the order every log-prob kernel (lp, flp, vp_flp) lists them: the
# order of a case id's parts
AXES = (DTYPE, TEMPERATURE, SOFTCAP, LOGIT_SCALE, TARGETS, UPSTREAM, IGNORE_PATTERN, LOGITS)


def shape_logits(x: torch.Tensor, kind: str, gen) -> torch.Tensor:
    """float32 logits [..., V] of one kind from random normal ones (rows along the last dim)."""
    if kind == "normal":
        return x
    if kind == "flat":
        return 0.01 * x
    if kind == "peaked":
        rows = x.reshape(-1, x.shape[-1]).clone()
        at = torch.randint(0, rows.shape[1], (rows.shape[0],), generator=gen)
        rows[torch.arange(rows.shape[0]), at] += 12.0 + 8.0 * torch.rand(rows.shape[0], generator=gen)
        return rows.reshape(x.shape)
    if kind == "shifted":
        sign = torch.where(torch.rand(x.shape[:-1] + (1,), generator=gen) < 0.5, -200.0, 200.0)
        return x + sign
    raise ValueError(f"unknown logits kind {kind!r}")
