"""`ligerbench converge`: train a mini transformers model with and without our kernels, and in
float64 as the truth; compare.

    ligerbench converge llama-mini --patch ce --dtype fp32                   # CPU, quick preset
    ligerbench converge gemma2-mini --patch both --preset full --packed      # H100, both dtypes

The command holds its options and its selection; the run is ligerbench/converge/job.py under
ligerbench/lifecycle.py, the checks in suites/converge/__init__.py, models/data/training/tolerances/plot
and the checker in ligerbench/converge/. Results go to OUT/<run-id>/: records.csv, curves.csv, env.json,
summary.md and loss_<dtype>.png. Exit 0 when every comparison is in tolerance, 1 when any is
out of it or errored, 2 on a usage error, 130 when interrupted.

Presets have the names every command uses: quick (CPU, the models' `tiny` sizes) and full
(GPU, the models' `gpu` sizes); `tiny` and `gpu` are still accepted as aliases.
"""

from __future__ import annotations

import dataclasses
from enum import Enum
from typing import Annotated, Optional

import torch
import typer

from ligerbench import lifecycle, runs
from ligerbench.commands.options import CollectOnly, JsonSummary, ResultsRoot
from ligerbench.converge.job import ConvergeJob
from ligerbench.converge.models import MODELS, PRESETS
from ligerbench.converge.mutants import PARALLEL_MUTANTS
from ligerbench.converge.parallel import DATA_PARALLEL, MESH_2D, PLANS, TP_SIZE
from ligerbench.exits import ExitCode
from ligerbench.suites.converge import PATCHES, run_case
from ligerbench.suites.converge import distill as converge_distill
from ligerbench.suites.converge import rl as converge_rl
from ligerbench.suites.converge.parallel import PLAN_PATCHES

ModelName = Enum("ModelName", {m: m for m in MODELS}, type=str)
PatchName = Enum("PatchName", {p: p for p in PATCHES}, type=str)
# the preset names of every command, and converge's own older names kept as aliases
PRESET_NAMES = {"quick": "tiny", "full": "gpu"}
ConvergePreset = Enum("ConvergePreset", {p: p for p in ("auto", *PRESET_NAMES, *PRESETS)}, type=str)
ConvergeDtype = Enum("ConvergeDtype", {d: d for d in ("fp32", "bf16")}, type=str)
ParallelPlan = Enum("ParallelPlan", {p: p for p in PLANS}, type=str)
RLKind = Enum("RLKind", {k: k for k in converge_rl.RL_KINDS}, type=str)
Divergence = Enum("Divergence", {d: d for d in converge_distill.DIVERGENCES}, type=str)


