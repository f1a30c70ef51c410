"""Tolerances of the convergence suite, per dtype, in one place, with the reason for each.

Three kinds of comparison, three rules:

1. Step 0, kernel against float64 truth (gradient of the logits, gradient of the last hidden
   state). The weights are still identical in both runs, so this is a kernel check and uses the
   harness's one rule (ligerbench/tolerance.py): error <= 2 * eager_error + FLOOR[dtype], where
   eager_error is transformers' own (fp32-upcast) error on the same tensors.

2. One forward/backward, identical weights, two ways to the same number (logits_to_keep patched
   vs transformers; packed row with per-sequence weights vs padded batch with a per-sequence
   mean): relative L2 of loss, logits and parameter gradients <= SINGLE_STEP[dtype]. fp32: a
   few hundred float32 roundings (matmul sums over hidden <= 1024, softmax over the vocab)
   stay below 1e-5 relative (measured <= 2e-7). bf16: the model body runs in bf16 (unit
   roundoff 2**-9 = 2e-3). transformers rounds the logits' gradient to bf16 once (twice more
   through Gemma-2's softcap, whose tanh it computes in bf16; our kernel caps in fp32), and
   every parameter gradient inherits those roundings: measured 8e-3 to 9e-3 on gemma2-mini,
   i.e. 2-3 units of 2**-8. Limit 2e-2, about five units; the bugs these checks exist for
   (wrong slice, wrong normalisation) give shape errors or 30%+ differences.

3. The training trajectory (per-step loss, final parameters, eval log-probabilities). Two
   correct implementations drift apart through AdamW, which divides by sqrt(v) and so turns a
   rounding-level gradient difference on a small gradient into a full-size update difference.
   In pure bf16 at the tiny preset's lr (1e-2 against an init std of 2e-2) every step moves a
   weight by a large fraction of its size, so one flipped rounding is a visible difference.
   Measured on the tiny preset (12 steps), transformers vs our kernel: fp32 loss <= 2e-7,
   params <= 6e-6 (llama-mini, gemma2-mini); bf16 loss 5e-4 / 3e-3, params 5e-3 (llama-mini) /
   7.6e-2 (gemma2-mini: transformers' bf16 softcap against our fp32 one, so part of that drift
   is the reference's own rounding). The fp32 limits sit 50x above the drift; bf16 params 2x
   above the worst model, loss 3x. The final-parameter check is a coarse one in bf16: Adam is
   blind to gradient scale, so gradient bugs are caught at step 0 against float64 (rule 1),
   and wrong losses by the per-step loss from step 0 on.
   Eval log-probs are compared as an absolute difference (nats) at the reference's top-k.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ligerbench import tolerance as kernel_tolerance

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


@dataclass(frozen=True)
class TrajectoryLimits:
    loss: float  # max over steps of |ours - ref| / |ref|
    params: float  # relative L2 over all final parameters
    logprobs: float  # max |ours - ref| log-probability at the reference's top-k tokens (nats)


SINGLE_STEP = {"fp32": 1e-5, "bf16": 2e-2}

TRAJECTORY = {
    "fp32": TrajectoryLimits(loss=1e-5, params=1e-4, logprobs=1e-3),
    "bf16": TrajectoryLimits(loss=1e-2, params=0.15, logprobs=0.25),
}


def kernel_limit(eager_error: float, dtype: str) -> float:
    """Rule 1: the harness's kernel tolerance, unchanged."""
    return kernel_tolerance.limit_for(eager_error, DTYPES[dtype])


rel_error = kernel_tolerance.rel_error
