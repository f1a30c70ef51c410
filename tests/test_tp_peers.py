"""The peers' tensor-parallel heads as `vp_flp` providers, on CPU though both refuse it.

verl's (`verl_fused_tp`, suites/peers/verl.py): the adapter's two duties, each once missed.
verl's Triton kernels need CUDA, so verl's head is stood in for by its semantics written in
PyTorch (`_verl_head`: what verl/utils/kernel/kernels.py does with `dist_process_group`);
docs/repro/verl_fused_vocab_parallel_cpu.py checks those semantics against verl's own kernels on
2 gloo ranks (CPU, Triton's interpreter).

Liger's (`liger_tp`, suites/peers/liger.py): its PyTorch path, with its CUDA-only input check
lifted, on a one-rank gloo group: the adapter's signs, shapes and masking against float64."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from ligerbench import tolerance
from ligerbench.builtin import default_registry
from ligerbench.cases import DTYPES
from ligerbench.kernels.vocab_parallel_cross_entropy import all_gather, group_rank_size
from ligerbench.suites.peers import verl
from ligerbench.suites.vp_flp.axes import case as vp_flp_case

REG = default_registry(plugins=False)
SPEC = REG.kernels["vp_flp"]


def _verl_head(hidden, weight, labels, temperature, reduction, dist_process_group=None):
    """verl 0.9.1's `linear_cross_entropy(..., "none", dist_process_group)` in PyTorch: None is a
    world of one (this weight is the whole vocabulary); under a group, rank r's rows are classes
    [r * V_local, (r + 1) * V_local) and the hidden gradient is this shard's part alone."""
    rank, world = (0, 1) if dist_process_group is None else group_rank_size(dist_process_group)
    h = hidden.reshape(-1, hidden.shape[-1])
    shards = all_gather(weight.detach().contiguous(), dist_process_group) if world > 1 else weight.detach()[None]
    z = torch.cat([h @ weight.t() if r == rank else h.detach() @ shards[r].t() for r in range(world)], -1)
    lp = torch.log_softmax(z.float() / temperature, -1)
    return lp.gather(-1, labels.reshape(-1, 1)).squeeze(-1), -(lp.exp() * lp).sum(-1)


@pytest.fixture
def verl_head(monkeypatch):
    """The adapter with `_verl_head` in place of verl's kernel; every call's group recorded."""
    try:
        fused = verl.load("verl.utils.kernel.linear_cross_entropy")
    except ImportError as exc:
        pytest.skip(str(exc))
    groups = []

    def head(*args):
        groups.append(args[-1])
        return _verl_head(*args)

    monkeypatch.setattr(fused, "linear_cross_entropy", head)
    return verl._vocab_parallel_flp(), groups


def test_every_rank_gets_the_whole_hidden_gradient(verl_head):
    """verl leaves each rank its shard's part of dL/dh (for a TP layer to sum); vp_flp's contract
    wants the sum on every rank. Without the adapter's sum the hidden gradient is 50-100% off."""
    call, _ = verl_head
    _assert_within_limits(call, vp_flp_case(n=8, v=36, h=8, world=2, temperature=0.6, upstream="both",
                                            placement="edges"))  # fmt: skip


def _assert_within_limits(call, case) -> None:
    problem = SPEC.make_problem(case, 0, torch.device("cpu"))
    ref, eager, got = SPEC.reference(problem), SPEC.eager(problem), SPEC.run(call, problem)
    for q in ("logp", "entropy", "grad_hidden", "grad_weight"):
        err = tolerance.rel_error(got.values[q], ref.values[q])
        limit = tolerance.limit_for(tolerance.rel_error(eager.values[q], ref.values[q]), DTYPES[case.dtype])
        assert err <= limit, f"{q}: {err:.3g} > {limit:.3g}"


@pytest.fixture
def one_rank(tmp_path):
    """A torch.distributed world of one gloo rank, as `verify --nproc 1` would hold."""
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_verl_is_handed_the_default_group_not_none(verl_head, one_rank):
    """Under torch.distributed the harness passes group=None for the default group; verl reads
    None as no tensor parallelism (each rank's softmax over its shard alone: entropy ln(world)
    short, NaN log-probs where a target sat on another rank, as the first 2-GPU run showed)."""
    call, groups = verl_head
    h, w = torch.randn(4, 8, requires_grad=True), torch.randn(6, 8, requires_grad=True)
    call(h, w, torch.tensor([0, 5, -100, 2]), temperature=1.0, group=None, vocab_start=0)
    assert groups == [dist.group.WORLD]


def test_liger_tp_adapter_meets_the_float64_truth(monkeypatch, one_rank):
    """Masked rows, a temperature, a [B, T, H] hidden and the entropy's gradient: -NLL is the
    log-prob, the entropy comes back per row, both zero on ignored rows."""
    functional = pytest.importorskip("liger_kernel.ops.fused_linear_scaled_cross_entropy")
    monkeypatch.setattr(functional, "_validate_tp_inputs", lambda *a: None)  # its one CPU refusal
    call = REG.provider("vp_flp", "liger_tp").load()
    case = vp_flp_case(n=8, v=36, h=8, world=1, temperature=0.6, upstream="both", layout="3d",
                       ignore_pattern="leading_run")  # fmt: skip
    _assert_within_limits(call, case)