def converge(
    model: Annotated[ModelName, typer.Argument(help="Mini model, built from its transformers config (no download).")],
    patch: Annotated[
        PatchName,
        typer.Option(
            help="ce: our CE on the logits; flce: fused linear+CE in training; "
            "both: flce in training, ce wherever logits exist."
        ),
    ] = PatchName(PATCHES[0]),
    preset: Annotated[
        ConvergePreset, typer.Option(help="Sizes: quick (CPU), full (GPU); auto picks by device. tiny/gpu: aliases.")
    ] = ConvergePreset.auto,
    dtype: Annotated[
        Optional[list[ConvergeDtype]], typer.Option(help="Model dtype (repeatable); default both.")
    ] = None,
    packed: Annotated[
        bool, typer.Option(help="Also check a packed row against the padded batch (docs/bugs.md, bug 4).")
    ] = False,
    steps: Annotated[Optional[int], typer.Option(min=1, help="Training steps (default: the preset's).")] = None,
    batch: Annotated[Optional[int], typer.Option(min=1, help="Sequences per step (default: the preset's).")] = None,
    device: Annotated[str, typer.Option(help="auto, cpu or cuda; auto prefers CUDA.")] = "auto",
    seed: Annotated[int, typer.Option(help="Seed of weights and data; both runs share it.")] = 0,
    out: ResultsRoot = runs.DEFAULT_ROOT,
    collect_only: CollectOnly = False,
    as_json: JsonSummary = False,
    nproc: Annotated[
        int,
        typer.Option(
            min=0,
            help="Train ours on N real ranks started by torch.distributed.run (gloo on CPU, NCCL on GPUs) "
            "under --parallel; 0: in this process.",
        ),
    ] = 0,
    parallel: Annotated[
        Optional[ParallelPlan],
        typer.Option(
            help="With --nproc: ddp (DistributedDataParallel), fsdp2 (fully_shard per layer, lm_head its own "
            "unit, root), tp (lm_head column-parallel: vocab-parallel cross entropy with --patch ce, "
            "vocab-parallel fused kernel with flce/both), fsdp2_tp (a 2-D mesh of N/2 x 2 ranks: tp on the "
            "tp sub-mesh, then fully_shard over dp; tp groups {0,1},{2,3}) or fsdp2_tp_strided (the same, "
            "tp groups {0,2},{1,3})."
        ),
    ] = None,
    accum: Annotated[
        int, typer.Option(min=1, help="With --nproc: gradient accumulation micro-batches per step and rank.")
    ] = 1,
    timeout: Annotated[
        float, typer.Option(help="With --nproc: wall-clock limit in seconds of the ranks' run (then killed).")
    ] = 1800.0,
    mutant: Annotated[
        Optional[str], typer.Option(hidden=True, help="With --nproc: a planted bug of converge/mutants.py.")
    ] = None,
    rl: Annotated[
        Optional[RLKind],
        typer.Option(
            help="Train with an RL loss instead: policy-gradient steps through our fused log-probs "
            "(suites/converge/rl.py); --patch is then not used. With --nproc: any --parallel but ddp."
        ),
    ] = None,
    distill: Annotated[
        Optional[Divergence],
        typer.Option(
            help="Train a student from a fixed mini teacher instead: this divergence at temperature 2 "
            "(jsd: beta 0.5) through our fused distillation loss, flkd (suites/converge/distill.py); "
            "--patch is then not used. In this process only; not gemma2-mini (flkd has no softcap)."
        ),
    ] = None,
):
    """Train a mini model with and without our kernels, and compare.

    Train MODEL three times (transformers' loss, our kernels, transformers' loss in float64) and
    compare loss per step, final parameters and eval top-k log-probs with the float64 run (limit:
    10x transformers' own distance to it, at most 1, see converge/tolerance.py), step-0 gradients,
    logits_to_keep and (--packed) packing.

    Exit status: 0 every comparison in tolerance, 1 any out of it or errored, 2 usage error,
    130 interrupted (completed rows and a summary kept).

    Examples:

      ligerbench converge llama-mini --patch ce --dtype fp32 --device cpu

      ligerbench converge gemma2-mini --patch both --preset full --packed

      ligerbench converge qwen2-mini --collect-only

      ligerbench converge llama-mini --nproc 2 --parallel fsdp2 --patch flce --device cpu --dtype fp32

      ligerbench converge llama-mini --rl grpo --device cpu

      ligerbench converge llama-mini --rl grpo --nproc 2 --parallel fsdp2 --device cpu --dtype fp32

      ligerbench converge llama-mini --nproc 4 --parallel fsdp2_tp --patch flce --device cpu --dtype fp32

      ligerbench converge llama-mini --distill jsd --device cpu

    With --nproc N --parallel PLAN, ours trains on N ranks under the plan (ddp/fsdp2: each rank
    its slice of every batch, the loss normalised over the global batch; tp: the same batch;
    fsdp2_tp: each of the N/2 dp replicas its slice, the 2 tp ranks of a replica the same) and
    is judged against the same single-process runs, plus step 0's gradients after the ranks'
    reduction against float64 (suites/converge/parallel.py); logits_to_keep and packing are
    single-process checks and are not run. With --rl the same, for the policy loss
    (suites/converge/rl.py). With --distill the student's divergence from a fixed teacher through
    our fused loss (flkd) against the same divergence on full logits (suites/converge/distill.py).
    """
    dev, mode = runs.resolve_device(device)
    picked = ("full" if dev.type == "cuda" else "quick") if preset.value == "auto" else preset.value
    preset_name = PRESET_NAMES.get(picked, picked)
    chosen = PRESETS[preset_name]
    if chosen.device == "cuda" and dev.type != "cuda":
        raise runs.usage_error("the gpu preset needs a CUDA device (Triton's interpreter would take hours)", "--preset")
    if steps:
        chosen = dataclasses.replace(chosen, steps=steps)
    if batch:
        chosen = dataclasses.replace(chosen, batch=batch)
    _check_distill(distill, rl, nproc, packed, model.value)
    _check_parallel(nproc, parallel, accum, "flp" if rl else patch.value, packed, mutant, chosen.batch, dev)
    if rl and packed:
        raise runs.usage_error("--rl trains without --packed", "--rl")
    patch_name = "flp" if rl else "flkd" if distill else patch.value
    dtypes = [d.value for d in dtype] if dtype else ["fp32", "bf16"]
    selection = {"model": model.value, "patch": patch_name, "dtype": dtypes, "packed": packed}
    if rl:
        selection["rl"] = rl.value
    if distill:
        selection["distill"] = distill.value
    if nproc:
        selection |= {"nproc": nproc, "parallel": parallel.value, "accum": accum}
    if collect_only:
        facts = {"command": "converge", "preset": picked, "filters": selection, "trainings": len(dtypes)}
        facts["steps"] = chosen.steps
        if as_json:
            runs.print_json(facts)
        else:
            what = f"--rl {rl.value}" if rl else f"--distill {distill.value}" if distill else f"--patch {patch_name}"
            print(f"{len(dtypes)} dtypes ({', '.join(dtypes)}) x {chosen.steps} steps of {model.value} {what}; "
                  f"preset {picked} ({chosen.description})")  # fmt: skip
        return ExitCode.OK
    job = ConvergeJob(
        converge_rl.run_case if rl else converge_distill.run_case if distill else run_case, model.value, patch_name,
        chosen, dtypes, seed=seed,
        device_type=dev.type, packed=packed,
        preset_name=preset_name, nproc=nproc, parallel=parallel.value if parallel else None, accum=accum,
        mutant=mutant, timeout_s=timeout, rl=rl.value if rl else "", distill=distill.value if distill else "",
    )  # fmt: skip
    return lifecycle.execute(
        job, quiet=as_json, device=dev, triton_mode=mode, seed=seed, out=out, filters=selection, preset=picked,
        model_sizes=preset_name, model=model.value, patch=patch_name, dtypes=dtypes, packed=packed,
        steps=chosen.steps, batch=chosen.batch,
    )  # fmt: skip


