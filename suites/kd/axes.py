"""The case axes of `kd` (distillation divergences from logits): what each value stands for.

ligerbench verify --kernel kd --divergence jsd --beta 0.1 --teacher top8
"""

from __future__ import annotations

import dataclasses

from ligerbench.axes import NO_DEFAULT, Axis
from ligerbench.cases import Case
from ligerbench.suites.families import distill as ds
from ligerbench.suites.families import sampler_masks
from ligerbench.suites.lp import axes as lp_axes

N = Axis("n", "tokens (rows of the logits)", {"quick": (8, 1, 5), "full": (2048, 1, 513)}, tag="n",
         default=NO_DEFAULT, means={1: "one token: none returns shape [1]"})  # fmt: skip
V = Axis("v", "the vocabulary size", {"quick": (1000, 3, 4099), "full": (128256, 3, 4099)}, tag="v",
         default=NO_DEFAULT, means={3: "most of a block masked (a top-K teacher's K becomes 3)",
                                    1000: "not a multiple of the block", 4099: "a partial last block",
                                    128256: "Llama-3"})  # fmt: skip
TEACHER = Axis("teacher", "how the teacher is given", ("full", "top8"), default="full", tag="", hidden=("full",),
               means={"full": "its logits [N, V] (a teacher model run beside the student)",
                      "top8": "its top-8 log-probs and ids [N, 8] (a vLLM server's logprobs; offline KD)"})  # fmt: skip
# lp's layouts: lp's spec.lay_out lays out the student's and the teacher's logits alike
LAYOUT = dataclasses.replace(lp_axes.LAYOUT, about="how both logits a provider receives are laid out", means={
    **lp_axes.LAYOUT.means,
    "3d": "[B, T, V] straight from the models, labels [B, T]",
})  # fmt: skip

# the teacher kinds, and both sides masked as a sampler leaves the student's logits
# (suites/families/sampler_masks.py; the teacher -inf where the student is): kd's own cases
LOGITS = dataclasses.replace(ds.TEACHER_KIND, values=(*ds.TEACHER_KIND.values, sampler_masks.KIND), means={
    **ds.TEACHER_KIND.means,
    sampler_masks.KIND: "a normal teacher, and both logits -inf where a sampler masked the student's (top-k, top-p, "
                        "one finite logit, banned tokens, a wholly -inf middle run)",
})  # fmt: skip

AXES = (N, V, ds.DTYPE, ds.DIVERGENCE, ds.BETA, ds.TEMPERATURE, TEACHER, ds.TEACHER_GRAD, ds.REDUCTION, ds.UPSTREAM,
        ds.IGNORE_PATTERN, LOGITS, LAYOUT)  # fmt: skip
K = 8  # the top-K teacher's K (at most V)


def case(**params) -> Case:
    """A `kd` case; the axes' defaults fill what is not named."""
    return Case.of("kd", AXES, **params)
