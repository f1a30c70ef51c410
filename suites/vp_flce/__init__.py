"""The `vp_flce` kernel (vocab-parallel fused linear + cross entropy: the lm_head weight sharded on
the vocab dim over a process group, the hidden states replicated) as ligerbench checks it: spec,
case grid, suites, providers and planted bugs.

    ligerbench verify --kernel vp_flce                    # ranks simulated in one process
    ligerbench verify --kernel vp_flce --nproc 2          # real ranks (gloo on CPU, NCCL on GPUs)

Every case is the global `flce` problem plus the world size its vocab is split over; per world
size and dtype the grid crosses:
  A  ignore pattern x {none with a random upstream (the gradients formed in backward, dh reduced
     there), mean}: ignored on every rank (`all`), ignore_index equal to a valid class
  B  option x {sum with a random upstream scalar, none with a random upstream}, half with bias:
     smoothing over the global vocab, z-loss on the global lse, class weights sharded with the
     vocab (and the mean's class-weighted denominator), token weights
  C  targets on shard edges (first and last class of every shard) x options, and x index_is_class
  D  confident hidden states (docs/bugs.md, bug 6 across ranks) and large logits under softcap
  E  shapes: V=256 (even over 2 ranks; V=257 is uneven over 2 and 3), V=2 over 3 ranks leaves an
     empty shard, one token, and hidden states [B, T, H]
  F  none with the ones of `loss.sum().backward()`: a 1 expanded over the rows (docs/bugs.md, bug 8)
  G  four ranks and the 2 x 2 data x tensor parallel meshes, contiguous and strided (a core:
     suites/vp_ce/mesh.py `parallel_core`)
  H  a sampler's mask through the head's bias (suites/vp_ce/head_masks.py): banned tokens, a
     wholly -inf middle run and the last rank's shard (none); one finite logit, every shard but
     the first wholly -inf (mean, the widest world); each dtype
Chunking is a provider axis (suites/vp_flce/providers.py): `ours` runs the quick cases in one chunk,
`ours_3_chunks` and `ours_fp32_accum` in 3 chunks (a statistics gather each, the last one
partial). Targets on another rank than a given shard are in every case.
"""

from __future__ import annotations

from ligerbench.cases import IGNORE_PATTERNS, OPTIONS, Case
from ligerbench.registry import Registry, Suite
from ligerbench.suites.ce import has_z_loss
from ligerbench.suites.common.registration import kernel_spec
from ligerbench.suites.common.same_row import same_row_suites
from ligerbench.suites.flce import KERNEL as FLCE
from ligerbench.suites.vp_ce import head_masks
from ligerbench.suites.vp_ce.mesh import BACKWARD_COLLECTIVE, parallel_core, procs_of, vocab_parallel_rows
from ligerbench.suites.vp_flce import axes, bench, mutants, providers, spec

SIZES = {
    # preset: (tokens, vocab, hidden, world sizes, odd shapes (tokens, vocab, hidden)); CPU shapes
    # stay tiny so the real 2-rank gloo run of CI is fast
    "quick": (12, 257, 16, (2, 3), ((12, 256, 16), (12, 2, 8), (1, 257, 16))),
    "full": (
        4096,
        32001,
        1024,
        (2, 4, 8),
        ((4096, 32000, 1024), (512, 5, 64), (1, 128256, 1024), (2048, 128256, 4096)),
    ),
}
DTYPES = {"cpu": ("fp32", "bf16"), "cuda": ("fp32", "bf16", "fp16")}
NONE_RANDOM, MEAN_ONES, SUM_RANDOM = ("none", "random"), ("mean", "ones"), ("sum", "random")
NONE_ONES = ("none", "ones")
MORE = (NONE_ONES, ("mean", "accum"), ("sum", "grad_scaler"))  # full preset only


