"""selftest's converge campaign: the planted patch bugs of ligerbench/converge/mutants.py run
through the convergence suite (suites/converge/__init__.py), beside the correct patch on the same model,
data and seed.

Each mutant runs only the checks that exist to catch it (CHECKS), in the dtypes it is planted in
(DTYPES_OF: a 16-bit rounding is no bug of a bf16 model): a training run per mutant and dtype is
the cost, and CI runs them all on CPU. A mutant added to converge's MUTANTS without an entry
here runs every check with a packed case, in float32, which is slower but misses nothing.
Between them the mutants fail every judged quantity of the suite in both dtypes
(tests/test_converge_mutants.py holds that).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from ligerbench.converge.checker import ConvergeCase
from ligerbench.converge.models import PRESETS as MODEL_PRESETS
from ligerbench.converge.mutants import MUTANTS
from ligerbench.kernels.hf import CausalLMPatch
from ligerbench.registry import Campaign, Registry
from ligerbench.selftest.model import Context, Mutant

PREFIX = "converge_"  # mutants and the control share the provider column with kernel providers
CONTROL = "converge_patch"
DTYPES = ("fp32", "bf16")
# selftest preset -> (converge preset, training steps): two steps already show every planted
# bug (a patch inactive or left in place fails on the first step) and keep CI short
PRESETS = {"quick": ("tiny", 2), "full": ("gpu", None)}
ALL_CHECKS = ("trajectory", "logits_to_keep", "packed")
DESCRIPTIONS = {
    "not_applied": "patch enters and exits without touching the model",
    "not_reverted": "patched forward left on the instance after the context (docs/bugs.md, bug 7)",
    "logits_to_keep_eval_only": "logits_to_keep applied in eval mode only (docs/bugs.md, bug 5)",
    "loss_scaled": "loss 1% too large: per-step loss vs the float64 run (and step-0 gradients)",
    "per_token_when_packed": "per-token instead of per-sequence normalisation of packed rows (docs/bugs.md, bug 4)",
    "mean_over_every_position": "loss normalised over every position, ignored ones included (a normaliser)",
    "logits_rounded_16bit": "logits rounded to bf16 before the loss of a float32 model (a 16-bit rounding)",
    "grad_scaled": "loss right, its gradient twice as large (a backward scaled wrong)",
    "labels_not_shifted": "position t scored against token t, not t + 1 (another objective)",
}
CHECKS = {
    "not_applied": ("trajectory",),  # patch_active: our kernel never ran
    "not_reverted": ("trajectory",),  # patch_reverted: the instance keeps the patched forward
    "logits_to_keep_eval_only": ("logits_to_keep",),  # train-mode slicing (docs/bugs.md, bug 5)
    "loss_scaled": ("trajectory",),  # loss_per_step against the float64 run
    "per_token_when_packed": ("packed",),  # packed row vs padded batch, per-sequence mean
    "mean_over_every_position": ("trajectory",),  # loss_per_step, the step-0 gradients
    "logits_rounded_16bit": ("trajectory",),  # every trajectory quantity, in float32
    "grad_scaled": ("trajectory",),  # the step-0 gradients
    "labels_not_shifted": ("trajectory",),  # every trajectory quantity, in bf16 too
}
# the dtypes each is planted in (default: float32): those whose rows can tell it from rounding
DTYPES_OF = {name: DTYPES for name in ("mean_over_every_position", "grad_scaled", "labels_not_shifted")}


def _mutants(registry: Registry, device_type: str) -> list[Mutant]:
    return [
        Mutant(
            name=PREFIX + name,
            campaign="converge",
            description=DESCRIPTIONS.get(name) or (cls.__doc__ or name).strip().splitlines()[0],
            control=CONTROL,
            suites=("converge",),
        )
        for name, cls in MUTANTS.items()
    ]


def campaign(run_case: Callable, *, model: str, patch: str) -> Campaign:
    """The converge campaign over `run_case` (suites/converge/__init__.py's engine entry), training
    `model` with `patch` (the builtin registration passes the suite's choices)."""

    def run(registry: Registry, mutants: list[Mutant], ctx: Context) -> None:
        preset_name, steps = PRESETS[ctx.preset]
        preset = MODEL_PRESETS[preset_name]
        if steps:
            preset = dataclasses.replace(preset, steps=steps)
        names = [m.name.removeprefix(PREFIX) for m in mutants]
        checks = {n: CHECKS.get(n, ALL_CHECKS) for n in names}

        def sink_as(provider: str):
            return lambda r: ctx.writer.write(dataclasses.replace(r, provider=provider, run_id=ctx.run_id))

        for dtype in DTYPES:
            planted = [n for n in names if dtype in DTYPES_OF.get(n, DTYPES[:1])]
            if not planted:
                continue
            packed = any("packed" in checks[n] for n in planted)
            case = ConvergeCase(model, preset, dtype, patch, seed=ctx.seed, packed=packed, device=ctx.device.type)
            # the control runs the union of the mutants' checks, so every mutant row has its control row
            union = tuple(c for c in ALL_CHECKS if any(c in checks[n] for n in planted))
            ctx.on_step(f"{CONTROL} {case.id}")
            run_case(case, run_id=ctx.run_id, patcher=CausalLMPatch, sink=sink_as(CONTROL), checks=union)
            for name in planted:
                ctx.on_step(f"{PREFIX}{name} {case.id}")
                run_case(case, run_id=ctx.run_id, patcher=MUTANTS[name], sink=sink_as(PREFIX + name),
                         checks=checks[name])  # fmt: skip

    return Campaign(
        name="converge",
        description=f"planted patch bugs through the convergence suite ({model}, {'/'.join(DTYPES)}, {patch} patch)",
        mutants=_mutants,
        run=run,
    )
