"""The converge checks under the 2-D plans (FSDP2 x tensor parallel) on 4 real gloo ranks, in one
set of ranks (run by tests/vp_checks.py's run_gloo; a top-level module so that the spawned ranks
can import it): what passes, and the planted bugs each must catch.

The single-process yardstick and float64 runs are kept between cases (ligerbench/converge/
yardsticks.py), so each case after the first costs only ours."""

from __future__ import annotations

import dataclasses
import re

import torch.distributed as dist

from ligerbench.converge.checker import ConvergeCase, build
from ligerbench.converge.models import PRESETS
from ligerbench.converge.mutants import PARALLEL_MUTANTS
from ligerbench.converge.parallel import CORRECT
from ligerbench.kernels.hf import CausalLMPatch
from ligerbench.suites.converge import parallel as converge_parallel
from ligerbench.suites.converge import rl as converge_rl

# 3 steps: the trajectory checks need a few; the interpreter pays ~1 s a step and rank
STEPS = 3
PRESET = dataclasses.replace(PRESETS["tiny"], steps=STEPS)


class GlobalRankStart(CausalLMPatch):
    """Planted bug: the vocab offset from the GLOBAL rank, not the tp group's (the class of bug
    of a vocab-parallel loss inside a tp subgroup)."""

    def vocab_shard(self, head):
        weight, bias, group, _ = super().vocab_shard(head)
        return weight, bias, group, dist.get_rank() * weight.shape[0]


class GlobalRankModTpStart(CausalLMPatch):
    """Planted bug: the vocab offset from the global rank modulo the tp width: right wherever the
    tp groups are neighbouring ranks ({0,1},{2,3}), wrong in the strided layout ({0,2},{1,3})."""

    def vocab_shard(self, head):
        weight, bias, group, _ = super().vocab_shard(head)
        return weight, bias, group, dist.get_rank() % dist.get_world_size(group) * weight.shape[0]


# name -> (plan, patch, patcher, normalisation, what must come of it: "pass", a check that must
# fail, or the message (a regex) of the error that must stop it). Each is there for one reason.
CASES = {
    # the fused kernel on lm_head's tp shard, gathered over dp by the root's unit
    "flce": ("fsdp2_tp", "flce", CausalLMPatch, CORRECT, "pass"),
    # vocab-sharded DTensor logits on the tp sub-mesh, tp groups {0,2},{1,3}
    "ce_strided": ("fsdp2_tp_strided", "ce", CausalLMPatch, CORRECT, "pass"),
    # the count summed over the tp ranks too: every token counted twice, the gradient halved
    "count_over_tp_too": ("fsdp2_tp", "ce", CausalLMPatch, PARALLEL_MUTANTS["count_over_tp_too"], "grads@step0"),
    # the offset bugs, strided: the only layout where the modulo is wrong, and one where the
    # global rank is wrong on every tp group (contiguous, {0,1} would pass and {2,3} stop alone)
    "global_rank_start": ("fsdp2_tp_strided", "flce", GlobalRankStart, CORRECT, "vocab shards do not tile"),
    "global_rank_mod_tp_start": ("fsdp2_tp_strided", "flce", GlobalRankModTpStart, CORRECT, "vocab shards do not tile"),
    # the policy loss through completion_log_probs, its count over the dp group (last: the runs
    # kept are one per role, and its own replace the causal LM's)
    "grpo": ("fsdp2_tp", "flp", CausalLMPatch, CORRECT, "pass"),
}


def _run(name: str, world: int):
    plan, patch, patcher, norm, _ = CASES[name]
    case = ConvergeCase("llama-mini", PRESET, "fp32", patch, parallel=plan, nproc=world)
    if patch == "flp":
        return converge_rl.run_parallel_case(case, norm=norm)
    return converge_parallel.run_parallel_case(case, patcher=patcher, norm=norm)


def check_mesh_2d(rank: int, group, world: int, names: list[str]) -> None:
    """Each case of CASES on every rank; rank 0 (the one that judges) checks the verdicts."""
    build(ConvergeCase("llama-mini", PRESET, "fp32", "ce"))  # transformers' imports, before any collective waits
    for name in names:
        expected = CASES[name][-1]
        try:
            result = _run(name, world)
        except ValueError as exc:  # every rank raises: each tp group's layout check fails
            assert expected not in ("pass", "grads@step0") and re.search(expected, str(exc)), (name, exc)
            continue
        assert expected in ("pass", "grads@step0"), f"{name}: ran to the end, expected an error {expected!r}"
        if rank != 0:
            continue
        verdicts = {r.quantity: r.verdict for r in result.records}
        assert len(verdicts) == 6, (name, verdicts)
        if expected == "pass":
            assert set(verdicts.values()) == {"pass"}, (name, verdicts)
        else:
            assert verdicts[expected] == "fail", (name, verdicts)
            value = next(r.value for r in result.records if r.quantity == expected)
            assert abs(value - 0.5) < 1e-3, (name, value)  # half the gradient: each token counted twice
