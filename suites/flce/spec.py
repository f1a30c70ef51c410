"""The `flce` kernel (fused linear + cross entropy) as the harness sees it: its inputs, its
float64 reference, and how a provider is called on one case.

Semantics: those of `ce` (suites/ce/spec.py) applied to the logits hidden @ weight.T + bias.
The float64 reference forms those logits in float64 and runs ce_torch on them; PyTorch eager
(the tolerance yardstick) does the same in the case dtype, full logits included.

Inputs are drawn so the logits have the case's kind (cases.draw_logits gives the meaning):
  normal     hidden ~ N(0, 1), weight ~ N(0, 1/H): logits ~ N(0, 1);
  large      weight scaled by 40 and, through hidden[:, 0] = 1, every logit shifted by +100;
  confident  each counted row's hidden vector is moved along weight[y] until the target's
             logit sits log(1/delta) above the log-sum-exp of the others, delta log-uniform in
             [1e-6, 1e-2] (docs/bugs.md, bug 6); solved in float64, then cast to the case dtype.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ligerbench.cases import (
    DTYPES,
    Case,
    batch_split,
    generator_for,
)
from ligerbench.problems import (
    Outcome,
    Spy,
    copies_of,
    fresh_view,
    layout_of,
    same_bits,
    written,
)
from ligerbench.suites.ce.spec import (
    LossOptions,
    as_stepped,
    ce_torch,
    drawn_loss_fields,
    drawn_targets,
    flat_token_side,
    loss_values,
    one_step,
    textbook_forms,
)
from ligerbench.suites.common import split_step
from ligerbench.suites.common.rounding import SIXTEEN_BITS, grad_rounded_to, held_as_float32, model_logits
from ligerbench.suites.flce.axes import LAYOUT
from ligerbench.tolerance import yardstick

QUANTITIES = ("loss", "z_loss", "grad_hidden", "grad_weight", "grad_bias", "split_grad_hidden", "split_grad_weight",
              "split_grad_bias", "grad_hidden_again", "grad_weight_again", "grad_bias_again", "input_unchanged",
              "input_layout")  # fmt: skip
KEPT_PREFIX = 3  # kept_slice: rows of hidden states before the kept ones (logits_to_keep drops them)


@dataclass
class FLCEProblem(LossOptions):
    """The inputs of one `flce` case, on the case's device."""

    # ce's fields but for the head (LossOptions says why each problem declares its own)
    hidden: torch.Tensor  # [N, H] in the case dtype
    weight: torch.Tensor  # [V, H] in the case dtype
    bias: torch.Tensor | None  # [V] in the case dtype
    target: torch.Tensor  # [N] int64
    ignore_index: int
    reduction: str
    upstream: torch.Tensor  # the gradient handed to backward: a scalar, or [N]
    class_weight: torch.Tensor | None  # [V] float32
    token_weight: torch.Tensor | None  # [N] float32
    label_smoothing: float = 0.0
    softcap: float | None = None
    z_loss_scale: float = 0.0
    split: str = "none"  # the step split into pieces (suites/common/split_step.py), or "none"
    backward: str = "once"  # or "retained": backward twice through one forward (suites/common/retained_backward.py)

    def options(self) -> dict:
        """Keyword arguments every `flce` provider takes (besides hidden, weight, target)."""
        return dict(bias=self.bias, class_weight=self.class_weight, **self.loss_options())


def _confident(h, w, b, target, counted, g) -> torch.Tensor:
    """Move each counted row of h along w[y] so that x_y - lse(others) = log(1/delta).
    Moving along w[y] also moves the other logits (by w_j . w_y / |w_y|^2 per unit), so the
    step is repeated; a few fixed-point steps land within a few percent of the goal."""
    n = h.shape[0]
    rows = torch.arange(n, device=h.device)
    y = target.clamp(0, w.shape[0] - 1)
    gap_goal = -torch.log(10.0 ** (-2.0 - 4.0 * torch.rand(n, generator=g, dtype=torch.float64))).to(h.device)
    direction = w[y] / (w[y] * w[y]).sum(1, keepdim=True)
    for _ in range(6):
        x = h @ w.T + (b if b is not None else 0.0)
        others = x.clone()
        others[rows, y] = float("-inf")
        gap = x[rows, y] - torch.logsumexp(others, 1)
        h = h + torch.where(counted, gap_goal - gap, 0.0)[:, None] * direction
    return h


