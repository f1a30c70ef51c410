"""`converge MODEL --rl grpo`: a few policy-gradient steps of a mini model on fixed completions
and synthetic rewards, with our fused log-probs (kernels/hf_log_probs.py, flp as lm_head's
forward) against transformers' own logits path (TRL's: logits_to_keep + 1 positions, the last
dropped, divided by the temperature) and a float64 run of that path, judged like `converge`
(suites/converge/__init__.py's judge_trajectory: loss per step, final parameters, eval top-k log-probs).

The RL step (the same data for all three runs): each batch's last half is the completion; its
old log-probs are the initial float32 model's, computed once (so the importance ratio starts at
1 and moves as the policy trains: some tokens reach the clip); the reference log-probs are the
same; the reward of a completion is the fraction of its tokens that are even ids, and the
advantages are the rewards standardised over the batch (both signs). The loss is DAPO's
(kernels/grpo_loss.py's policy_loss: clip (0.2, 0.28), k3 KL with beta 0.04, token sum over the
step's completion tokens) at temperature 0.7.

Checked besides the trajectory: `flp_active`, our op ran once per training step (a run that
silently took the logits path would compare transformers with itself).

Under `--nproc N --parallel fsdp2|tp|fsdp2_tp|fsdp2_tp_strided` (run_parallel_case, on every
rank): ours trains under the plan (ligerbench/converge/parallel.py; fsdp2: each rank its rows of
every step, the policy loss normalised by the step's completion tokens over all ranks and scaled
for FSDP2's averaging, as kernels/grpo_loss.py's docstring says to split a step; tp: lm_head
column-parallel, the vocab-parallel log-probs; the 2-D plans: both, the count over the dp group
only), against the same single-process transformers and float64 runs on the whole batch (rank 0
and rank 1 train them: ligerbench/converge/yardsticks.py); `grads@step0` checks every
parameter's gradient after the ranks' reduction (a normaliser or scale wrong by the world size
is off by 50% at 2 ranks, which Adam's trajectory hides), `flp_active` counts on the rank that
called our op the fewest times.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.distributed as dist

from ligerbench.converge.checker import Checker, ConvergeCase, ConvergeResult, build, run_converge
from ligerbench.converge.data import Batch, make_batches
from ligerbench.converge.models import build_model
from ligerbench.converge.parallel import (
    CORRECT,
    Normalisation,
    Objective,
    apply_plan,
    eval_logprobs_parallel,
    train_parallel,
)
from ligerbench.converge.train import eval_logprobs, train
from ligerbench.converge.yardsticks import yardsticks
from ligerbench.kernels.grpo_loss import policy_loss
from ligerbench.kernels.hf import CausalLMPatch
from ligerbench.kernels.hf_log_probs import completion_log_probs
from ligerbench.records import Record
from ligerbench.suites.converge import judge_trajectory
from ligerbench.suites.converge.parallel import (
    PLAN_PATCHES,
    case_batches,
    judge_parallel,
    record_calls,
    run_key,
    single_process,
)

TEMPERATURE = 0.7
LOSS = dict(loss_type="dapo", eps_low=0.2, eps_high=0.28, beta=0.04, kl_estimator="k3")
RL_KINDS = ("grpo",)
# The policy trains at this fraction of the preset's learning rate. The old log-probs are the
# initial model's for the whole run, and AdamW moves every weight by about lr a step whatever
# the gradient, so the importance ratio exp(logp - old_logp) drifts with lr x steps. For a token
# of negative advantage the clipped objective is unbounded above (min(r A, clip(r) A) = r A once
# r > 1 + eps_high): at 1e-3 the gpu preset's loss jumped from ~1 to ~5000 at step 3 (a ratio of
# thousands), and at 1e-2 on the tiny preset (CPU, bf16) transformers' own run ended 22% (in
# parameters) from the float64 run; at 1e-3 there, 0.55%, its loss within a term scale of zero.
LR_SCALE = 1 / 3


def rl_lr(preset) -> float:
    return LR_SCALE * preset.lr


@dataclass(frozen=True)
class Rollout:
    """One batch's fixed RL data: old (= reference) log-probs, advantages, completion mask."""

    old_logp: torch.Tensor  # [B, C] float32
    advantages: torch.Tensor  # [B] float32
    mask: torch.Tensor  # [B, C] int64


def completion_length(batch: Batch) -> int:
    return batch.input_ids.shape[1] // 2


def logits_path_logp(model, batch: Batch, keep: int) -> torch.Tensor:
    """TRL's per-token log-probs from the model's logits (float32, or float64 for a float64 model)."""
    logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, logits_to_keep=keep + 1).logits
    logits = logits[:, :-1]
    logits = (logits if logits.dtype == torch.float64 else logits.float()) / TEMPERATURE
    return torch.log_softmax(logits, -1).gather(-1, batch.input_ids[:, -keep:, None]).squeeze(-1)


