"""The case axes of `lp` (per-token log-probs and entropy from logits): what each value stands for.

ligerbench verify --kernel lp --where temperature=0.6 --where layout=padded_vocab
"""

from __future__ import annotations

import dataclasses

from ligerbench.axes import NO_DEFAULT, Axis
from ligerbench.cases import Case
from ligerbench.suites.families import log_prob as semantics
from ligerbench.suites.families import sampler_masks

N = Axis("n", "tokens (rows of the logits)", {"quick": (24, 1, 7), "full": (2048, 1, 513)}, tag="n",
         default=NO_DEFAULT)  # fmt: skip
V = Axis("v", "the vocabulary size", {"quick": (1000, 1, 3, 4099), "full": (151936, 1, 3, 4099)}, tag="v",
         default=NO_DEFAULT, means={1: "one class: logp 0, entropy 0, no gradient", 3: "most of a block masked",
                                    4099: "a partial last block", 151936: "Qwen2.5"})  # fmt: skip
LAYOUT = Axis("layout", "how the logits a provider receives are laid out", ("2d", "3d", "padded_vocab", "transposed"),
              tag="lay-", default="2d", hidden=("2d",), means={
    "2d": "[N, V] contiguous",
    "3d": "[B, T, V] straight from a model, targets [B, T]",
    "padded_vocab": "[N, Vp]: a vocabulary padded to a multiple of 64 with -inf columns (unsloth #10616)",
    "transposed": "[V, N].T: logits computed as (W @ h.T).T",
})  # fmt: skip

# the shared logits kinds and the sampler's masks (suites/families/sampler_masks.py), lp's own cases
LOGITS = dataclasses.replace(semantics.LOGITS, values=(*semantics.LOGITS.values, sampler_masks.KIND), means={
    **semantics.LOGITS.means,
    sampler_masks.KIND: "as a sampler leaves them: top-k, top-p, one finite logit, banned tokens and a wholly -inf "
                        "middle run, -inf everywhere else (the targets finite)",
})  # fmt: skip

AXES = (N, V, *(LOGITS if a.name == "logits" else a for a in semantics.AXES), LAYOUT)


def case(**params) -> Case:
    """An `lp` case; the axes' defaults fill what is not named."""
    return Case.of("lp", AXES, **params)
