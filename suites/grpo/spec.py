"""The `grpo` kernel as the harness sees it: a realistic RL step's inputs, the float64 truth
written from the published formulas (kernels/grpo_loss.py's docstring names them; restated
here, not imported, so a wrong formula in the op cannot agree with itself), the yardstick and
the call, once whole and once split as the case says.

A provider is `fn(hidden, weight, completion_ids, old_logp, ref_logp, advantages, mask, *,
loss_type, importance_level, eps_low, eps_high, beta, kl_estimator, temperature, num_items,
max_completion_length) -> loss` (docs/providers.md).

The regime (docs/bugs.md, "Bug classes in RL losses"): completions sampled from the policy itself at
the case's temperature (so their log-probs are those of likely tokens, not of random ids at ~e^-13);
old log-probs = the current ones + N(0, 0.05), and on 40% of the tokens a stale step of 0.05-0.5
either way, so some tokens are clipped on each side and most are not; reference log-probs near the
current ones; advantages of both signs with one exactly 0; ragged completion masks (one row full).
make_problem asserts that the clipped fraction is neither 0 nor 1 where the ratio is per token:
a regime where every token is clipped checks no gradient (Liger's own GRPO test drew old
log-probs from randn).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ligerbench.cases import DTYPES, Case, generator_for
from ligerbench.problems import Outcome
from ligerbench.suites.common import split_step
from ligerbench.suites.common.rounding import grad_rounded_to
from ligerbench.suites.common.split_step import Split, blocks, even_sizes
from ligerbench.suites.families.log_prob import textbook_forms
from ligerbench.suites.grpo.axes import BETA, EPS_VALUES
from ligerbench.tolerance import yardstick


@dataclass
class GRPOProblem:
    hidden: torch.Tensor  # [B, T, H], case dtype
    weight: torch.Tensor  # [V, H], case dtype
    completion_ids: torch.Tensor  # [B, T] int64
    old_logp: torch.Tensor  # [B, T] float32
    ref_logp: torch.Tensor  # [B, T] float32
    advantages: torch.Tensor  # [B] float32
    mask: torch.Tensor  # [B, T] int64, 1 for a completion token
    options: dict  # loss_type, importance_level, eps_low, eps_high, beta, kl_estimator, temperature
    split: str  # suites/common/split_step.py: "none", or the pieces' kind and count
    spread: str = "drawn"  # how the completion tokens fall over the pieces (spread_mask)


def options_of(case: Case) -> dict:
    eps_low, eps_high = EPS_VALUES[case.eps]
    return dict(loss_type=case.loss_type, importance_level=case.importance_level, eps_low=eps_low,
                eps_high=eps_high, beta=0.0 if case.kl == "none" else BETA,
                kl_estimator="k3" if case.kl == "none" else case.kl, temperature=case.temperature)  # fmt: skip


def sampled_completions(case: Case, g: torch.Generator, temperature: float = 1.0):
    """A policy head and the completions it sampled (grpo's and pref's steps): hidden [B, T, H] and
    weight [V, H] (logits of std ~2) drawn from `g` and rounded to the case dtype (the truth is
    taken from these rounded values), their float64 logits at the temperature, and token ids
    [B, T] drawn from the logits' softmax."""
    b, t, h, v = case.b, case.t, case.h, case.v
    hidden = torch.randn(b, t, h, generator=g, dtype=torch.float64)
    weight = torch.randn(v, h, generator=g, dtype=torch.float64) * (2.0 / h**0.5)
    dt = DTYPES[case.dtype]
    hidden, weight = hidden.to(dt), weight.to(dt)
    logits = (hidden.double() @ weight.double().T) / temperature
    ids = torch.multinomial(torch.softmax(logits.reshape(-1, v), -1), 1, generator=g).reshape(b, t)
    return hidden, weight, logits, ids


