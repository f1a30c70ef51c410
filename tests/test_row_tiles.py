"""The row kernels in both their forms (kernels/row_tiles.py): ROWS 0, one row a program, the form
a GPU compiles; and tiles of rows, the form the interpreter runs. Run here both ways under the
interpreter, they must give the same bits, and a row its own answer whatever rows share its tile
or its batch."""

from __future__ import annotations

import pytest
import torch

from ligerbench.kernels import cross_entropy as ce
from ligerbench.kernels import log_probs as lp
from ligerbench.kernels import row_tiles
from ligerbench.kernels import shifted_logits as sl
from ligerbench.kernels.fp32_products import grad_over_logits, grad_under_logits

pytestmark = pytest.mark.interpreter

MODULES = (ce, lp, sl)


@pytest.fixture
def one_row_a_program(monkeypatch):
    """Every row kernel in its GPU form (ROWS 0) for the test's duration."""

    def use():
        for module in MODULES:
            monkeypatch.setattr(module, "rows_per_program", lambda *args: 0)

    return use


def _same(a, b):
    return all(torch.equal(x.float().nan_to_num(123.0), y.float().nan_to_num(123.0)) for x, y in zip(a, b, strict=True))


def test_the_interpreter_runs_tiles_and_a_gpu_one_row():
    assert row_tiles.rows_per_program(37, 1024, torch.device("cpu")) == 16
    assert row_tiles.rows_per_program(3, 1024, torch.device("cpu")) == 4
    assert row_tiles.rows_per_program(37, 4096, torch.device("cpu")) == 8
    assert row_tiles.rows_per_program(37, 1 << 20, torch.device("cpu")) == 1
    assert row_tiles.rows_per_program(37, 1024, torch.device("cuda")) == 0
    assert row_tiles.programs(37, 16) == (3,) and row_tiles.programs(37, 0) == (37,)


def _ce_run(layout: str):
    torch.manual_seed(0)
    n, v = 37, 300
    x = 4 * torch.randn(n, v)
    t = torch.randint(0, v, (n,))
    t[::4] = -100
    t[5] = v + 1  # out of range: a NaN row
    only = torch.where(torch.arange(n) % 3 == 0, 1.0, 2.0)
    if layout == "over":  # a bf16 gradient over the float32 logits
        g = grad_over_logits(x, torch.bfloat16)
    elif layout == "in_place":
        x = x.bfloat16()
        g = x
    else:
        x = x.half()
        g = torch.full((n, v), 7.0, dtype=torch.half)
    loss, zloss, lse = ce.cross_entropy_rows(
        x, t, grad_out=g, denom=torch.tensor(5.0), weight=torch.rand(v), label_smoothing=0.1, z_loss_scale=1e-3,
        only_where_not_one=only if layout == "in_place" else None,
    )  # fmt: skip
    # only_where_not_one leaves the other rows' outputs as they are (here uninitialised), and an
    # ignored row's with them
    keep = (only != 1.0) & (t != -100) if layout == "in_place" else torch.ones(n, dtype=torch.bool)
    up = torch.randn(n)
    up[::2] = 1.0
    first = g.clone()
    ce.scale_rows_(g, up)
    return loss[keep], zloss[keep], lse[keep], first, g


@pytest.mark.parametrize("layout", ["own", "in_place", "over"])
def test_cross_entropy_same_bits_in_both_forms(layout, one_row_a_program):
    tiles = _ce_run(layout)
    one_row_a_program()
    assert _same(tiles, _ce_run(layout))


