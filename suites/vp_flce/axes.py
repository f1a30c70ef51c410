"""The case axes of `vp_flce`: those of `flce` (suites/flce/axes.py) plus the world size,
target placement and mesh of `vp_ce` (suites/vp_ce/axes.py, mesh.py)."""

from __future__ import annotations

import dataclasses

from ligerbench.cases import Case
from ligerbench.suites.ce import axes as ce
from ligerbench.suites.flce import axes as flce
from ligerbench.suites.vp_ce import head_masks
from ligerbench.suites.vp_ce.axes import TARGETS, WORLD
from ligerbench.suites.vp_ce.mesh import MESH

# ce's logits kinds and a sampler's masks through the head's bias (suites/vp_ce/head_masks.py)
LOGITS = dataclasses.replace(ce.LOGITS, values=(*ce.LOGITS.values, *head_masks.KINDS),
                             means={**ce.LOGITS.means, **head_masks.MEANS})  # fmt: skip

AXES = (
    *(
        LOGITS if a.name == "logits" else a
        for a in ce.loss_axes(
            ce.tokens({"quick": (12, 1), "full": (4096, 512, 1, 2048)}),
            ce.vocab({"quick": (257, 256, 2), "full": (32001, 32000, 5, 128256)}, ce.VOCABS),
            flce.hidden({"quick": (16, 8), "full": (1024, 64, 4096)}),
            flce.BIAS,
            layout=dataclasses.replace(flce.LAYOUT, values=("2d", "3d")),
        )
    ),
    WORLD,
    TARGETS,
    MESH,
)


def case(**params) -> Case:
    """A `vp_flce` case; the axes' defaults fill what is not named."""
    return Case.of("vp_flce", AXES, **params)
