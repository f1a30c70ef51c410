"""The case axes of `lp` (per-token log-probs and entropy from logits): what each value stands for.

ligerbench verify --kernel lp --where temperature=0.6 --where layout=padded_vocab
"""

from __future__ import annotations

from ligerbench.axes import NO_DEFAULT, Axis
from ligerbench.cases import Case
from ligerbench.suites.families import log_prob as semantics

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

AXES = (N, V, *semantics.AXES, LAYOUT)


def case(**params) -> Case:
    """An `lp` case; the axes' defaults fill what is not named."""
    return Case.of("lp", AXES, **params)
