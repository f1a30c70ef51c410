"""The case axes of `flce`: those of `ce` (suites/ce/axes.py), plus the hidden size and a bias,
and the layouts of the hidden states; the split step's as `ce`'s."""

from __future__ import annotations

from ligerbench.axes import NO_DEFAULT, Axis
from ligerbench.cases import Case
from ligerbench.suites.ce import axes as ce
from ligerbench.suites.common import retained_backward

HIDDEN = {"quick": (32, 17, 7), "full": (1024, 1031, 576, 257)}


def hidden(values: dict[str, tuple]) -> Axis:
    return Axis(
        "h",
        "the hidden size (columns of the hidden states, of the lm_head weight)",
        values,
        means={17: "odd: no block divides it", 7: "smaller than any block", 1031: "odd, past 1024", 257: "odd"},
        tag="h",
        default=NO_DEFAULT,
    )


BIAS = Axis(
    "bias",
    "whether the lm_head has a bias",
    (False, True),
    means={False: "Llama-style heads: no bias", True: "heads with a bias (and its gradient)"},
    default=False,
    label=lambda b: "b" if b else "",
    glued=True,  # written onto the hidden size: h32b
)
LAYOUT = Axis(
    "layout",
    "how the hidden states a provider receives are laid out in memory",
    ("2d", "3d", "kept_slice", "column_major", "weight_column_major"),
    means={
        "2d": "hidden [N, H] contiguous",
        "3d": "hidden [B, T, H], targets [B, T]: a decoder's last hidden states",
        "kept_slice": "hidden[:, -T:, :] of [B, T + P, H]: logits_to_keep (strided, storage offset)",
        "column_major": "hidden = x.t() of an [H, N] tensor: strides (1, N) (Liger <= 0.8.4 formed its "
        "gradient as if rows were contiguous)",
        "weight_column_major": "weight = w.t() of an [H, V] tensor (an lm_head stored [in, out], as "
        "GPT-2's Conv1D does): strides (1, V)",
    },
    default="2d",
    tag="lay-",
    hidden=("2d",),
)
AXES = (
    *ce.loss_axes(
        ce.tokens({"quick": (12, 1, 11, 17, 72), "full": (4096, 1, 4099, 1001, 777)}),
        ce.vocab({"quick": (256, 257, 100), "full": (32000, 32001, 128256, 256000)}, ce.VOCABS),
        hidden(HIDDEN),
        BIAS,
        layout=LAYOUT,
    ),
    ce.SPLIT,
    ce.SPREAD,
    retained_backward.AXIS,
)


def case(**params) -> Case:
    """A `flce` case; the axes' defaults fill what is not named."""
    return Case.of("flce", AXES, **params)
