"""The converge checks under the 2-rank plans on 2 real gloo ranks, in one set of ranks (run by
tests/vp_checks.py's run_gloo_checks; a top-level module so that the spawned ranks can import
it): what passes under each plan, and the planted normalisation bug that only gradient
accumulation shows. Each rank runs what a rank of `converge --nproc 2 --parallel PLAN` runs
(ligerbench/commands/ranks.py: the case, its normalisation, run_parallel_case); the command line
itself, its run folder and a planted bug through `--mutant` are checked through the CLI in
tests/test_converge_parallel.py and tests/test_converge_rl.py.

The single-process yardstick and float64 runs are kept between cases of one model and preset
(ligerbench/converge/yardsticks.py), so the cases after the first cost mostly ours."""

from __future__ import annotations

import dataclasses
import functools

from ligerbench.converge.checker import ConvergeCase, build
from ligerbench.converge.models import PRESETS
from ligerbench.converge.mutants import PARALLEL_MUTANTS
from ligerbench.converge.parallel import CORRECT
from ligerbench.suites.converge import parallel as converge_parallel
from ligerbench.suites.converge import rl as converge_rl

# `converge --preset quick --steps 4` (the CLI tests' sizes): enough steps for the trajectory checks
PRESET = dataclasses.replace(PRESETS["tiny"], steps=4)
JUDGED = {"patch_active", "grads@step0", "loss_per_step", "float64_loss_bounded", "final_params", "eval_topk_logprobs"}

# name -> (plan, patch, batch, accum, normalisation, the check that must fail or "pass"). Each is
# there for one reason: ddp + ce with gradient accumulation (2 ranks x 2 micro-batches, the loss
# normalised over all four); tp + ce (the logits vocab-sharded: the vocab-parallel loss); tp + flce
# (lm_head's weight shard to the vocab-parallel fused kernel); a mean taken per micro-batch, of
# micro-batches with unequal counted targets (prompt masks, padding), which only accumulation
# shows; the policy loss under tp (its log-probs through the vocab-parallel fused path); and the
# policy loss under fsdp2 with the gradient divided by the world size twice (the loss normalised
# over every rank's tokens, FSDP2 averaging again).
CASES = {
    "ddp_ce_accum2": ("ddp", "ce", 4, 2, CORRECT, "pass"),
    "tp_ce": ("tp", "ce", 0, 1, CORRECT, "pass"),
    "tp_flce": ("tp", "flce", 0, 1, CORRECT, "pass"),
    "mean_per_micro_batch": ("ddp", "ce", 4, 2, PARALLEL_MUTANTS["mean_per_micro_batch"], "grads@step0"),
    "rl_tp": ("tp", "flp", 0, 1, CORRECT, "pass"),
    "rl_grad_divided_by_world_twice": ("fsdp2", "flp", 0, 1, PARALLEL_MUTANTS["grad_divided_by_world_twice"],
                                       "grads@step0"),
}  # fmt: skip


def case_of(name: str, world: int) -> ConvergeCase:
    plan, patch, batch, accum, _, _ = CASES[name]
    preset = dataclasses.replace(PRESET, batch=batch) if batch else PRESET
    return ConvergeCase("llama-mini", preset, "fp32", patch, parallel=plan, nproc=world, accum=accum)


@functools.cache
def _imports_done() -> None:
    """transformers' imports (a model built once), before the first collective waits on them."""
    build(ConvergeCase("llama-mini", PRESET, "fp32", "ce"))


def check_case(rank: int, group, world: int, name: str) -> None:
    """One case of CASES on every rank; rank 0 (the one that judges) checks the verdicts."""
    _imports_done()
    *_, norm, expected = CASES[name]
    case = case_of(name, world)
    run = converge_rl.run_parallel_case if case.patch == "flp" else converge_parallel.run_parallel_case
    result = run(case, norm=norm)
    if rank != 0:
        return
    verdicts = {r.quantity: r.verdict for r in result.records}
    assert {r.case for r in result.records} == {case.id}, (name, {r.case for r in result.records})
    if case.patch == "flp":  # flp_active, grads@step0 and the four trajectory checks
        assert len(verdicts) == 6 and "flp_active" in verdicts, (name, verdicts)
    else:
        assert set(verdicts) == JUDGED, (name, verdicts)
    assert len(result.ours.losses) == PRESET.steps, (name, result.ours.losses)
    if expected == "pass":
        assert set(verdicts.values()) == {"pass"}, (name, verdicts)
    else:
        assert verdicts[expected] == "fail", (name, verdicts)
        active = "flp_active" if case.patch == "flp" else "patch_active"
        assert verdicts[active] == "pass", (name, verdicts)  # the kernel ran; the normalisation is wrong


# Every case on ONE set of 2 gloo ranks, one after the other (a rank's start-up and the
# single-process runs paid once): name -> (check, its bound in s, its arguments)
CHECKS = {name: (check_case, 240, name) for name in CASES}


def two_rank_outcomes(tmp_path_factory) -> dict[str, str]:
    """Each case's outcome (vp_checks.PASSED or why not), from the one launch of this pytest run,
    shared by the xdist workers and by the test files that read it."""
    from vp_checks import run_gloo_checks

    from helpers import computed_once_per_run

    def launch(folder):
        return run_gloo_checks(2, CHECKS, folder=folder / "checks", store=str(folder / "store"))

    outcomes, _ = computed_once_per_run(tmp_path_factory, "converge_2rank_checks", launch)
    return outcomes
