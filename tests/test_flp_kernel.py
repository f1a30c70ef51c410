"""kernels/fused_linear_log_probs.py against the float64 truth, axis by axis (rule:
tests/lp_checks.py; the yardstick computes the logits in float32 from the unrounded inputs).

Sizes: N = 8 rows cut into forward chunks of 3 (two full chunks and a partial one: the chunk
loop's edges); H = 32; V = 257 (prime: every vocabulary block has masked lanes). Backward runs
the default split (vocabulary slices) unless a test names one."""

import pytest
import torch
from lp_checks import IGNORE, OPTION_GRID, UPSTREAM_GRID, check, make_target, make_upstream, reference

from ligerbench.kernels.fused_linear_log_probs import fused_linear_log_probs

N, H, V = 8, 32, 257
CHUNK = 3


def _inputs(kind: str, rows: tuple[int, ...], v: int, target, gen, *, bias: bool):
    """hidden [*rows, H], weight [V, H], bias [V] or None: logits of std ~2 unless `kind` says."""
    h = torch.randn(rows + (H,), generator=gen)
    w = torch.randn(v, H, generator=gen) * (2.0 / H**0.5)
    b = torch.randn(v, generator=gen) if bias or kind in ("up200", "down200", "neg_inf_bias") else None
    if kind == "peaked":  # confident rows: hidden along its (first) target's weight row, logit ~ +40
        t = (target if target.dim() == len(rows) else target[..., 0]).clamp(min=0)
        h = h * 0.1 + 10.0 * w[t] / (w[t].norm(dim=-1, keepdim=True) ** 2) * 4.0
    elif kind == "flat":  # near-uniform rows: the entropy's gradient is a small difference
        w = w * 1e-3
    elif kind == "up200":  # shifted through the bias: z - lse must not round lse first
        b = b + 200.0
    elif kind == "down200":  # every logit far below 0: a max started at 0 underflows (verl #7439)
        b = b - 200.0
    elif kind == "neg_inf_bias":  # vocabulary padding masked by a -inf bias: no mass, no gradient
        b[v - 5 :] = float("-inf")
    elif kind != "normal":
        raise ValueError(kind)
    return h, w, b


