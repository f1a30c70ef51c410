"""flce's 2-byte chunk store (store="shifted16", kernels/shifted_logits.py): what it refuses, what
"auto" gives it, and that it answers as the float32 chunks do, on CPU shapes that cut each row
into several blocks and slices with a partial last one of each (32-column blocks, 64-column
slices under the interpreter: V=257 is 5 slices, the last one column wide; on a GPU, 4096 and
16384: V=36865 is 3 slices, the last 4097 wide, its last block one column)."""

import math

import pytest
import torch

from ligerbench import tolerance
from ligerbench.kernels import shifted_logits
from ligerbench.kernels.fused_linear_cross_entropy import fused_linear_cross_entropy, resolve_split_and_store

CPU = torch.device("cpu")


def test_the_store_refuses_what_it_does_not_compute():
    h, w, t = torch.zeros(4, 8, dtype=torch.float16), torch.zeros(300, 8, dtype=torch.float16), torch.zeros(4).long()
    with pytest.raises(ValueError, match="bfloat16 inputs"):
        fused_linear_cross_entropy(h, w, t, store="shifted16")
    hb, wb = h.bfloat16(), w.bfloat16()
    for opts in ({"label_smoothing": 0.1}, {"softcap": 30.0}, {"z_loss_scale": 1e-4}):
        with pytest.raises(ValueError, match="without label smoothing, softcap or z-loss"):
            fused_linear_cross_entropy(hb, wb, t, store="shifted16", **opts)
    with pytest.raises(ValueError, match="store must be"):
        fused_linear_cross_entropy(hb, wb, t, store="bf16")


def test_auto_takes_it_for_plain_bf16_where_it_buys_a_larger_chunk():
    def store(v, dtype=torch.bfloat16, **opts):
        return resolve_split_and_store(
            "tokens", "auto", 72, v, dtype, CPU, opts.get("label_smoothing", 0.0), opts.get("softcap"),
            opts.get("z_loss_scale", 0.0), 2**20, None,
        )[1]  # fmt: skip

    assert store(257) == store(256) == "shifted16"  # the CPU grids' vocabularies: 2 V + 4 * 64 < 4 V
    assert store(100) == "float32"  # 2 * 100 + 4 * 64 > 4 * 100: two bytes buy nothing
    assert store(257, torch.float16) == store(257, torch.float32) == "float32"
    assert store(257, softcap=30.0) == store(257, label_smoothing=0.1) == store(257, z_loss_scale=1e-3) == "float32"
    assert shifted_logits.chunk_row_bytes(257, CPU) == 2 * 257 + 4 * 64


def _vocab(device) -> int:
    return 257 if device == "cpu" else 2 * 16384 + 4097


def _problem(n, h, v, seed, confident, device):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(n, h, generator=g)
    weight = torch.randn(v, h, generator=g) / math.sqrt(h)
    target = torch.randint(0, v, (n,), generator=g)
    if confident:  # rows whose target holds nearly all the mass: the target's weight row grows
        weight[target] += 3.0 * hidden / hidden.norm(dim=1, keepdim=True)
    target[::5] = -100
    cw = torch.rand(v, generator=g) + 0.5
    tw = torch.rand(n, generator=g) + 0.5
    return [t.to(device) for t in (hidden.bfloat16(), weight.bfloat16(), target, cw, tw)]


def _run(hidden, weight, target, up, **kw):
    leaves = [t.clone().requires_grad_() for t in (hidden, weight)]
    loss = fused_linear_cross_entropy(*leaves, target, **kw)
    loss.backward(up)
    return [loss.detach()] + [t.grad for t in leaves]


@pytest.mark.parametrize("confident", [False, True])
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_it_answers_as_the_float32_chunks_do(device, reduction, confident):
    hidden, weight, target, cw, tw = _problem(37, 16, _vocab(device), 7 + confident, confident, device)
    up = (torch.rand(37) + 0.5 if reduction == "none" else torch.tensor(0.7)).to(device)
    kw = dict(class_weight=cw, token_weight=tw, reduction=reduction, chunk_tokens=8)  # 5 chunks, the last partial
    mine = _run(hidden, weight, target, up, store="shifted16", **kw)
    theirs = _run(hidden, weight, target, up, store="float32", **kw)
    h64, w64 = hidden.double().requires_grad_(), weight.double().requires_grad_()
    counted = target != -100
    safe = torch.where(counted, target, 0)
    rows = torch.nn.functional.cross_entropy(h64 @ w64.t(), safe, reduction="none") * cw.double()[safe]
    rows = rows * tw.double() * counted
    truth = (
        rows if reduction == "none" else rows.sum() / (1 if reduction == "sum" else (cw.double()[safe] * counted).sum())
    )
    truth.backward(up.double())
    # the loss comes from float32 block statistics either way: the same to float32 rounding
    assert tolerance.rel_error(mine[0], theirs[0].double()) < 1e-6
    for name, a, b, ref in zip(
        ("loss", "grad_hidden", "grad_weight"), mine, theirs, (truth, h64.grad, w64.grad), strict=True
    ):
        err, float32_err = tolerance.rel_error(a, ref), tolerance.rel_error(b, ref)
        limit = tolerance.FACTOR * float32_err + tolerance.FLOOR[torch.bfloat16]
        assert err <= limit, f"{name}: {err:.3g} against the float32 chunks' {float32_err:.3g} (limit {limit:.3g})"


def test_ignored_rows_give_nothing_and_a_target_out_of_range_gives_nan(device):
    v = _vocab(device)
    hidden, weight, target, _, _ = _problem(12, 8, v, 3, False, device)
    target[4] = v  # past the vocabulary, not ignore_index
    up = torch.ones(12, device=device)
    loss, gh, _ = _run(hidden, weight, target, up, reduction="none", check_targets=False, store="shifted16")
    assert torch.isnan(loss[4]) and torch.isnan(gh[4]).all()
    ignored = target == -100
    assert (loss[ignored] == 0).all() and (gh[ignored] == 0).all()
    rest = ~ignored
    rest[4] = False
    assert torch.isfinite(loss[rest]).all() and (loss[rest] > 0).all() and torch.isfinite(gh[rest]).all()
