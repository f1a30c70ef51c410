"""The convergence suite under a parallel plan: what every rank of
`converge --nproc N --parallel PLAN` checks (ligerbench/commands/ranks.py runs it).

    result = run_parallel_case(ConvergeCase("llama-mini", PRESETS["tiny"], "fp32", "ce", parallel="fsdp2", nproc=2))

Every rank trains the model under the plan with our kernels patched in (ligerbench/converge/
parallel.py: ddp and fsdp2 each rank its slice of every global batch, tp the same batch, the 2-D
plans each dp replica its slice), judged against transformers' run in the case's dtype and the
float64 run, each single-process on the WHOLE batch (the yardstick and truth of
suites/converge/__init__.py), trained once: rank 0 the yardstick, rank 1 the truth, broadcast
(ligerbench/converge/yardsticks.py). Checks (rank 0's records; the other ranks judge nothing):
  patch_active       our training kernel ran on every rank, once per micro-batch
  grads@step0        all parameters' gradients after step 0's reduction over ranks, against the
                     float64 gradient of the whole batch, limit: the kernel rule on transformers'
                     single-process error (tolerance rule 1). A gradient divided by the world
                     size twice (wrong data-parallel normalisation; the planted bug
                     grad_divided_by_world_twice) is off by 50% at 2 ranks; Adam's updates are
                     nearly blind to that scale, so the trajectory alone would not see it.
  loss_per_step, final_params, eval_topk_logprobs: the trajectory against the float64 run, the
                     same judgement as the single-process suite (rule 3).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.distributed as dist

from ligerbench.converge import tolerance as tol
from ligerbench.converge.checker import Checker, ConvergeCase, ConvergeResult, build
from ligerbench.converge.data import Batch, make_batches
from ligerbench.converge.models import build_model
from ligerbench.converge.parallel import CORRECT, Normalisation, apply_plan, eval_logprobs_parallel, train_parallel
from ligerbench.converge.train import RunResult, eval_logprobs, flat, float64_causal_lm_loss, train
from ligerbench.converge.yardsticks import Yardsticks, yardsticks
from ligerbench.kernels.hf import CausalLMPatch
from ligerbench.records import Record
from ligerbench.suites.converge import TRAINING_KERNEL, judge_trajectory

# the patches each plan can take: every one; under tp and the 2-D plans, ce takes the vocab-sharded
# logits to the vocab-parallel cross entropy and flce (both) takes lm_head's weight shard to the
# vocab-parallel fused kernel, with the tp group (kernels/hf.py). A plan that cannot take one is
# refused here, before any rank starts.
# `flp` is `converge --rl` (suites/converge/rl.py): its log-probs come through the model's parts
# (completion_log_probs), not DDP's wrapper forward, which DDP's gradient sync needs.
PLAN_PATCHES = {
    "ddp": ("ce", "flce", "both"),
    "fsdp2": ("ce", "flce", "both", "flp"),
    "tp": ("ce", "flce", "both", "flp"),
    "fsdp2_tp": ("ce", "flce", "both", "flp"),
    "fsdp2_tp_strided": ("ce", "flce", "both", "flp"),
}


def case_batches(case: ConvergeCase) -> tuple[list[Batch], Batch]:
    """The case's training batches and its held-out batch."""
    p = case.preset
    batches = make_batches(vocab=p.vocab, batch=p.batch, seq_len=p.seq_len, steps=p.steps, seed=case.seed)
    held_out = make_batches(vocab=p.vocab, batch=p.batch, seq_len=p.seq_len, steps=1, seed=case.seed + 1)[0]
    return batches, held_out


def single_process(model, batches, held_out, *, lr, on_step=None, loss_fn=None) -> tuple[RunResult, torch.Tensor]:
    """One single-process run on the whole batch, step 0's gradients kept, and its eval log-probs."""
    run = train(model, batches, lr=lr, on_step=on_step, loss_fn=loss_fn, keep_grads=True)
    return run, eval_logprobs(model, held_out)


def run_key(case: ConvergeCase, objective: str, dtype: str) -> tuple:
    """What a single-process run depends on: a kept run is reused only for the same."""
    return (objective, case.model, case.preset, case.seed, case.device, dtype)


