"""The `vp_ce` kernel (vocab-parallel cross entropy, logits sharded on the vocab dim over a
process group) as ligerbench checks it: spec, case grid, suites, providers and planted bugs.

    ligerbench verify --kernel vp_ce                      # ranks simulated in one process
    ligerbench verify --kernel vp_ce --nproc 2            # real ranks (gloo on CPU, NCCL on GPUs)
    ligerbench bench --kernel vp_ce --nproc 2             # timed on 2 GPUs beside the peers (vp_ce/bench.py)

Every case is the global `ce` problem plus the world size its vocab is split over; the grid
crosses, per world size and dtype:
  A  reduction x ignore pattern   (ignored on every rank: `all`; ignore_index equal to a valid class)
  B  reduction x option           (smoothing over the global vocab, z-loss on the global lse,
                                   class weights sharded with the vocab, token weights)
  C  targets on shard edges (first and last class of every shard) x options, x index_is_class
  D  confident and large logits (bug 6 across ranks; softcap saturation)
  E  shapes: V=501 is uneven over 2 ranks and V=500 even; V=2 over 3 ranks leaves one empty
     shard; one token
  F  four ranks and the 2 x 2 data x tensor parallel meshes, contiguous and strided (a core:
     suites/vp_ce/mesh.py `parallel_core`)
  G  the whole logits handed to every rank, gathered already: to be refused (CPU grid only: our
     kernel's check on a GPU is an async device assert, which ends the process)
  H  one rank's whole shard -inf in every row, as a sampler's mask leaves it (a naive local max
     gives -inf - -inf = NaN): each reduction, per world size and dtype
Targets on another rank than a given shard are in every case (random targets, world >= 2).
"""

from __future__ import annotations

from ligerbench.cases import IGNORE_PATTERNS, OPTIONS, Case
from ligerbench.registry import Registry, Suite
from ligerbench.suites.ce import KERNEL as CE
from ligerbench.suites.ce import has_z_loss
from ligerbench.suites.ce.grid import REDUCTION_VARIANTS
from ligerbench.suites.common.registration import kernel_spec
from ligerbench.suites.common.same_row import same_row_suites
from ligerbench.suites.vp_ce import axes, bench, mutants, providers, spec
from ligerbench.suites.vp_ce.mesh import parallel_core, procs_of, vocab_parallel_rows

SIZES = {
    # preset: (tokens, vocab, world sizes, odd shapes (tokens, vocab)); CPU shapes stay tiny so
    # the real 2-rank gloo run of CI is fast
    "quick": (16, 501, (2, 3), ((16, 500), (16, 2), (1, 501))),
    "full": (1024, 32001, (2, 4, 8), ((1024, 32000), (512, 5), (1, 128256), (2048, 128256))),
}
DTYPES = {"cpu": ("fp32", "bf16"), "cuda": ("fp32", "bf16", "fp16")}


def vp_ce_cases(preset: str, device_type: str) -> list[Case]:
    if preset not in SIZES:
        raise ValueError(f"no vp_ce grid for preset {preset!r}; expected one of {tuple(SIZES)}")
    n, v, worlds, shapes = SIZES[preset]
    cases: list[Case] = []
    for world in worlds:
        for dtype in DTYPES[device_type]:
            base = axes.case(n=n, v=v, dtype=dtype, world=world)
            for reduction, upstream in REDUCTION_VARIANTS:
                red = base.replace(reduction=reduction, upstream=upstream)
                cases += [red.replace(ignore_pattern=p) for p in IGNORE_PATTERNS]  # A
                cases += [red.replace(option=o) for o in OPTIONS]  # B
                edges = red.replace(targets="edges")  # C
                cases += [edges.replace(option=o) for o in ("plain", "label_smoothing", "class_weight", "all")]
                cases.append(edges.replace(ignore_pattern="index_is_class"))
                cases += [red.replace(logits="confident", option=o) for o in ("plain", "all")]  # D
                cases.append(red.replace(logits="large", option="softcap"))
                cases += [red.replace(n=sn, v=sv) for sn, sv in shapes]  # E
                cases.append(red.replace(logits=axes.SHARD_MASKED))  # H
    for dtype in DTYPES[device_type]:  # F
        base = axes.case(n=n, v=v, dtype=dtype, world=2)
        cases += parallel_core(base, preset, edges={"targets": "edges"}, vocabs=tuple(sv for _, sv in shapes[:2]))
        if device_type == "cpu":  # G: where the refusal raises (on a GPU it is an async device assert)
            mean = base.replace(reduction="mean", upstream="ones")
            cases += [mean.replace(handed="gathered"), mean.replace(handed="gathered", world=4, option="all")]
    return list(dict.fromkeys(cases))