def _check_distill(distill, rl, nproc, packed, model: str) -> None:
    """Usage errors of --distill (exit 2, before any run folder)."""
    if distill is None:
        return
    if rl is not None:
        raise runs.usage_error("--distill and --rl are two objectives: give one", "--distill")
    if nproc or packed:
        raise runs.usage_error("--distill trains in this process, without --nproc or --packed", "--distill")
    if model not in converge_distill.NO_SOFTCAP:
        message = f"--distill trains {', '.join(converge_distill.NO_SOFTCAP)}: {model}'s softcapped logits are not"
        raise runs.usage_error(message + " what flkd computes (it has no softcap)", "--distill")


def _check_parallel(nproc, parallel, accum, patch, packed, mutant, batch, dev) -> None:
    """Usage errors of --nproc / --parallel / --accum / --mutant (exit 2, before any run folder)."""
    if not nproc:
        if parallel is not None or accum != 1 or mutant is not None:
            raise runs.usage_error("--parallel, --accum and --mutant need --nproc N", "--nproc")
        return
    if parallel is None:
        raise runs.usage_error(f"--nproc needs --parallel ({', '.join(PLANS)})", "--parallel")
    if dev.type == "cuda" and nproc > torch.cuda.device_count():
        raise runs.usage_error(f"--nproc must be at most the GPUs here (one rank per GPU), got {nproc}", "--nproc")
    if patch == "flp" and patch not in PLAN_PATCHES[parallel.value]:
        *some, last = (p for p, patches in PLAN_PATCHES.items() if "flp" in patches)
        plans = f"{', '.join(some)} or {last}"
        message = f"--rl trains under --parallel {plans}: its log-probs come through the model's parts, not DDP's"
        message += " wrapper, whose forward DDP's gradient sync needs"
        raise runs.usage_error(message, "--parallel")
    if patch not in PLAN_PATCHES[parallel.value]:
        allowed = "/".join(PLAN_PATCHES[parallel.value])
        raise runs.usage_error(f"--parallel {parallel.value} takes --patch {allowed}", "--patch")
    if packed:
        raise runs.usage_error("--packed is a single-process check; leave it out with --nproc", "--packed")
    replicas = nproc if parallel.value in DATA_PARALLEL else 1
    if parallel.value in MESH_2D:
        if nproc % TP_SIZE or nproc < 2 * TP_SIZE:
            message = f"--parallel {parallel.value} is a (dp, {TP_SIZE}) mesh: --nproc a multiple of {TP_SIZE}"
            raise runs.usage_error(message + f", at least {2 * TP_SIZE}, got {nproc}", "--nproc")
        replicas = nproc // TP_SIZE
    if batch < replicas * accum:
        message = f"{batch} rows per step cannot be split over {replicas} replica(s) x {accum} micro-batches"
        raise runs.usage_error(message, "--accum")
    if mutant is not None and mutant not in PARALLEL_MUTANTS:
        raise runs.usage_error(f"--mutant: one of {', '.join(PARALLEL_MUTANTS)}", "--mutant")