def rollouts(case: ConvergeCase, batches: list[Batch]) -> list[Rollout]:
    model = build_model(case.model, case.preset, seed=case.seed, dtype=torch.float32, device=case.device)
    out = []
    with torch.no_grad():
        for b in batches:
            b = b.to(case.device)
            keep = completion_length(b)
            completion = b.input_ids[:, -keep:]
            mask = b.attention_mask[:, -keep:]
            reward = ((completion % 2 == 0) * mask).sum(-1).float() / mask.sum(-1).clamp(min=1).float()
            adv = (reward - reward.mean()) / (reward.std() + 1e-6)
            out.append(Rollout(logits_path_logp(model, b, keep).float(), adv, mask))
    return out


def term_scales(data: list[Rollout]) -> list[float]:
    """Per step, the size of the policy loss's terms: the mean |advantage| over the completion
    tokens, each token's term at ratio 1, and at least the KL term's weight beta (a step whose
    rewards are all equal has advantages 0: only the KL term is left, near 0 while the policy is
    near the reference; 2 rows a step make that common). The loss sums terms of both signs and
    crosses zero (float64 -0.013 at step 5 of the tiny preset, transformers' bf16 run 0.134): its
    error is judged over this scale, not over itself (suites/converge/__init__.py's judge_trajectory)."""
    return [max(float((r.advantages.abs()[:, None] * r.mask).sum() / r.mask.sum().clamp(min=1)), LOSS["beta"])
            for r in data]  # fmt: skip


def _loss_fn(data: list[Rollout], logp_fn: Callable) -> Callable:
    steps = iter(data)

    def loss_fn(model, inputs: dict) -> torch.Tensor:
        r = next(steps)
        batch = Batch(inputs["input_ids"], inputs["attention_mask"], inputs["labels"], ())
        logp = logp_fn(model, batch, r.mask.shape[1], r.mask)
        return policy_loss(logp, r.old_logp, r.old_logp, r.advantages, r.mask, num_items=r.mask.sum(), **LOSS)

    return loss_fn


def _theirs(model, batch, keep, mask):
    return logits_path_logp(model, batch, keep)


def _careful(model, batch, keep, mask):
    """The logits path with the head's math in float32 (the 16-bit model's hidden states and
    weight, upcast): our op's semantics as model code writes them, the second yardstick."""
    hidden = model.model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).last_hidden_state
    head = model.get_output_embeddings()
    logits = torch.nn.functional.linear(hidden[:, -keep - 1 : -1].float(), head.weight.float())
    return torch.log_softmax(logits / TEMPERATURE, -1).gather(-1, batch.input_ids[:, -keep:, None]).squeeze(-1)


def _ours(calls: list):
    def fn(model, batch, keep, mask):
        calls.append(1)
        logp, _ = completion_log_probs(model, batch.input_ids, batch.attention_mask, logits_to_keep=keep,
                                       temperature=TEMPERATURE, completion_mask=mask)  # fmt: skip
        return logp

    return fn


def check_rl_trajectory(c: Checker, on_step=None) -> ConvergeResult:
    case, p = c.case, c.case.preset
    batches = make_batches(vocab=p.vocab, batch=p.batch, seq_len=p.seq_len, steps=p.steps, seed=case.seed)
    held_out = make_batches(vocab=p.vocab, batch=p.batch, seq_len=p.seq_len, steps=1, seed=case.seed + 1)[0]
    data = rollouts(case, batches)

    def step_cb(who):
        return (lambda i, v: on_step(who, i, v)) if on_step else None

    ref_model = build(case)
    ref = train(ref_model, batches, lr=rl_lr(p), on_step=step_cb("ref"), loss_fn=_loss_fn(data, _theirs))
    ref_lp = eval_logprobs(ref_model, held_out)
    del ref_model

    calls: list = []
    model = build(case)
    ours = train(model, batches, lr=rl_lr(p), on_step=step_cb("ours"), loss_fn=_loss_fn(data, _ours(calls)))
    our_lp = eval_logprobs(model, held_out)
    del model
    c.record("flp_active", abs(len(calls) - p.steps), 0, metric="calls_missing", unit="calls",
             message=f"completion_log_probs calls in {p.steps} training steps: {len(calls)}")  # fmt: skip

    careful = None
    if case.dtype != "fp32":  # in float32 the logits path is this already
        model = build(case)
        run = train(model, batches, lr=rl_lr(p), on_step=step_cb("careful"), loss_fn=_loss_fn(data, _careful))
        careful = (run, eval_logprobs(model, held_out))
        del model
    truth, truth_lp = _float64_run(case, batches, held_out, data, step_cb("float64"))
    judge_trajectory(c, ref, ours, truth, (ref_lp, our_lp, truth_lp), held_out, loss_scale=term_scales(data),
                     careful=careful)  # fmt: skip
    return ConvergeResult(ref=ref, ours=ours, truth=truth)