def make_problem(case: Case, seed: int, device: torch.device) -> GRPOProblem:
    g = generator_for(case, seed)
    b, t = case.b, case.t
    hidden, weight, logits, ids = sampled_completions(case, g, case.temperature)
    current = torch.log_softmax(logits, -1).gather(-1, ids[..., None]).squeeze(-1)
    stale = (torch.rand(b, t, generator=g) < 0.4) * torch.sign(torch.randn(b, t, generator=g))
    stale = stale * (0.05 + 0.45 * torch.rand(b, t, generator=g))
    old = current + 0.05 * torch.randn(b, t, generator=g) + stale
    ref = current + 0.1 * torch.randn(b, t, generator=g)
    adv = torch.randn(b, generator=g)
    adv[0] = 0.0  # a group whose rewards were all equal
    lengths = torch.randint(2, t + 1, (b,), generator=g)
    lengths[-1] = t
    lengths = spread_lengths(case, lengths)
    mask = (torch.arange(t)[None, :] < lengths[:, None]).long()
    opts = options_of(case)
    if case.spread == "one_token":  # the one token inside the clip range: a clipped one would check no gradient
        old[-1, 0] = current[-1, 0] - 0.05
    elif case.importance_level == "token":
        r = torch.exp(current - old)[mask.bool()]
        clipped = ((r < 1 - opts["eps_low"]) | (r > 1 + opts["eps_high"])).double().mean().item()
        assert 0.0 < clipped < 1.0, f"{case.id}: clipped fraction {clipped}: the regime checks no clipping branch"
    return GRPOProblem(
        hidden.to(device), weight.to(device), ids.to(device), old.float().to(device), ref.float().to(device),
        adv.float().to(device), mask.to(device), opts, case.split, case.spread,
    )  # fmt: skip


def spread_lengths(case: Case, lengths: torch.Tensor) -> torch.Tensor:
    """The completions' lengths under the case's spread (suites/common/split_step.py): uneven pieces keep
    the drawn lengths (their sequence counts differ: piece_sizes); one_token leaves one completion
    token in the step, the last sequence's first (advantages[-1] is not 0); empty_piece empties
    the first piece's sequences (truncated or filtered completions)."""
    if case.split == "none":
        if case.spread != "drawn":
            raise ValueError(f"case {case.id}: spread {case.spread!r} needs a split")
        return lengths
    pieces = piece_rows(case.split, case.spread, len(lengths))
    out = lengths.clone()
    if case.spread == "one_token":
        out[:] = 0
        out[-1] = 1
    elif case.spread == "empty_piece":
        out[pieces[0]] = 0
    elif case.spread not in ("drawn", "uneven"):
        raise ValueError(f"unknown spread {case.spread!r}")
    return out


def piece_rows(split: str, spread: str, b: int) -> tuple[slice, ...]:
    """The pieces' sequences: even blocks, or under spread 'uneven' every piece one sequence but
    the first (dynamic batch sizes: micro-batches packed by tokens hold different numbers of
    sequences, verl's use_dynamic_bsz)."""
    pieces = Split.of(split).pieces
    if spread != "uneven":
        return blocks(b, even_sizes(b, pieces))
    if b <= pieces:
        raise ValueError(f"{b} sequences cannot make {pieces} uneven pieces")
    return blocks(b, (b - pieces + 1,) + (1,) * (pieces - 1))


