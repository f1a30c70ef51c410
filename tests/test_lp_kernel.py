"""kernels/log_probs.py against the float64 truth, axis by axis (rule: tests/lp_checks.py).

Sizes: N = 8 rows (Triton's interpreter costs ~20 ms per row, block and pass); V = 257 is
prime, so every block has masked lanes. The `small_blocks` fixture cuts blocks to 128 columns
where a test needs a row to span several blocks (the running max's rises and ties between
blocks: the GPU's 2048-wide blocks hold every CPU-sized row in one)."""

import pytest
import torch
from lp_checks import IGNORE, OPTION_GRID, UPSTREAM_GRID, check, make_target, make_upstream, reference

from ligerbench.kernels import cross_entropy as ce_module
from ligerbench.kernels import log_probs as lp_module
from ligerbench.kernels.log_probs import log_probs

N, V = 8, 257
PAD_LEAD = 130  # -inf columns at the start of a padded row: more than one 128-column block


@pytest.fixture
def small_blocks(monkeypatch):
    monkeypatch.setattr(ce_module, "_MAX_BLOCK_V", 128)


def _logits(kind: str, rows: tuple[int, ...], v: int, target, gen) -> torch.Tensor:
    x = torch.randn(rows + (v,), generator=gen) * 2
    if kind == "peaked":  # confident rows: the (first) target 30 above the rest, 1 - p ~ 1e-10
        t = target if target.dim() == len(rows) else target[..., 0]
        x.scatter_(-1, t.clamp(min=0).unsqueeze(-1), 30.0)
    elif kind == "flat":  # near-uniform rows, and one row of exact ties across every block
        x = x * 1e-3
        x.view(-1, v)[0] = 0.25
    elif kind == "up200":  # |x| large: z - lse must not round lse first
        x = x + 200.0
    elif kind == "down200":  # every logit far below 0: a max started at 0 underflows (verl #7439)
        x = x - 200.0
    elif kind == "neg_inf_padding":  # a padded vocabulary: no mass, no gradient (unsloth #10616)
        x[..., v - 5 :] = float("-inf")
        x[..., :PAD_LEAD] = float("-inf")  # a whole first block of -inf: the max is -inf after it
    elif kind != "normal":
        raise ValueError(kind)
    return x


