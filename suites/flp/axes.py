"""The case axes of `flp` (per-token log-probs and entropy from the lm_head, never holding the
logits): what each value stands for.

    ligerbench verify --kernel flp --where layout=column_major --where dtype=bf16
"""

from __future__ import annotations

from ligerbench.axes import NO_DEFAULT, Axis
from ligerbench.cases import Case
from ligerbench.suites.families import log_prob as semantics

N = Axis("n", "tokens (rows of the hidden states)", {"quick": (24, 1), "full": (2048, 1, 513)}, tag="n",
         default=NO_DEFAULT)  # fmt: skip
V = Axis("v", "the vocabulary size (rows of the lm_head)", {"quick": (500, 3, 1001), "full": (128256, 3, 4099)},
         tag="v", default=NO_DEFAULT, means={3: "a tiny vocabulary: most of a block masked",
                                             1001: "an odd size: a partial last slice", 128256: "Llama-3"})  # fmt: skip
H = Axis("h", "the hidden size", {"quick": (32, 17, 128), "full": (1024, 4096)}, tag="h", default=NO_DEFAULT,
         glued=False, means={17: "an odd hidden size", 128: "a multiple of 128: verl's fused head takes no other",
                             4096: "Llama-3-8B"})  # fmt: skip
BIAS = Axis("bias", "whether the lm_head has a bias", (False, True), default=False,
            label=lambda b: "bias" if b else None, means={False: "most lm_heads", True: "a biased head (and "
            "the +-200 shift goes in through it)"})  # fmt: skip
LAYOUT = Axis("layout", "how the hidden states a provider receives are laid out", ("2d", "3d", "kept_slice",
              "column_major"), tag="lay-", default="2d", hidden=("2d",), means={
    "2d": "hidden [N, H] contiguous",
    "3d": "hidden [B, T, H] from a decoder, targets [B, T]",
    "kept_slice": "hidden[:, -T:, :] of [B, T + P, H]: logits_to_keep (strided, storage offset)",
    "column_major": "hidden [H, N].T: a transposed activation (Liger <= 0.8.4's hidden gradient assumed rows)",
})  # fmt: skip

AXES = (N, V, H, BIAS, *semantics.AXES, LAYOUT)


def case(**params) -> Case:
    """An `flp` case; the axes' defaults fill what is not named."""
    return Case.of("flp", AXES, **params)