def _lp_run(k: int, sliced: bool, under: bool):
    torch.manual_seed(1)
    n, v = 29, 257
    x = 3 * torch.randn(n, v)
    # a row's max met again in a later block (with the row's 64-column blocks below): no rise, a
    # tie; and a rise to a max that a third block ties
    x[1, [10, 200]] = 12.0
    x[2, [5, 150, 250]] = torch.tensor([11.0, 12.0, 12.0])
    t = torch.randint(0, v, (n, k))
    t[::3, 0] = -100
    t[::5] = -100  # rows with every target ignored
    opts = dict(temperature=0.7, softcap=20.0, logit_scale=1.0, ignore_index=-100)
    if sliced:
        out = (torch.empty(n, k), torch.empty(n), torch.empty(n, lp.N_STATS))
        zt = torch.full((n, k), float("nan"))
        for c0, first, last in ((0, True, False), (100, False, False), (200, False, True)):
            c1 = min(c0 + 100, v)
            lp.log_probs_rows(x[:, c0:c1], t, **opts, out=out, slices=(c0, first, last, zt))
        logp, ent, stats = out
    else:
        logp, ent, stats = lp.log_probs_rows(x, t, **opts)
    grad = grad_under_logits(x, torch.bfloat16) if under else torch.empty(n, v)
    lp.log_probs_grad_rows(x, t, stats, torch.randn(n, k), torch.randn(n), grad, **opts)
    return logp, ent, stats, grad.clone()


@pytest.mark.parametrize("k, sliced, under", [(1, False, False), (3, False, True), (2, True, False)])
@pytest.mark.parametrize("block", [None, 64])
def test_log_probs_same_bits_in_both_forms(k, sliced, under, block, one_row_a_program, monkeypatch):
    if block:  # rows over several blocks: the forward's running max, rises and ties between blocks
        monkeypatch.setattr(ce, "_MAX_BLOCK_V", block)
    tiles = _lp_run(k, sliced, under)
    one_row_a_program()
    assert _same(tiles, _lp_run(k, sliced, under))


def _packed_run():
    torch.manual_seed(2)
    n, v = 24, 130
    x = 5 * torch.randn(n, v)
    t = torch.randint(0, v, (n,))
    t[::4] = -100
    stats = sl.Stats(n, v, x.device)
    stats.start(n)
    y = torch.empty(n, v, dtype=torch.float16)
    width = sl.slice_width(v, x.device)
    for c0 in range(0, v, width):
        sl.pack_slice(x[:, c0 : c0 + width].contiguous(), y, t, stats, c0)
    packed = (y.clone(), stats.m.clone(), stats.s.clone(), stats.xt.clone())
    loss, lse = sl.rows_loss_grad(
        y, y.view(torch.bfloat16), t, stats, ignore_index=-100, class_weight=None, token_weight=torch.rand(n),
        denom=torch.tensor(3.0),
    )  # fmt: skip
    return packed + (loss, lse, y)


def test_the_two_byte_chunk_same_bits_in_both_forms(one_row_a_program):
    tiles = _packed_run()
    one_row_a_program()
    assert _same(tiles, _packed_run())


def test_a_row_gets_its_answer_whatever_its_batch():
    """Row i alone, and row i among 37 others (other tiles, other neighbours): the same bits."""
    torch.manual_seed(3)
    n, v = 37, 300
    x = (4 * torch.randn(n, v)).bfloat16()
    t = torch.randint(0, v, (n,))
    t[::4] = -100
    loss, _, lse = ce.cross_entropy_rows(x, t, grad_out=(g := torch.empty_like(x)))
    logp, ent, _ = lp.log_probs_rows(x, t[:, None], temperature=0.9, softcap=None, logit_scale=1.0, ignore_index=-100)
    for i in (0, 17, 36):
        one_loss, _, one_lse = ce.cross_entropy_rows(
            x[i : i + 1], t[i : i + 1], grad_out=(one_g := torch.empty_like(x[:1]))
        )
        one_logp, one_ent, _ = lp.log_probs_rows(
            x[i : i + 1], t[i : i + 1, None], temperature=0.9, softcap=None, logit_scale=1.0, ignore_index=-100
        )
        assert _same((loss[i : i + 1], lse[i : i + 1], g[i : i + 1], logp[i], ent[i : i + 1]),
                     (one_loss, one_lse, one_g, one_logp[0], one_ent))  # fmt: skip