def handed_gathered(case: Case) -> bool:
    return case.handed == "gathered"


# the kernel's own fields, spelled out as data; kernel_spec fills in what every kernel's spec.py names
# the same way (make_problem, reference, eager_in_dtype, textbook) and the numerical hints
KERNEL = kernel_spec(
    spec,
    name="vp_ce",
    description="vocab-parallel cross entropy: logits [N, V] sharded on the vocab dim over a process group",
    run=spec.run_vp,
    quantities=("loss", "z_loss", "grad_logits", "input_unchanged", "refused"),
    grid=vp_ce_cases,
    axes=axes.AXES,
    ranks=procs_of,
    signature=spec.SIGNATURE,
    peer="gathered",
    bench=bench.SPEC,
    rows=vocab_parallel_rows(
        whole=("loss", "z_loss"), sharded=("grad_logits",), base=CE.rows, sharded_rows=("grad_logits",)
    ),
    applies={
        "z_loss": lambda c: has_z_loss(c) and not handed_gathered(c),
        "loss": lambda c: not handed_gathered(c),
        "grad_logits": lambda c: not handed_gathered(c),
        "refused": handed_gathered,
    },
)

# the kernel's suites, spelled out as data: alike in shape across kernels, each its own quantities
SUITES = (
    Suite(
        name="correctness",
        kernel="vp_ce",
        description="every rank's loss (and separately reported z-loss) vs the float64 reference of the global problem",
        quantities=("loss", "z_loss"),
    ),
    Suite(
        name="gradients",
        kernel="vp_ce",
        description="the gradient shards, put back together, vs the float64 reference's gradient of the logits",
        quantities=("grad_logits",),
    ),
    Suite(
        name="contracts",
        kernel="vp_ce",
        description="every rank's logits shard is unchanged unless the provider declares it writes it; "
        "logits handed gathered already are refused on every rank",
        quantities=("input_unchanged", "refused"),
    ),
)


# same-row cases (suites/common/same_row.py): one small, the same at full sizes
SAME_ROW_CASES = (
    "vp_ce/n16/v501/bf16/none/up-ones/none/plain/normal/w2/targets-random",
    "vp_ce/n1024/v32001/bf16/none/up-ones/none/plain/normal/w2/targets-random",
)
# an even vocabulary too, so that PyTorch's loss_parallel (shards as torch.chunk makes them) is measured
EVEN_CASES = (
    "vp_ce/n16/v500/bf16/none/up-ones/random_10/plain/normal/w2/targets-random",
    "vp_ce/n1024/v32000/bf16/none/up-ones/random_10/plain/normal/w2/targets-random",
)
# rank count (ligerbench/rowwise.py, Ranks): the same-row cases over 1 rank too, and a 4-rank case over 1 and 2
# (quick, and at the full grid's sizes)
RANK_COUNT_CASES = (
    *SAME_ROW_CASES,
    "vp_ce/n16/v501/bf16/none/up-random/leading_run/plain/normal/w4/targets-random",
    "vp_ce/n1024/v32001/bf16/none/up-random/leading_run/plain/normal/w4/targets-random",
)
SAME_ROW = same_row_suites("vp_ce", SAME_ROW_CASES + EVEN_CASES, SAME_ROW_CASES + EVEN_CASES,
                           rank_count=RANK_COUNT_CASES)  # fmt: skip


def register(registry: Registry) -> None:
    registry.add(KERNEL, *SUITES, *SAME_ROW, *providers.PROVIDERS, *bench.VARIANTS, *mutants.PROVIDERS)
