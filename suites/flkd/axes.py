"""The case axes of `flkd` (distillation divergences from both lm_heads, never holding the
logits): what each value stands for.

    ligerbench verify --kernel flkd --divergence jsd --layout column_major
"""

from __future__ import annotations

import dataclasses

from ligerbench.axes import NO_DEFAULT, Axis
from ligerbench.cases import Case
from ligerbench.suites.families import distill as ds
from ligerbench.suites.flp import axes as flp_axes

N = Axis("n", "tokens (rows of the hidden states)", {"quick": (12, 1), "full": (2048, 1, 513)}, tag="n",
         default=NO_DEFAULT)  # fmt: skip
V = Axis("v", "the vocabulary size (rows of both lm_heads)", {"quick": (500, 3, 1001), "full": (128256, 3, 4099)},
         tag="v", default=NO_DEFAULT, means={3: "a tiny vocabulary", 1001: "an odd size: a partial last slice",
                                             128256: "Llama-3"})  # fmt: skip
H = Axis("h", "the student's hidden size (the teacher's is 16 wider)", {"quick": (32, 17), "full": (1024, 4096)},
         tag="h", default=NO_DEFAULT, glued=False, means={17: "an odd hidden size"})  # fmt: skip
# flp's layouts: flp's spec.lay_out lays out the student's and the teacher's hidden states alike
LAYOUT = dataclasses.replace(flp_axes.LAYOUT, about="how both hidden states a provider receives are laid out", means={
    **flp_axes.LAYOUT.means,
    "3d": "hidden [B, T, H] from the decoders, labels [B, T]",
    "column_major": "hidden [H, N].T: a transposed activation",
})  # fmt: skip

AXES = (N, V, H, ds.DTYPE, ds.DIVERGENCE, ds.BETA, ds.TEMPERATURE, ds.REDUCTION, ds.UPSTREAM, ds.IGNORE_PATTERN,
        ds.TEACHER_KIND, LAYOUT)  # fmt: skip
TEACHER_WIDER = 16  # the teacher's hidden size is the student's + this (TRL: they may differ)


def case(**params) -> Case:
    """An `flkd` case; the axes' defaults fill what is not named."""
    return Case.of("flkd", AXES, **params)
