"""The case axes of `vp_flp`: those of `flp` (suites/flp/axes.py; the 2-D and 3-D layouts only,
every rank is handed its own copy of the hidden states) with shapes of their own, plus the ranks
the vocabulary is split over (suites/vp_ce/axes.py) and where the targets sit among the shards."""

from __future__ import annotations

import dataclasses

from ligerbench.axes import Axis
from ligerbench.cases import Case
from ligerbench.suites.families import log_prob as semantics
from ligerbench.suites.flp import axes as flp
from ligerbench.suites.vp_ce import head_masks
from ligerbench.suites.vp_ce.axes import WORLD
from ligerbench.suites.vp_ce.mesh import MESH

N = dataclasses.replace(flp.N, values={"quick": (12, 1), "full": (2048, 1, 513)},
                        means={1: "one token: a [1, K] statistics gather"})  # fmt: skip
V = dataclasses.replace(flp.V, values={"quick": (257, 256, 2), "full": (128256, 32001, 5)}, means={
    257: "uneven over 2 and 3 ranks (129/128, 86/86/85)",
    256: "even over 2 ranks",
    2: "fewer classes than ranks at 3: an empty shard",
    128256: "Llama-3", 32001: "uneven over every world size", 5: "empty shards at 8 ranks",
})  # fmt: skip
H = dataclasses.replace(flp.H, values={"quick": (16, 128), "full": (1024, 4096)},
                        means={128: flp.H.means[128], 4096: "Llama-3-8B"})  # fmt: skip
LAYOUT = dataclasses.replace(flp.LAYOUT, values=("2d", "3d"))
PLACEMENT = Axis("placement", "where the counted targets sit among the shards", ("random", "edges"), tag="at-",
                 default="random", hidden=("random",), means={
    "random": "anywhere in the vocabulary: most rows' targets on another rank than a given shard",
    "edges": "on the first and last class of some shard (an ownership test off by one, a wrong offset)",
})  # fmt: skip

# the shared logits kinds and a sampler's masks through the head's bias (head_masks.py)
LOGITS = dataclasses.replace(semantics.LOGITS, values=(*semantics.LOGITS.values, *head_masks.KINDS),
                             means={**semantics.LOGITS.means, **head_masks.MEANS})  # fmt: skip
AXES = (N, V, H, flp.BIAS, *(LOGITS if a.name == "logits" else a for a in semantics.AXES), LAYOUT, WORLD, PLACEMENT,
        MESH)  # fmt: skip


def case(**params) -> Case:
    """A `vp_flp` case; the axes' defaults fill what is not named."""
    return Case.of("vp_flp", AXES, **params)