def truth_loss(hidden, weight, completion_ids, old_logp, ref_logp, advantages, mask, *, loss_type,
               importance_level, eps_low, eps_high, beta, kl_estimator, temperature, num_items=None,
               max_completion_length=None, logits_grad_dtype=None, textbook=False):  # fmt: skip
    """The published formulas in PyTorch, in the inputs' dtype (float64: the truth; float32: the
    yardstick, whose logits' gradient is rounded once to `logits_grad_dtype`: suites/common/rounding.py).
    Full logits; nothing shared with kernels/grpo_loss.py. textbook: as a trainer writes it, the
    product in the inputs' dtype (a model's lm_head), then float32 logits and the formulas."""
    x = (hidden @ weight.T).float() if textbook else hidden @ weight.T
    dt = x.dtype
    z = (x if logits_grad_dtype is None else grad_rounded_to(x, logits_grad_dtype)) / temperature
    if textbook == "logsumexp":  # x_t - logsumexp(x), as TRL's selective_log_softmax and online-softmax kernels
        logp = z.gather(-1, completion_ids[..., None]).squeeze(-1) - torch.logsumexp(z, dim=-1)
    else:
        logp = torch.log_softmax(z, dim=-1).gather(-1, completion_ids[..., None]).squeeze(-1)
    m = mask.to(dt)
    adv = advantages.to(dt)[:, None]
    delta = logp - old_logp.to(dt)
    if importance_level == "sequence":  # GSPO: the sequence's mean log-ratio for each of its tokens
        delta = ((delta * m).sum(1) / m.sum(1).clamp(min=1))[:, None].expand_as(delta)
    r = delta.exp()
    if loss_type == "cispo":
        w = torch.where(r > 1 + eps_high, torch.full_like(r, 1 + eps_high), r).detach()
        loss = -w * adv * logp
    else:
        unclipped, clipped = r * adv, r.clamp(1 - eps_low, 1 + eps_high) * adv
        loss = -torch.where(unclipped < clipped, unclipped, clipped)
    if beta:
        d = ref_logp.to(dt) - logp
        loss = loss + beta * (torch.exp(d) - d - 1 if kl_estimator == "k3" else logp - ref_logp.to(dt))
    loss = loss * m
    if loss_type == "grpo":
        return (loss.sum(1) / m.sum(1).clamp(min=1)).mean()
    if loss_type == "bnpo":
        return loss.sum() / m.sum().clamp(min=1)
    if loss_type == "dr_grpo":
        return loss.sum() / (m.shape[0] * (max_completion_length or m.shape[1]))
    return loss.sum() / (m.sum().clamp(min=1) if num_items is None else num_items)


def _call(fn, problem: GRPOProblem, rows: slice, leaves, **extra):
    p = problem
    return fn(leaves[0][rows], leaves[1], p.completion_ids[rows], p.old_logp[rows], p.ref_logp[rows],
              p.advantages[rows], p.mask[rows], **p.options, **extra)  # fmt: skip


def piece_recipe(problem: GRPOProblem, rows: slice, local: bool = False) -> tuple[dict, float]:
    """(extra keyword arguments for the piece of `rows`, the factor its loss gets) under the case's
    split: kernels/grpo_loss.py's docstring, 'Splitting a step', with pieces of any size. The
    factor folds in DDP's average over the ranks, so the pieces' gradients are summed. Per token
    (dapo, cispo): num_items the step's count (over the world, data parallel). Per sequence
    (grpo's mean over sequences, dr_grpo's B * max_completion_length): the piece's mean weighted
    by its share of the step's sequences. `local`: the planted bug (suites/common/split_step.py), each
    piece normalised by its own count or sequences, the pieces averaged."""
    split = Split.of(problem.split)
    world = split.pieces
    extra = {"max_completion_length": problem.mask.shape[1]}
    if problem.options["loss_type"] in ("dapo", "cispo"):
        if local:
            return {**extra, "num_items": None}, 1.0 / world
        tokens = problem.mask.sum()
        if split.kind == "accum":
            return {**extra, "num_items": tokens}, 1.0  # summed
        return {**extra, "num_items": tokens / world}, 1.0 / world  # DDP averages the ranks' gradients
    return extra, 1.0 / world if local else (rows.stop - rows.start) / problem.mask.shape[0]


ranks_of = split_step.ranks_of  # dp cases run on real ranks under `verify --kernel grpo --nproc N`