def _case(device, *, k=None, pattern="random", upstream="both", kind="normal", layout="2d", dtype=torch.float32, v=V,
          bias=True, chunk_rows=CHUNK, chunk_bytes=None, split=None, seed=0, **opts):  # fmt: skip
    """Build one case and assert it within the rule (lp_checks.check: logp, entropy and every
    gradient against float64, float32 outputs, finite gradients); returns our (logp, entropy,
    [grads of hidden, weight, bias]). Tests that only call this still assert through it."""
    gen = torch.Generator().manual_seed(seed)
    rows = (2, N // 2) if layout in ("3d", "kept_slice") else (N,)
    n_real = v - 5 if kind == "neg_inf_bias" else v
    target = make_target(rows, k, n_real, pattern, gen)
    h, w, b = _inputs(kind, rows, v, target, gen, bias=bias)
    h, w, b = (None if t is None else t.to(device=device, dtype=dtype) for t in (h, w, b))
    target = target.to(device)
    # the stored hidden and the view the op gets: column-major ([H, N] transposed), or the
    # last T positions of a longer sequence (logits_to_keep: batch rows 6 * H apart)
    if layout == "column_major":
        stored = h.t().contiguous()

        def view(s):
            return s.t()
    elif layout == "kept_slice":
        stored = torch.cat([torch.randn(2, 2, H, generator=gen).to(device=device, dtype=dtype), h], dim=1)

        def view(s):
            return s[:, -(N // 2) :, :]
    else:
        stored = h

        def view(s):
            return s

    up = make_upstream(upstream, target.shape, rows, gen)
    chunking = dict(chunk_rows=chunk_rows)
    if split is not None:
        chunking["backward_split"] = split
    if chunk_bytes is not None:
        chunking["chunk_bytes"] = chunk_bytes

    def ours(s, w_, b_):
        assert layout in ("2d", "3d") or not view(s).is_contiguous()
        return fused_linear_log_probs(view(s), w_, target, bias=b_, **chunking, **opts)

    def ref(s, w_, b_, dt):
        x = view(s).to(dt) @ w_.to(dt).t()
        return reference(x if b_ is None else x + b_.to(dt), target, **opts)

    return check(ours, ref, [stored, w, b], up, ["hidden", "weight", "bias"]), target, view


# lp_checks.OPTION_GRID; the logit_scale applies to (h @ W.T + b) before the cap
@OPTION_GRID
def test_temperature_softcap_scale(device, temperature, softcap, logit_scale, k):
    _case(device, k=k, temperature=temperature, softcap=softcap, logit_scale=logit_scale, seed=7)


@UPSTREAM_GRID
def test_upstream_and_ignore_patterns(device, upstream, pattern, k):
    (logp, entropy, (grad_h, _, _)), target, _ = _case(
        device, k=k, pattern=pattern, upstream=upstream, temperature=0.7, seed=3
    )
    ignored_entry = target == IGNORE
    ignored_row = ignored_entry if k is None else ignored_entry.all(-1)
    assert torch.equal(logp[ignored_entry], torch.zeros_like(logp[ignored_entry]))
    assert torch.equal(entropy[ignored_row], torch.zeros_like(entropy[ignored_row]))
    assert torch.equal(grad_h[ignored_row], torch.zeros_like(grad_h[ignored_row]))  # exactly


# layout: 2-D, 3-D, column-major hidden, a logits_to_keep slice of a longer sequence;
# dtype: float32 (tight rule) and bf16 (float32 logits from bf16 operands, gradients rounded)
@pytest.mark.parametrize("layout", ["2d", "3d", "column_major", "kept_slice"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_layouts(device, layout, dtype):
    (_, _, (grad_h, _, _)), _, view = _case(
        device, layout=layout, dtype=dtype, k=3, temperature=0.6, softcap=5.0, seed=11
    )
    if layout == "kept_slice":  # the positions outside the kept slice get exactly nothing
        assert torch.equal(grad_h[:, :2], torch.zeros_like(grad_h[:, :2]))


# logits kinds: random normal, confident rows, near-uniform rows, shifted by +-200 through the
# bias, vocabulary padding masked by a -inf bias; dtype: float32 and bf16
@pytest.mark.parametrize("kind", ["normal", "peaked", "flat", "up200", "down200", "neg_inf_bias"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_logits_kinds(device, kind, dtype):
    (_, _, (_, grad_w, grad_b)), _, _ = _case(device, kind=kind, dtype=dtype, temperature=0.6, seed=5)
    if kind == "neg_inf_bias":
        assert torch.equal(grad_w[V - 5 :], torch.zeros_like(grad_w[V - 5 :]))
        assert torch.equal(grad_b[V - 5 :], torch.zeros_like(grad_b[V - 5 :]))


# V = 1 (every log-prob 0), 3 (tiny rows), 1000 (the largest CPU-sized vocabulary); no bias:
# the path without one
@pytest.mark.parametrize("v", [1, 3, 1000])
def test_odd_vocab_sizes_without_bias(device, v):
    _case(device, v=v, k=3, bias=False, temperature=1.5, seed=v)


def _per_logit(dtype) -> int:
    return 4  # float32 logits, their gradient (16-bit or not) in the same storage


# backward split: the forward's row chunks (3 rows: a float32 [V, H] accumulator over 3
# chunks) and vocabulary slices of every row (<= 100 columns: 3 slices, the kernel's col_start,
# a partial last slice); layout: 2-D, and the two strided hidden layouts the products read;
# dtype: float32 and bf16 (16-bit operands, float32 accumulation)
@pytest.mark.parametrize("split", ["rows", "vocab"])
@pytest.mark.parametrize("layout", ["2d", "column_major", "kept_slice"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_backward_splits(device, split, layout, dtype):
    budget = N * 100 * _per_logit(dtype) if split == "vocab" else None
    _case(device, split=split, chunk_bytes=budget, layout=layout, dtype=dtype, k=3, softcap=5.0, temperature=0.6)


# chunking: backward by row chunks (one chunk holding every row, chunks of 3 with a partial
# last, a byte budget of one row per chunk) and by vocabulary slices (64 columns, or all);
# results may differ only by float32 summation order (grad_weight, grad_bias; grad_hidden for
# the vocab split)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_results_do_not_depend_on_the_chunking(device, dtype):
    per_row = V * _per_logit(dtype)
    chunkings = (
        dict(split="rows", chunk_rows=N),
        dict(split="rows", chunk_rows=3),
        dict(split="rows", chunk_rows=None, chunk_bytes=per_row),
        dict(split="vocab", chunk_bytes=N * 64 * _per_logit(dtype)),
        dict(split="vocab", chunk_bytes=N * per_row),
    )
    results = [_case(device, dtype=dtype, k=3, softcap=5.0, temperature=0.6, seed=13, **c)[0] for c in chunkings]
    first = results[0]
    for other in results[1:]:
        torch.testing.assert_close(other[0], first[0], rtol=1e-6, atol=1e-7)  # logp
        torch.testing.assert_close(other[1], first[1], rtol=1e-6, atol=1e-7)  # entropy
        for g, g0 in zip(other[2], first[2], strict=True):
            # float32: summation order only; bf16: the same, then one rounding to bf16
            tol = dict(rtol=1e-5, atol=1e-6) if dtype == torch.float32 else dict(rtol=2**-7, atol=1e-5)
            torch.testing.assert_close(g, g0, **tol)


def test_outputs_are_float32_and_inputs_untouched(device):
    gen = torch.Generator().manual_seed(0)
    h = torch.randn(N, H, generator=gen).to(device=device, dtype=torch.bfloat16)
    w = (torch.randn(V, H, generator=gen) / H**0.5).to(device=device, dtype=torch.bfloat16)
    b = torch.randn(V, generator=gen).to(device=device, dtype=torch.bfloat16)
    target = make_target((N,), 3, V, "random", gen).to(device)
    saved = [t.view(torch.int16).clone() for t in (h, w, b)] + [target.clone()]
    leaves = [t.clone().requires_grad_(True) for t in (h, w, b)]
    logp, entropy = fused_linear_log_probs(leaves[0], leaves[1], target, bias=leaves[2], softcap=5.0, chunk_rows=3)
    assert logp.dtype == entropy.dtype == torch.float32
    assert logp.shape == target.shape and entropy.shape == (N,)
    (logp.sum() + entropy.sum()).backward()
    assert all(leaf.grad.dtype == torch.bfloat16 for leaf in leaves)
    for leaf, bits in zip(leaves, saved[:3], strict=True):
        assert torch.equal(leaf.detach().view(torch.int16), bits)
    assert torch.equal(target, saved[3])


def test_gradient_only_where_asked(device):
    """hidden alone requires grad (a frozen lm_head): weight and bias get none, hidden's is right."""
    gen = torch.Generator().manual_seed(2)
    h = torch.randn(N, H, generator=gen).to(device).requires_grad_(True)
    w = (torch.randn(V, H, generator=gen) / H**0.5).to(device)
    b = torch.randn(V, generator=gen).to(device)
    target = torch.randint(0, V, (N,), generator=gen).to(device)
    logp, entropy = fused_linear_log_probs(h, w, target, bias=b, chunk_rows=CHUNK)
    (logp.sum() - entropy.sum()).backward()
    assert w.grad is None and b.grad is None
    h64 = h.detach().double().requires_grad_(True)
    lp64, ent64 = reference(h64 @ w.double().t() + b.double(), target)
    (lp64.sum() - ent64.sum()).backward()
    torch.testing.assert_close(h.grad.double(), h64.grad, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "call, error",
    [
        (lambda h, w, t: fused_linear_log_probs(h, w, t, temperature=-1.0), ValueError),
        (lambda h, w, t: fused_linear_log_probs(h, w[:, :-1], t), ValueError),  # H mismatch
        (lambda h, w, t: fused_linear_log_probs(h, w.double(), t), TypeError),  # one dtype
        (lambda h, w, t: fused_linear_log_probs(h, w, t, bias=torch.zeros(3, device=h.device)), ValueError),
        (lambda h, w, t: fused_linear_log_probs(h, w, t[:, None].expand(4, 2)[:-1]), ValueError),
        (lambda h, w, t: fused_linear_log_probs(h, w, t, chunk_rows=0), ValueError),
        (lambda h, w, t: fused_linear_log_probs(h, w, t, backward_split="columns"), ValueError),
    ],
)
def test_bad_arguments_are_refused(device, call, error):
    with pytest.raises(error):
        call(
            torch.randn(4, 8, device=device),
            torch.randn(10, 8, device=device),
            torch.zeros(4, dtype=torch.long, device=device),
        )


def test_torch_compile_around_the_caller_gives_the_same_numbers(device):
    """As for log_probs: a compiled GRPO-style loss around the op gives the eager numbers, bit
    for bit, gradients of hidden and weight included."""
    gen = torch.Generator().manual_seed(6)
    h = torch.randn(N, H, generator=gen).to(device)
    w = (torch.randn(V, H, generator=gen) * (2.0 / H**0.5)).to(device)
    target = make_target((N,), None, V, "random", gen).to(device)
    advantage = torch.randn(N, generator=gen).to(device)

    def loss(hidden, weight):
        logp, entropy = fused_linear_log_probs(hidden, weight, target, temperature=0.7)
        return -(logp * advantage).sum() - 0.01 * entropy.mean(), logp, entropy

    compiled = torch.compile(loss, backend="aot_eager", fullgraph=False)
    results = []
    for fn in (loss, compiled):
        leaves = (h.clone().requires_grad_(True), w.clone().requires_grad_(True))
        value, logp, entropy = fn(*leaves)
        value.backward()
        results.append((value.detach(), logp.detach(), entropy.detach(), leaves[0].grad, leaves[1].grad))
    for eager, comp in zip(*results, strict=True):
        assert torch.equal(eager, comp)