def make_problem(case: Case, seed: int, device: torch.device) -> FLCEProblem:
    g = generator_for(case, seed)
    n, v, hd = case.n, case.v, case.h
    if hd < 1:
        raise ValueError(f"flce case {case.id} needs a hidden size h >= 1")
    target, ignored, ignore_index = drawn_targets(case, g)

    h = torch.randn(n, hd, generator=g, dtype=torch.float64)
    w = torch.randn(v, hd, generator=g, dtype=torch.float64) / hd**0.5
    b = 0.5 * torch.randn(v, generator=g, dtype=torch.float64) if case.bias else None
    if case.logits == "large":
        w = 40.0 * w
        h[:, 0], w[:, 0] = 1.0, 100.0
    elif case.logits == "confident":
        # the float64 solve runs on the case's device: on CPU it costs ~30 s per GPU-sized case
        h = _confident(
            h.to(device),
            w.to(device),
            None if b is None else b.to(device),
            torch.where(ignored, 0, target).to(device),
            (~ignored).to(device),
            g,
        )
    elif case.logits != "normal":
        raise ValueError(f"unknown logits kind {case.logits!r}")

    fields, class_weight = drawn_loss_fields(case, g, target, ignore_index, token_shape(case), device)
    dt = DTYPES[case.dtype]

    def on(t, dtype=None):
        return None if t is None else t.to(dtype or t.dtype).to(device)

    weight = on(w, dt)
    if case.layout == "weight_column_major":
        weight = weight.t().contiguous().t()
    return FLCEProblem(hidden=_placed(case, on(h, dt), g), weight=weight, bias=on(b, dt),
                       class_weight=on(class_weight), **fields)  # fmt: skip


def token_shape(case: Case) -> tuple[int, ...]:
    """The shape of the targets (and per-token tensors): [B, T] in a 3-D layout, else [N]."""
    return batch_split(case.n) if case.layout in ("3d", "kept_slice") else (case.n,)


