"""The `vp_flp` kernel (vocab-parallel per-token log-probs and entropy from a column-parallel
lm_head: the weight sharded on the vocab dim over a process group, the hidden states
replicated) as ligerbench checks it: spec, axes, grid, suites, providers and planted bugs.

    ligerbench verify --kernel vp_flp                    # ranks simulated in one process
    ligerbench verify --kernel vp_flp --nproc 2          # real ranks (gloo on CPU, NCCL on GPUs)

Every case is the global `flp` problem plus the world size its vocab is split over and where
the targets sit among the shards (suites/vp_flp/grid.py says which crossings and why). Slicing is
a provider axis (suites/vp_flp/providers.py): `ours` runs the quick cases in one vocabulary
slice per shard, `ours_3_slices` in 3. `bench --kernel vp_flp --nproc N` races it on real ranks
beside verl's and Liger's tensor-parallel heads (suites/vp_flp/bench.py).
"""

from __future__ import annotations

from ligerbench.registry import Registry, Suite
from ligerbench.suites.common.registration import kernel_spec
from ligerbench.suites.common.same_row import same_row_suites
from ligerbench.suites.flp import KERNEL as FLP
from ligerbench.suites.vp_ce import head_masks
from ligerbench.suites.vp_ce.mesh import BACKWARD_COLLECTIVE, procs_of, vocab_parallel_rows
from ligerbench.suites.vp_flp import axes, bench, mutants, providers, spec
from ligerbench.suites.vp_flp.grid import vp_flp_cases

# the kernel's own fields, spelled out as data; kernel_spec fills in what every kernel's spec.py names
# the same way (make_problem, reference, eager_in_dtype, textbook) and the numerical hints
KERNEL = kernel_spec(
    spec,
    name="vp_flp",
    description="vocab-parallel log-probs and entropy: weight [V, H] sharded on the vocab dim, hidden [N, H] "
    "replicated",
    run=spec.run_vp_flp,
    quantities=spec.QUANTITIES,
    grid=vp_flp_cases,
    axes=axes.AXES,
    ranks=procs_of,
    signature=spec.SIGNATURE,
    peer="gathered",
    bench=bench.SPEC,
    applies={"grad_bias": lambda case: bool(case.bias) or case.logits in ("shifted", *head_masks.KINDS)},
    # the same-row suites' rows (the global problem's, cut as flp cuts them) and, for those and the
    # rank-count suite, the RL ratio of logp over the counted tokens
    rows=vocab_parallel_rows(
        whole=("logp", "entropy", "grad_hidden"),
        sharded=("grad_weight", "grad_bias"),
        log_prob="logp",
        counted=lambda p: p.base.target != p.base.options["ignore_index"],
        base=FLP.rows,
    ),
    **BACKWARD_COLLECTIVE,
)

# the kernel's suites, spelled out as data: alike in shape across kernels, each its own quantities
SUITES = (
    Suite(name="correctness", kernel="vp_flp", description="every rank's logp and entropy vs the float64 reference "
          "of the global problem, and both float32", quantities=("logp", "entropy", "outputs_float32")),
    Suite(name="gradients", kernel="vp_flp", description="every rank's hidden gradient (summed over the group), and "
          "the weight and bias gradient shards put back together, vs the float64 reference",
          quantities=("grad_hidden", "grad_weight", "grad_bias")),
    Suite(name="contracts", kernel="vp_flp", description="every rank's hidden states, weight shard, bias shard and "
          "targets are unchanged", quantities=("input_unchanged",)),
)  # fmt: skip


# same-row cases (suites/common/same_row.py): one small, the same at full sizes
SAME_ROW_CASES = (
    "vp_flp/n12/v257/h16/bf16/t1.0/cap0.0/s1.0/k1/up-both/random/normal/w2",
    "vp_flp/n2048/v128256/h1024/bf16/t1.0/cap0.0/s1.0/k1/up-both/random/normal/w2",
)
# rank count (ligerbench/rowwise.py, Ranks): the same-row cases over 1 rank too, and a 4-rank case over 1 and 2
# (quick, and at the full grid's sizes)
RANK_COUNT_CASES = (
    *SAME_ROW_CASES,
    "vp_flp/n12/v257/h16/bf16/t1.0/cap0.0/s1.0/k1/up-both/random/normal/w4",
    "vp_flp/n2048/v128256/h1024/bf16/t1.0/cap0.0/s1.0/k1/up-both/random/normal/w4",
)
SAME_ROW = same_row_suites("vp_flp", SAME_ROW_CASES, SAME_ROW_CASES, rank_count=RANK_COUNT_CASES)


def register(registry: Registry) -> None:
    registry.add(KERNEL, *SUITES, *SAME_ROW, *providers.PROVIDERS, *bench.VARIANTS, *mutants.PROVIDERS)