def check_parallel_trajectory(c: Checker, on_step=None, *, norm: Normalisation = CORRECT):
    case, p = c.case, c.case.preset
    batches, held_out = case_batches(case)
    tell = (lambda who: lambda i, v: on_step(who, i, v)) if on_step else (lambda who: None)

    # built first on every rank: the first model a process builds imports transformers' modelling
    # code (~10 s of one core here), which the ranks that train no yardstick do while they wait
    model = build(case)

    # single process, whole batch, on ranks 0 and 1: transformers in the case's dtype (the
    # yardstick) and in float64 (ligerbench/converge/yardsticks.py)
    def truth():
        model64 = build_model(case.model, p, seed=case.seed, dtype=torch.float64, device=case.device)
        return single_process(model64, batches, held_out, lr=p.lr, on_step=tell("float64"),
                              loss_fn=float64_causal_lm_loss)  # fmt: skip

    ys = yardsticks(
        ref=run_key(case, "causal_lm", case.dtype),
        train_ref=lambda: single_process(build(case), batches, held_out, lr=p.lr, on_step=tell("ref")),
        truth=run_key(case, "causal_lm", "float64"),
        train_truth=truth,
        device=torch.device(case.device),
    )

    # our kernels under the plan, on every rank
    wrapped, layout = apply_plan(model, case.parallel, world=dist.get_world_size(), device=torch.device(case.device))
    patch = c.patch(model)
    with patch:
        ours, ours_g0 = train_parallel(model, wrapped, batches, plan=case.parallel, layout=layout, lr=p.lr,
                                       accum=case.accum, norm=norm, on_step=tell("ours"))  # fmt: skip
        our_lp = eval_logprobs_parallel(model, held_out)
    c.tally(patch)
    record_calls(c, "patch_active", TRAINING_KERNEL[case.patch], patch.calls[TRAINING_KERNEL[case.patch]], "launches")
    del model, wrapped
    return judge_parallel(c, ys, ours, ours_g0, our_lp, held_out)


def judge_parallel(c: Checker, ys: Yardsticks | None, ours: RunResult, ours_g0: dict, our_lp, held_out,
                   loss_scale=None):  # fmt: skip
    """grads@step0 and the trajectory on rank 0; the other ranks judge nothing (their records are
    not written) and return ours alone. `loss_scale`: judge_trajectory's."""
    if ys is None:
        return ConvergeResult(ref=RunResult([], {}), ours=ours, truth=RunResult([], {}))
    ref, truth = ys.ref, ys.truth
    record_step0(c, ours_g0, ref.result.step0.grads, truth.result.step0.grads)
    judge_trajectory(c, ref.result, ours, truth.result, (ref.logprobs, our_lp, truth.logprobs), held_out, loss_scale)
    return ConvergeResult(ref=ref.result, ours=ours, truth=truth.result)


def record_calls(c: Checker, check: str, kernel: str, calls: int, unit: str) -> None:
    """`check`: our op ran once per micro-batch of every step on every rank (the fewest a rank
    made, so one rank that silently took transformers' path fails it)."""
    case, p = c.case, c.case.preset
    fewest = torch.tensor(calls, device=case.device)
    dist.all_reduce(fewest, op=dist.ReduceOp.MIN)
    expected = p.steps * case.accum
    c.record(
        check,
        abs(int(fewest) - expected),
        0,
        metric="calls_missing",
        unit=unit,
        message=f"fewest {kernel} {unit} on a rank, {p.steps} steps x {case.accum} micro-batches: {int(fewest)}",
    )


def record_step0(c: Checker, ours_g0: dict, ref_g0: dict, truth_g0: dict) -> None:
    """grads@step0: every parameter's gradient after the ranks' reduction against the float64
    gradient of the whole batch, limit from transformers' single-process error."""
    if set(ours_g0) != set(truth_g0):
        raise RuntimeError(f"step-0 gradients of different parameters: {sorted(set(ours_g0) ^ set(truth_g0))}")
    yard = tol.rel_error(flat(ref_g0), flat(truth_g0))
    c.record(
        "grads@step0",
        tol.rel_error(flat(ours_g0), flat(truth_g0)),
        tol.kernel_limit(yard, c.case.dtype),
        message=f"all parameters after the ranks' reduction vs float64 on the whole batch; "
        f"transformers' single-process error {yard:.3g}",
    )


def run_parallel_case(
    case: ConvergeCase,
    *,
    run_id: str = "adhoc",
    patcher: Callable = CausalLMPatch,
    norm: Normalisation = CORRECT,
    sink: Callable[[Record], None] | None = None,
    on_step: Callable[[str, int, float], None] | None = None,
) -> ConvergeResult:
    """The parallel suite on one case, on every rank of the default group (collectives inside:
    an exception is raised, not recorded, so that the launcher ends every rank at once)."""
    if case.patch not in PLAN_PATCHES[case.parallel] or case.patch == "flp":
        raise ValueError(f"--parallel {case.parallel} takes --patch {'/'.join(PLAN_PATCHES[case.parallel])}"
                         " (flp trains through suites/converge/rl.py)")  # fmt: skip
    c = Checker(case, run_id, patcher, sink)
    result = check_parallel_trajectory(c, on_step, norm=norm)
    result.records = c.records
    return result