def _placed(case: Case, hidden: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """hidden [N, H] (case dtype, on the device) laid out as the case says (suites/flce/axes.py)."""
    n, hd = hidden.shape
    if case.layout in ("2d", "weight_column_major"):
        return hidden
    if case.layout == "column_major":
        return hidden.t().contiguous().t()
    if case.layout == "3d":
        return hidden.reshape(*batch_split(n), hd)
    if case.layout == "kept_slice":
        # the states of earlier positions sit before the kept ones in each sequence's storage
        b, t = batch_split(n)
        earlier = torch.randn(b, KEPT_PREFIX, hd, generator=g).to(hidden.dtype).to(hidden.device)
        return torch.cat([earlier, hidden.reshape(b, t, hd)], dim=1)[:, KEPT_PREFIX:, :]
    raise ValueError(f"unknown flce layout {case.layout!r}; expected one of {LAYOUT.values}")


def flce_torch(hidden, weight, target, *, bias=None, class_weight=None, **options):
    """Full logits in the dtype of `hidden`, then ce_torch: the eager provider and, in float64,
    the truth. Returns (loss, z_loss)."""
    logits = hidden @ weight.T
    if bias is not None:
        logits = logits + bias
    return ce_torch(logits, target, weight=class_weight, **options)


def run_flce(fn, problem: FLCEProblem, *, need_grad: bool = True) -> Outcome:
    """Call `fn(hidden, weight, target, **options) -> loss | (loss, z_loss)` on fresh copies of
    hidden, weight and bias laid out exactly as the case built them (leaf views into copies of
    their whole storage), run backward with the case's upstream gradient, and report the loss,
    the gradients, the layouts the callable received, and whether the provider wrote anywhere
    in those storages (rows before a kept slice included)."""
    names = ("hidden", "weight", "bias")
    built = {k: getattr(problem, k) for k in names if getattr(problem, k) is not None}
    copies = {k: fresh_view(t, requires_grad=need_grad) for k, t in built.items()}
    leaves = {k: copies[k][1] if k in copies else None for k in names}
    before = {k: flat.clone() for k, (flat, _) in copies.items()}
    side = {"target": problem.target, "class_weight": problem.class_weight, "token_weight": problem.token_weight}
    handed = copies_of(side)
    opts = {**problem.options(), "bias": leaves["bias"], **{k: handed[k] for k in ("class_weight", "token_weight")}}
    spy = Spy(fn, ("hidden", "weight", "target"))
    out = spy(leaves["hidden"], leaves["weight"], handed["target"], **opts)
    values, refusals = loss_values(out, problem, leaves, need_grad)
    if need_grad and problem.split != "none":
        values.update(_split_grads(fn, problem))
    mutated = [k for k, t in before.items() if not same_bits(copies[k][0], t)] + written(side, handed)
    expected = {k: layout_of(t) for k, t in built.items() if k != "bias"}
    expected["target"] = layout_of(problem.target)
    return Outcome(values=values, input_mutated=bool(mutated), built=expected, received=spy.seen,
                   mutated_inputs=tuple(mutated), refusals=refusals)  # fmt: skip


def _split_grads(fn, problem: FLCEProblem) -> dict[str, torch.Tensor]:
    """The gradients the split step leaves (suites/common/split_step.py): each piece its own rows
    [n, H] of the flattened hidden states and its own copies of weight and bias."""
    hd = problem.hidden.shape[-1]
    t, tw = flat_token_side(problem)
    opts = problem.options()

    def call(rows, mine, whole, reduction):
        piece = {"reduction": reduction, "bias": whole[1], "token_weight": None if tw is None else tw[rows].clone()}
        return fn(mine[0], whole[0], t[rows].clone(), **{**opts, **piece})

    denom = split_step.step_denominator(t, problem.class_weight, problem.ignore_index, problem.weight.shape[0])
    grads = split_step.token_split_grads(fn, problem.split, problem.reduction, problem.upstream, denom,
                                         [problem.hidden.detach().reshape(-1, hd)], [problem.weight, problem.bias],
                                         call)  # fmt: skip
    names = ("split_grad_hidden", "split_grad_weight", "split_grad_bias")
    out = dict(zip(names, grads, strict=True))
    out["split_grad_hidden"] = out["split_grad_hidden"].view(problem.hidden.shape)
    return {k: g for k, g in out.items() if g is not None}


def reference(problem: FLCEProblem) -> Outcome:
    """The float64 truth, on the problem's device."""

    def f64(t):
        return None if t is None else t.detach().double()

    p64 = FLCEProblem(
        **{
            **problem.__dict__,
            "hidden": f64(problem.hidden),
            "weight": f64(problem.weight),
            "bias": f64(problem.bias),
            "class_weight": f64(problem.class_weight),
            "token_weight": f64(problem.token_weight),
            "upstream": f64(problem.upstream),
            "split": "none",
            "backward": "once",
        }
    )
    return as_stepped(run_flce(flce_torch, p64), problem)


def _careful(dtype: torch.dtype, textbook: bool | str = False):
    """flce_torch on float32 operands whose logits' gradient is rounded once to `dtype`
    (textbook: one of ce_torch's textbook forms)."""

    def fn(hidden, weight, target, *, bias=None, class_weight=None, **options):
        options = {**options, "textbook": textbook}
        logits = hidden @ weight.T
        if bias is not None:
            logits = logits + bias
        return ce_torch(grad_rounded_to(logits, dtype), target, weight=class_weight, **options)

    return fn


def eager_in_dtype(problem: FLCEProblem) -> Outcome:
    """The yardstick of the tolerance rule (ligerbench/tolerance.py): full logits in PyTorch in
    float32 from the same inputs (never rounded), their gradient rounded once to a 16-bit case
    dtype before the products (suites/common/rounding.py says why), each output rounded once to that dtype."""
    upcast = {"hidden": problem.hidden, "weight": problem.weight, "bias": problem.bias}
    careful = _careful(problem.hidden.dtype)
    out = yardstick(lambda p: run_flce(careful, p), one_step(problem), upcast)
    return as_stepped(out, problem)


def model_code(hidden, weight, target, *, bias=None, class_weight=None, **options):
    """The head as model code forms it: `logits = lm_head(h)` in the inputs' dtype (one rounding of
    the product, as Hugging Face models, `F.cross_entropy(F.linear(h, W, b))` and
    torch.nn.functional.linear_cross_entropy do), `.float()` in the loss, then ce_torch's
    F.cross_entropy form in float32; autograd rounds the logits' gradient back to the dtype
    through `.float()`, and the products of backward take 16-bit operands. Options PyTorch's
    cross entropy lacks (softcap, z-loss, token weights) are applied in float32 after the
    upcast, as model code applies them (Gemma-2 caps the float logits)."""
    return ce_torch(model_logits(hidden, weight, bias), target, weight=class_weight, textbook=True, **options)


def _as_model_code(problem: FLCEProblem) -> Outcome:
    """model_code on the case's own 16-bit inputs (no yardstick upcast: the rounding of the
    product is the point), its outputs held as float32."""
    return held_as_float32(run_flce(model_code, problem))


def textbook(problem: FLCEProblem) -> tuple[Outcome, ...]:
    """The default verdict's yardsticks (ligerbench/tolerance.py): as eager_in_dtype, the loss in
    each way users write it (ce's textbook_forms: F.cross_entropy, or logsumexp(x) - x_t), the
    softcap as users write it (its slope through autograd's tanh, that tanh PyTorch's or one ulp
    off); and in 16-bit dtypes the model code's form (model_code: the logits rounded once to the
    dtype before a float32 loss). A provider with the model code's semantics is not wrong by
    default; `--strict` (the careful yardstick, float32 logits never rounded) says by how much.
    A rounding inside the loss's math (p_y - 1 or the softmax formed in 16 bits: docs/bugs.md,
    bug 6) is no form of the model code's and stays out of every yardstick."""
    upcast = {"hidden": problem.hidden, "weight": problem.weight, "bias": problem.bias}
    written = [_careful(problem.hidden.dtype, textbook=form) for form in textbook_forms(problem.softcap)]
    one = one_step(problem)
    outs = [yardstick(lambda p, users=users: run_flce(users, p), one, upcast) for users in written]
    if problem.hidden.dtype in SIXTEEN_BITS:  # in float32 it is the F.cross_entropy form
        outs.append(_as_model_code(one))
    return tuple(as_stepped(out, problem) for out in outs)