_TRUTH: dict[tuple, tuple] = {}  # one float64 run per (model, preset, seed, device): shared by the dtypes


def _float64_run(case: ConvergeCase, batches, held_out, data, on_step):
    key = (case.model, case.preset, case.seed, case.device)
    if key not in _TRUTH:
        model = build_model(case.model, case.preset, seed=case.seed, dtype=torch.float64, device=case.device)
        run = train(model, batches, lr=rl_lr(case.preset), on_step=on_step, loss_fn=_loss_fn(data, _theirs))
        _TRUTH.clear()
        _TRUTH[key] = (run, eval_logprobs(model, held_out))
    return _TRUTH[key]


def _rl_objective(model, data: list[Rollout], calls: list) -> Objective:
    """The policy loss of a micro-batch of the step's rows under a parallel plan; our log-probs
    through `model`'s parts (FSDP2's and tp's hooks sit on those modules)."""
    ours = _ours(calls)

    def count(micro, rows, step):
        return data[step].mask[rows].sum()

    def loss(wrapped, micro, rows, n_items, step):
        r = data[step]
        mask = r.mask[rows]
        logp = ours(model, micro, mask.shape[1], mask)
        n = mask.sum() if n_items is None else n_items
        return policy_loss(logp, r.old_logp[rows], r.old_logp[rows], r.advantages[rows], mask, num_items=n, **LOSS)

    return Objective(count=count, loss=loss)


def check_rl_parallel_trajectory(c: Checker, on_step=None, *, norm: Normalisation = CORRECT) -> ConvergeResult:
    case, p = c.case, c.case.preset
    batches, held_out = case_batches(case)
    data = rollouts(case, batches)  # every rank: ours needs them
    model = build(case)  # ours, built before the yardsticks as in converge_parallel

    def step_cb(who):
        return (lambda i, v: on_step(who, i, v)) if on_step else None

    # single process, whole batch, on ranks 0 and 1 (ligerbench/converge/yardsticks.py):
    # transformers' logits path in the case's dtype, and in float64
    def run(model, who: str):
        return single_process(model, batches, held_out, lr=rl_lr(p), on_step=step_cb(who),
                              loss_fn=_loss_fn(data, _theirs))  # fmt: skip

    def float64_model():
        return build_model(case.model, p, seed=case.seed, dtype=torch.float64, device=case.device)

    ys = yardsticks(
        ref=run_key(case, "grpo", case.dtype),
        train_ref=lambda: run(build(case), "ref"),
        truth=run_key(case, "grpo", "float64"),
        train_truth=lambda: run(float64_model(), "float64"),
        device=torch.device(case.device),
    )

    # ours under the plan, on every rank
    calls: list = []
    wrapped, layout = apply_plan(model, case.parallel, world=dist.get_world_size(), device=torch.device(case.device))
    ours, ours_g0 = train_parallel(model, wrapped, batches, plan=case.parallel, layout=layout, lr=rl_lr(p),
                                   accum=case.accum, norm=norm, on_step=step_cb("ours"),
                                   objective=_rl_objective(model, data, calls))  # fmt: skip
    our_lp = eval_logprobs_parallel(model, held_out)
    record_calls(c, "flp_active", "completion_log_probs", len(calls), "calls")
    del model, wrapped
    return judge_parallel(c, ys, ours, ours_g0, our_lp, held_out, loss_scale=term_scales(data))


def run_parallel_case(
    case: ConvergeCase,
    *,
    run_id: str = "adhoc",
    norm: Normalisation = CORRECT,
    sink: Callable[[Record], None] | None = None,
    on_step: Callable[[str, int, float], None] | None = None,
) -> ConvergeResult:
    """`converge --rl grpo --nproc N --parallel PLAN` (a plan of PLAN_PATCHES that takes flp) on one
    case, on every rank of the default group (collectives inside: an exception is raised, not
    recorded)."""
    if "flp" not in PLAN_PATCHES[case.parallel]:
        raise ValueError(f"--rl does not run under --parallel {case.parallel}")
    c = Checker(case, run_id, CausalLMPatch, sink)  # (the policy loss calls our op itself: no patch)
    result = check_rl_parallel_trajectory(c, on_step, norm=norm)
    result.records = c.records
    return result


CHECKS = {"rl_trajectory": check_rl_trajectory}


def run_case(
    case: ConvergeCase,
    *,
    run_id: str = "adhoc",
    sink: Callable[[Record], None] | None = None,
    on_step: Callable[[str, int, float], None] | None = None,
    **_,
) -> ConvergeResult:
    """`converge --rl grpo` on one case (case.patch names the op under test: "flp")."""
    return run_converge(case, CHECKS, run_id=run_id, sink=sink, on_step=on_step)