def _case(device, *, k=None, pattern="random", upstream="both", kind="normal", layout="2d", dtype=torch.float32,
          v=V, seed=0, **opts):  # fmt: skip
    """Build one case and assert it within the rule (lp_checks.check: logp, entropy and every
    gradient against float64, float32 outputs, finite gradients); returns our (logp, entropy,
    [grad of the stored logits]). Tests that only call this still assert through it."""
    gen = torch.Generator().manual_seed(seed)
    rows = (2, N // 2) if layout == "3d" else (N,)
    if kind == "neg_inf_padding":  # targets are real tokens
        target = make_target(rows, k, v - 5 - PAD_LEAD, pattern, gen)
        target = torch.where(target == IGNORE, target, target + PAD_LEAD)
    else:
        target = make_target(rows, k, v, pattern, gen)
    x = _logits(kind, rows, v, target, gen).to(device=device, dtype=dtype)
    target = target.to(device)
    # the stored tensor and the view the op gets: a column slice of a wider (padded) vocabulary,
    # or the transpose of a [V, N] tensor (a column stride of N)
    if layout == "padded_slice":
        stored = torch.cat([x, torch.randn(N, 7, generator=gen).to(device=device, dtype=dtype)], dim=-1)

        def view(s):
            return s[:, :v]
    elif layout == "transposed":
        stored = x.t().contiguous()

        def view(s):
            return s.t()
    else:
        stored = x

        def view(s):
            return s

    logp_shape = target.shape
    up = make_upstream(upstream, logp_shape, rows, gen)

    def ours(s):
        assert layout in ("2d", "3d") or not view(s).is_contiguous()
        return log_probs(view(s), target, **opts)

    def ref(s, dtype):
        return reference(view(s).to(dtype), target, **opts)

    return check(ours, ref, [stored], up, ["logits"]), target


@OPTION_GRID
def test_temperature_softcap_scale(device, temperature, softcap, logit_scale, k):
    _case(device, k=k, temperature=temperature, softcap=softcap, logit_scale=logit_scale, seed=7)


@UPSTREAM_GRID
def test_upstream_and_ignore_patterns(device, upstream, pattern, k):
    (logp, entropy, (grad,)), target = _case(device, k=k, pattern=pattern, upstream=upstream, temperature=0.7, seed=3)
    ignored_entry = target == IGNORE
    ignored_row = ignored_entry if k is None else ignored_entry.all(-1)
    assert torch.equal(logp[ignored_entry], torch.zeros_like(logp[ignored_entry]))
    assert torch.equal(entropy[ignored_row], torch.zeros_like(entropy[ignored_row]))
    assert torch.equal(grad[ignored_row], torch.zeros_like(grad[ignored_row]))  # exactly, not nearly
    if k is not None and pattern == "random":
        assert (ignored_entry.any(-1) & ~ignored_row).any()  # the grid holds a partly ignored row
        assert (entropy[~ignored_row] > 0).all()


# layout: 2-D, 3-D, a column slice of a padded vocabulary (row stride V + 7), transposed
# storage (column stride N); dtype: float32 (tight rule) and bf16 (gradient rounded once)
@pytest.mark.parametrize("layout", ["2d", "3d", "padded_slice", "transposed"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_layouts(device, layout, dtype):
    _case(device, layout=layout, dtype=dtype, k=3, temperature=0.6, softcap=5.0, seed=11)


# logits kinds: random normal, confident rows, near-uniform rows with exact ties, shifted by
# +-200, a vocabulary padded with -inf columns (with the softcap on: tanh(-inf) must not give
# the padding mass); dtype: float32 and bf16
# form: the interpreter's tiles of rows, or one row a program, the form a GPU compiles
# (kernels/row_tiles.py), whose forward takes its short path on blocks below the running max
@pytest.mark.parametrize("kind", ["normal", "peaked", "flat", "up200", "down200", "neg_inf_padding"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("form", ["tiles", "one_row"])
def test_logits_kinds(device, small_blocks, kind, dtype, form, monkeypatch):
    if form == "one_row":
        monkeypatch.setattr(lp_module, "rows_per_program", lambda *args: 0)
    softcap = 5.0 if kind == "neg_inf_padding" else None
    (_, _, (grad,)), _ = _case(device, kind=kind, dtype=dtype, temperature=0.6, softcap=softcap, seed=5)
    if kind == "neg_inf_padding":
        pad = torch.cat([grad[:, :PAD_LEAD], grad[:, V - 5 :]], dim=1)
        assert torch.equal(pad, torch.zeros_like(pad))


# V = 1 (every log-prob 0, entropy 0), 3 (a row smaller than one block), 1000 (8 blocks)
@pytest.mark.parametrize("v", [1, 3, 1000])
@pytest.mark.parametrize("k", [None, 3])
def test_odd_vocab_sizes(device, small_blocks, v, k):
    _case(device, v=v, k=k, temperature=1.5, seed=v)


def test_outputs_are_float32_and_inputs_untouched(device):
    gen = torch.Generator().manual_seed(0)
    x = (torch.randn(N, V, generator=gen) * 3).to(device=device, dtype=torch.bfloat16)
    target = make_target((N,), 3, V, "random", gen).to(device)
    x_bits, t_bits = x.view(torch.int16).clone(), target.clone()
    leaf = x.clone().requires_grad_(True)
    logp, entropy = log_probs(leaf, target, temperature=0.6, softcap=5.0)
    assert logp.dtype == entropy.dtype == torch.float32
    assert logp.shape == target.shape and entropy.shape == (N,)
    (logp.sum() + entropy.sum()).backward()
    assert leaf.grad.dtype == torch.bfloat16
    assert torch.equal(leaf.detach().view(torch.int16), x_bits)
    assert torch.equal(target, t_bits)


def test_neg_inf_columns_give_nan_free_gradient_through_entropy(device):
    """Padding columns with p = 0 exactly: the entropy's p log p term must give 0, not
    0 * -inf (VeOmni #720); with the softcap, the slope there is 0 as well."""
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(N, V, generator=gen)
    x[:, 200:] = float("-inf")
    x[:, 3] = -200.0  # p underflows to 0 in float32 but is finite: its gradient is 0 as well
    x, target = x.to(device), torch.randint(0, 200, (N,), generator=gen).to(device)
    for softcap in (None, 5.0):
        leaf = x.clone().requires_grad_(True)
        logp, entropy = log_probs(leaf, target, temperature=0.6, softcap=softcap)
        torch.autograd.backward([logp, entropy], [torch.ones_like(logp), torch.ones_like(entropy)])
        assert torch.isfinite(leaf.grad).all() and torch.isfinite(logp).all() and torch.isfinite(entropy).all()
        assert torch.equal(leaf.grad[:, 200:], torch.zeros_like(leaf.grad[:, 200:]))


def test_confident_rows_keep_their_digits(device):
    """p of the target near 1: logp ~ -1e-11 and the target's gradient 1 - p ~ 1e-11 must keep
    their relative digits (the fp32 yardstick loses them: it forms 1 - p and log of a sum ~ 1)."""
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(N, V, generator=gen)
    target = torch.randint(0, V, (N,), generator=gen)
    x[torch.arange(N), target] = 30.0
    x, target = x.to(device), target.to(device)
    leaf = x.clone().requires_grad_(True)
    logp, entropy = log_probs(leaf, target)
    logp.sum().backward()
    x64 = x.double().requires_grad_(True)
    ref_lp, ref_ent = reference(x64, target)
    ref_lp.sum().backward()
    rows = torch.arange(N, device=device)
    for got, want in ((logp, ref_lp), (entropy, ref_ent), (leaf.grad[rows, target], x64.grad[rows, target])):
        rel = ((got.double() - want.detach()).abs() / want.detach().abs()).max().item()
        assert rel < 1e-5, rel


@pytest.mark.parametrize(
    "call, error",
    [
        (lambda x, t: log_probs(x, t, temperature=0.0), ValueError),  # temperature must be > 0
        (lambda x, t: log_probs(x, t, softcap=-1.0), ValueError),
        (lambda x, t: log_probs(x, t, logit_scale=0.0), ValueError),
        (lambda x, t: log_probs(x, t[:-1]), ValueError),  # target rows != logits rows
        (lambda x, t: log_probs(x, t.float()), TypeError),  # targets are token ids
        (lambda x, t: log_probs(x[0], t), ValueError),  # logits must be 2-D or 3-D
    ],
)
def test_bad_arguments_are_refused(device, call, error):
    with pytest.raises(error):
        call(torch.randn(4, 10, device=device), torch.zeros(4, dtype=torch.long, device=device))


def test_out_of_range_target_gives_nan_not_a_number(device):
    x = torch.randn(4, 10, device=device)
    logp, _ = log_probs(x, torch.tensor([0, 10, -1, IGNORE], device=device))
    assert not torch.isnan(logp[0]) and torch.isnan(logp[1]) and torch.isnan(logp[2]) and logp[3] == 0


def test_torch_compile_around_the_caller_gives_the_same_numbers(device):
    """A trainer compiles its loss around the op (a GRPO-style step): the op runs outside the
    graph and every number, gradients included, is the eager one, bit for bit. (aot_eager: the
    graph break is what is tested; inductor only compiles the caller's own arithmetic.)"""
    gen = torch.Generator().manual_seed(6)
    x = torch.randn(N, V, generator=gen).to(device)
    target = make_target((N,), None, V, "random", gen).to(device)
    advantage = torch.randn(N, generator=gen).to(device)

    def loss(logits):
        logp, entropy = log_probs(logits, target, temperature=0.7, softcap=5.0)
        return -(logp * advantage).sum() - 0.01 * entropy.mean(), logp, entropy

    compiled = torch.compile(loss, backend="aot_eager", fullgraph=False)
    results = []
    for fn in (loss, compiled):
        leaf = x.clone().requires_grad_(True)
        value, logp, entropy = fn(leaf)
        value.backward()
        results.append((value.detach(), logp.detach(), entropy.detach(), leaf.grad))
    for eager, comp in zip(*results, strict=True):
        assert torch.equal(eager, comp)


# A row's backward over several programs (its blocks split, as a GPU does where rows alone would
# leave multiprocessors idle): blocks a program 1 and 3 of a 1000-column row's 8; one target
# or 3, ignore patterns with whole ignored rows, through logp, entropy or both; the gradient
# in a buffer of its own or over the logits in place (the target's logit must be read before
# any program writes it). Every bit is the whole row's.
@pytest.mark.parametrize("per_program", [1, 3])
@pytest.mark.parametrize("k", [None, 3])
@pytest.mark.parametrize("pattern", ["random", "all"])
@pytest.mark.parametrize("upstream", ["logp", "entropy", "both"])
@pytest.mark.parametrize("form", ["tiles", "one_row"])
@pytest.mark.parametrize("in_place", [False, True])
def test_a_row_split_over_programs_gives_the_whole_rows_bits(
    device, small_blocks, per_program, k, pattern, upstream, form, in_place, monkeypatch
):
    if form == "one_row":
        monkeypatch.setattr(lp_module, "rows_per_program", lambda *args: 0)
    v = 1000
    gen = torch.Generator().manual_seed(per_program + 17 * (k or 1))
    target = make_target((N,), k, v, pattern, gen).to(device)
    t2 = target.reshape(N, -1)
    x = (torch.randn(N, v, generator=gen) * 3).to(device)
    x[torch.arange(N), t2[:, 0].clamp(min=0)] = 12.0  # a target at the max: the r / (1 + r) column
    opts = dict(temperature=0.6, softcap=None, logit_scale=1.0, ignore_index=IGNORE)
    _, _, stats = lp_module.log_probs_rows(x, t2, **opts)
    dlogp = torch.randn(t2.shape, generator=gen).to(device) if upstream != "entropy" else None
    dent = torch.randn(N, generator=gen).to(device) if upstream != "logp" else None

    def grad(wanted):
        monkeypatch.setattr(lp_module, "_CPU_BWD_PROGRAMS", wanted)
        if in_place:
            out = x.clone()
            return lp_module.log_probs_grad_rows(out, t2, stats, dlogp, dent, out, **opts)
        return lp_module.log_probs_grad_rows(x, t2, stats, dlogp, dent, torch.empty_like(x), **opts)

    whole = grad(0)
    n_programs = lp_module.programs(N, lp_module.rows_per_program(N, 128, x.device))[0]
    split = grad(n_programs * -(-8 // per_program))
    assert lp_module.blocks_per_program(n_programs, 8, n_programs * -(-8 // per_program)) == per_program
    assert torch.isfinite(whole).all() and whole.abs().sum() > 0 or pattern == "all"
    assert torch.equal(split, whole)