def run_grpo(fn, problem: GRPOProblem) -> Outcome:
    """The loss and gradients of the whole batch; and, when the case splits it, the gradients
    the split step leaves (each piece on its own leaves' copy, as on separate ranks or steps).
    Under `verify --nproc N` a dp case's pieces are the ranks': each rank backpropagates its
    own rows and the gradients are summed over the process group (gloo on CPU, NCCL on GPUs),
    as DDP's all-reduce does, so the global normaliser is checked across real processes."""
    leaves = (
        problem.hidden.detach().clone().requires_grad_(True),
        problem.weight.detach().clone().requires_grad_(True),
    )
    before = (problem.old_logp.clone(), problem.ref_logp.clone(), problem.advantages.clone())
    loss = _call(fn, problem, slice(None), leaves)
    loss.backward()
    values = {"loss": loss.detach().float().reshape(()), "grad_hidden": leaves[0].grad, "grad_weight": leaves[1].grad}
    if problem.split != "none":
        pieces = piece_rows(problem.split, problem.spread, problem.hidden.shape[0])
        local = split_step.normalises_locally(fn)

        def add(i: int, grads: list) -> None:
            extra, factor = piece_recipe(problem, pieces[i], local)
            piece = (problem.hidden.detach().clone().requires_grad_(True),
                     problem.weight.detach().clone().requires_grad_(True))  # fmt: skip
            (_call(fn, problem, pieces[i], piece, **extra) * factor).backward()
            for acc, leaf in zip(grads, piece, strict=True):
                if leaf.grad is not None:
                    acc += leaf.grad.double()

        split = split_step.Split.of(problem.split)
        values["split_grad_hidden"], values["split_grad_weight"] = split_step.summed_over_pieces(split, leaves, add)
    after = (problem.old_logp, problem.ref_logp, problem.advantages)
    mutated = not all(torch.equal(a, b) for a, b in zip(before, after, strict=True))
    return Outcome(values=values, input_mutated=mutated)


def _truth_provider(hidden, weight, *args, **kwargs):
    return truth_loss(hidden, weight, *args, **kwargs)


def reference(problem: GRPOProblem) -> Outcome:
    """The float64 truth of the whole batch; the split quantities' truth is the same gradients."""
    out = run_grpo(_truth_provider, split_step.whole(_in(problem, torch.float64)))
    return split_step.aliased(out, problem.split)


def eager_in_dtype(problem: GRPOProblem) -> Outcome:
    """The yardstick (ligerbench/tolerance.py): the formulas in float32 from the same inputs, the
    logits' gradient rounded once to a 16-bit case dtype before the products (suites/common/rounding.py),
    each output rounded once to that dtype."""

    def careful(*args, **kwargs):
        return truth_loss(*args, **kwargs, logits_grad_dtype=problem.hidden.dtype)

    out = yardstick(lambda p: run_grpo(careful, p), split_step.whole(problem),
                    {"hidden": problem.hidden, "weight": problem.weight})  # fmt: skip
    return split_step.aliased(out, problem.split)


def textbook(problem: GRPOProblem) -> Outcome:
    """The default verdict's yardstick (ligerbench/tolerance.py): the loss as trainers write it
    (TRL before its fused head, Liger's Triton GRPO's callers): the model's logits in the inputs'
    dtype, upcast, log-probs in each way users write them (TEXTBOOK_FORMS: log_softmax, or
    x_t - logsumexp), the formulas in float32; gradients through the 16-bit product."""

    def written(form):
        return lambda *args, **kwargs: truth_loss(*args, **kwargs, textbook=form)

    one = split_step.whole(problem)
    forms = textbook_forms(None)  # no softcap
    return tuple(split_step.aliased(run_grpo(written(form), one), problem.split) for form in forms)


def _in(problem: GRPOProblem, dtype: torch.dtype) -> GRPOProblem:
    return GRPOProblem(**{**problem.__dict__, "hidden": problem.hidden.to(dtype), "weight": problem.weight.to(dtype)})
