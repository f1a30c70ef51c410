"""The case grid of `vp_flp`, per preset: per dtype, a core of the crossings the vocab-parallel
bug classes need (every world size; the merge's confident, shifted and flat rows; K targets on
shard edges; an empty shard; one token), then an all-pairs covering design (suites/common/covering.py)
over the flp axes that matter and the world size, so that every pair of values meets once (in
fp32; the 16-bit dtypes get the core: Triton's interpreter keeps the CPU grid small)."""

from __future__ import annotations

from ligerbench.cases import Case
from ligerbench.suites.common.covering import all_pairs
from ligerbench.suites.flp.grid import PEER_HIDDEN
from ligerbench.suites.vp_ce.head_masks import BIAS_MASKED, BIAS_SINGLE, KINDS
from ligerbench.suites.vp_ce.mesh import MESHED
from ligerbench.suites.vp_flp.axes import AXES, case

DTYPES = {"cpu": ("fp32", "bf16"), "cuda": ("fp32", "bf16", "fp16")}
COVERED = ("world", "temperature", "softcap", "targets", "upstream", "ignore_pattern", "logits", "layout",
           "placement")  # fmt: skip


def vp_flp_cases(preset: str, device_type: str) -> list[Case]:
    axes = {a.name: a for a in AXES}
    (n0, *odd_n), (v0, *odd_v), (h0, *_) = (axes[k].values_for(preset) for k in ("n", "v", "h"))
    worlds = axes["world"].values_for(preset)
    cases: list[Case] = []
    for dtype in DTYPES[device_type]:
        base = case(n=n0, v=v0, h=h0, dtype=dtype, world=worlds[0])
        core = [base.replace(world=w) for w in worlds]
        # a hidden size verl's fused head takes (H % 128 == 0, an even vocabulary over 2 ranks)
        core.append(base.replace(h=PEER_HIDDEN, v=next(v for v in (v0, *odd_v) if v % worlds[0] == 0)))
        # the temperature on the logits, each output's gradient alone
        core += [base.replace(temperature=0.6, upstream="logp"), base.replace(temperature=1.5, upstream="entropy")]
        # softcap after the scale, on a confident head: one rank holds p ~ 1, the others ~ 0
        core.append(base.replace(softcap=30.0, logit_scale=0.5, logits="peaked", bias=True, world=worlds[-1]))
        # a teacher's top-K on the shards' first and last classes, masked rows of zeros
        core.append(base.replace(targets=3, placement="edges", upstream="zero_rows", world=worlds[-1]))
        # every logit 200 below zero (a max merged from 0), a prompt mask
        core.append(base.replace(bias=True, logits="shifted", ignore_pattern="leading_run"))
        # no counted token anywhere, flat rows, [B, T, H]
        core.append(base.replace(ignore_pattern="all", logits="flat", layout="3d", targets=3, world=worlds[-1]))
        # shapes: the other vocabularies (even, and an empty shard at the largest world), one token
        core += [base.replace(v=v, world=worlds[-1]) for v in odd_v]
        core += [base.replace(n=n, placement="edges") for n in odd_n]
        # the 2 x 2 meshes (suites/vp_ce/mesh.py): plain; a teacher's top-K on the shards' edges;
        # softcap and temperature with a bias (every option through a subgroup's merge)
        for world, mesh in MESHED[preset]:
            on = base.replace(world=world, mesh=mesh)
            core += [on, on.replace(targets=3, placement="edges", upstream="zero_rows"),
                     on.replace(softcap=30.0, temperature=0.6, bias=True)]  # fmt: skip
        # a sampler's mask through the head's bias (head_masks.py), outside the covering: scattered,
        # a middle run and the last rank's shard -inf (fp32 over 2 ranks, bf16 over the widest);
        # one finite logit (bf16, the widest: every shard but the first wholly -inf)
        core.append(base.replace(logits=BIAS_MASKED, bias=True, world=worlds[0 if dtype == "fp32" else -1]))
        if dtype != "fp32":
            core.append(base.replace(logits=BIAS_SINGLE, bias=True, world=worlds[-1]))
        cases += core
        if dtype != "fp32":  # the covering once, in fp32: the other dtypes get the core
            continue
        values = {name: tuple(v for v in axes[name].values_for(preset) if v not in KINDS) for name in COVERED}
        rows = all_pairs(values, covered=[c.params for c in core if c.logits not in KINDS])
        # 'shifted' logits come in through the bias (suites/flp/spec.py adds -200 to it): say so
        cases += [base.replace(**row, bias=row["logits"] == "shifted") for row in rows]
    return list(dict.fromkeys(cases))
