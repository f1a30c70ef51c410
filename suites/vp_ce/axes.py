"""The case axes of `vp_ce`: those of `ce` (suites/ce/axes.py; the 2-D layout only) plus the
ranks the vocabulary is split over, where the targets sit, and how the ranks sit in the world
(suites/vp_ce/mesh.py)."""

from __future__ import annotations

import dataclasses

from ligerbench.axes import Axis
from ligerbench.cases import Case
from ligerbench.suites.ce import axes as ce
from ligerbench.suites.vp_ce.mesh import MESH

WORLD = Axis(
    "world",
    "the ranks the vocabulary is split over (0: a bench point not yet split)",
    {"quick": (2, 3, 4), "full": (2, 3, 4, 8)},
    means={
        2: "the smallest split; on a mesh, 2 x 2 ranks",
        3: "an uneven split of most vocabularies",
        4: "four ranks: one node's half, where the field's parallel bugs of 2026 were reported",
        8: "one node",
    },
    default=0,
    tag="w",
    hidden=(0,),
)
TARGETS = Axis(
    "targets",
    "where the targets sit among the shards",
    ("random", "edges"),
    means={"random": "anywhere in the vocabulary", "edges": "on the first and last class of some shard"},
    default="random",
    tag="targets-",
)
HANDED = Axis(
    "handed",
    "what each rank is handed",
    ("shards", "gathered"),
    means={
        "shards": "its shard of the logits",
        "gathered": "the whole logits, gathered already, with its shard's offset: to be refused (Megatron-LM #7452)",
    },
    default="shards",
    tag="handed-",
    hidden=("shards",),
)
SHARD_MASKED = "shard_masked"  # suites/vp_ce/spec.py, masked_shard
# ce's logits kinds and one of the vocabulary-parallel kernels' own
LOGITS = dataclasses.replace(
    ce.LOGITS,
    values=(*ce.LOGITS.values, SHARD_MASKED),
    means={
        **ce.LOGITS.means,
        SHARD_MASKED: "a sampler's mask that leaves one rank's whole shard -inf in every row (the last rank's, or "
        "the first's where the target sits there): a local max of -inf, whose naive softmax gives -inf - -inf = NaN",
    },
)
AXES = (
    *(
        LOGITS if a.name == "logits" else a
        for a in ce.loss_axes(
            ce.tokens({"quick": (16, 1), "full": (1024, 512, 1, 2048)}),
            ce.vocab({"quick": (501, 500, 2), "full": (32001, 32000, 5, 128256)}, ce.VOCABS),
            layout=dataclasses.replace(ce.LAYOUT, values=("2d",)),  # the shards are 2-D
        )
    ),
    WORLD,
    TARGETS,
    MESH,
    HANDED,
)


def case(**params) -> Case:
    """A `vp_ce` case; the axes' defaults fill what is not named."""
    return Case.of("vp_ce", AXES, **params)