def vp_flce_cases(preset: str, device_type: str) -> list[Case]:
    if preset not in SIZES:
        raise ValueError(f"no vp_flce grid for preset {preset!r}; expected one of {tuple(SIZES)}")
    n, v, h, worlds, shapes = SIZES[preset]
    dense = preset != "quick"
    cases: list[Case] = []
    for world in worlds:
        for dtype in DTYPES[device_type]:
            base = axes.case(n=n, v=v, h=h, dtype=dtype, world=world)

            def red(variant, _base=base):
                return _base.replace(reduction=variant[0], upstream=variant[1])

            extra = MORE if dense and not (dtype == "fp16") else ()
            for variant in (NONE_RANDOM, MEAN_ONES, *extra):  # A
                cases += [red(variant).replace(ignore_pattern=p) for p in IGNORE_PATTERNS]
            for i, option in enumerate(OPTIONS):  # B
                for variant in (SUM_RANDOM, NONE_RANDOM):
                    cases.append(red(variant).replace(option=option, bias=(i % 2 == 1)))
            for variant in (SUM_RANDOM, MEAN_ONES):  # C
                edges = red(variant).replace(targets="edges")
                cases += [edges.replace(option=o, bias=o == "all") for o in ("plain", "label_smoothing", "all")]
                cases.append(edges.replace(ignore_pattern="index_is_class"))
            cases.append(red(MEAN_ONES).replace(option="class_weight", targets="edges"))
            for variant in (MEAN_ONES, NONE_RANDOM):  # D
                cases.append(red(variant).replace(logits="confident", option="all", bias=True))
                cases.append(red(variant).replace(logits="large", option="softcap"))
            for i, (sn, sv, sh) in enumerate(shapes):  # E
                variant = (SUM_RANDOM, NONE_RANDOM, MEAN_ONES)[i % 3]
                cases.append(red(variant).replace(n=sn, v=sv, h=sh, option="all", bias=True))
                cases.append(red(variant).replace(n=sn, v=sv, h=sh))
            cases.append(red(NONE_RANDOM).replace(layout="3d", option="all", bias=True))
            cases.append(red(SUM_RANDOM).replace(layout="3d"))
            cases.append(red(NONE_ONES))  # F: loss.sum().backward()'s expanded ones (full: A's MORE)
    for dtype in DTYPES[device_type]:  # G
        base = axes.case(n=n, v=v, h=h, dtype=dtype, world=2)
        cases += parallel_core(base, preset, edges={"targets": "edges"}, vocabs=(shapes[0][1], shapes[1][1]))
    for dtype in DTYPES[device_type]:  # H
        base = axes.case(n=n, v=v, h=h, dtype=dtype, world=2, bias=True)
        cases.append(base.replace(reduction="none", upstream="random", logits=head_masks.BIAS_MASKED))
        cases.append(base.replace(reduction="mean", upstream="ones", logits=head_masks.BIAS_SINGLE, world=worlds[-1]))
    return list(dict.fromkeys(cases))


# the kernel's own fields, spelled out as data; kernel_spec fills in what every kernel's spec.py names
# the same way (make_problem, reference, eager_in_dtype, textbook) and the numerical hints
KERNEL = kernel_spec(
    spec,
    name="vp_flce",
    description="vocab-parallel fused linear + cross entropy: weight [V, H] sharded on the vocab dim, "
    "hidden [N, H] replicated",
    run=spec.run_vp_flce,
    quantities=spec.QUANTITIES,
    grid=vp_flce_cases,
    axes=axes.AXES,
    ranks=procs_of,
    signature=spec.SIGNATURE,
    peer="gathered",
    applies={"z_loss": has_z_loss, "grad_bias": lambda case: case.bias or case.logits in head_masks.KINDS},
    bench=bench.SPEC,
    rows=vocab_parallel_rows(
        whole=("loss", "z_loss", "grad_hidden"), sharded=("grad_weight", "grad_bias"), base=FLCE.rows
    ),
    **BACKWARD_COLLECTIVE,
)

# the kernel's suites, spelled out as data: alike in shape across kernels, each its own quantities
SUITES = (
    Suite(
        name="correctness",
        kernel="vp_flce",
        description="every rank's loss (and separately reported z-loss) vs the float64 reference of the global problem",
        quantities=("loss", "z_loss"),
    ),
    Suite(
        name="gradients",
        kernel="vp_flce",
        description="every rank's hidden gradient (reduced over the group), and the weight and bias gradient "
        "shards put back together, vs the float64 reference",
        quantities=("grad_hidden", "grad_weight", "grad_bias"),
    ),
    Suite(
        name="contracts",
        kernel="vp_flce",
        description="every rank's hidden states, weight shard and bias shard are unchanged unless the provider "
        "declares it writes them",
        quantities=("input_unchanged",),
    ),
)


# same-row cases (suites/common/same_row.py): one small, the same at full sizes
SAME_ROW_CASES = (
    "vp_flce/n12/v257/h16/bf16/none/up-random/none/plain/normal/w2/targets-random",
    "vp_flce/n4096/v32001/h1024/bf16/none/up-random/none/plain/normal/w2/targets-random",
)
# rank count (ligerbench/rowwise.py, Ranks): the same-row cases over 1 rank too, and a 4-rank case over 1 and 2
# (quick, and at the full grid's sizes)
RANK_COUNT_CASES = (
    *SAME_ROW_CASES,
    "vp_flce/n12/v257/h16/bf16/none/up-random/leading_run/plain/normal/w4/targets-random",
    "vp_flce/n4096/v32001/h1024/bf16/none/up-random/leading_run/plain/normal/w4/targets-random",
)
SAME_ROW = same_row_suites("vp_flce", SAME_ROW_CASES, SAME_ROW_CASES, rank_count=RANK_COUNT_CASES)


def register(registry: Registry) -> None:
    registry.add(KERNEL, *SUITES, *SAME_ROW, *providers.PROVIDERS, *bench.VARIANTS, *mutants.PROVIDERS)
