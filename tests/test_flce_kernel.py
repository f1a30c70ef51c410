"""The fused linear + cross-entropy kernel against the float64 truth, called directly.

Inputs come from ligerbench/flce_spec.py (the same draws verify uses); the check is the one
tolerance rule against PyTorch eager in the same dtype. Sizes: 12 tokens keep Triton's
interpreter fast; V=257 is prime-ish and H=17 odd, so no block or tile divides anything."""

from __future__ import annotations

import functools

import pytest
import torch

from ligerbench import tolerance
from ligerbench.cases import DTYPES, Case
from ligerbench.kernels.chunking import DEFAULT_CHUNK_BYTES
from ligerbench.kernels.fused_linear_cross_entropy import (
    AUTO_DTYPE_MAX_CHUNKS,
    GRADIENT_SHARE,
    chunk_size,
    default_chunk_bytes,
    fused_linear_cross_entropy,
    plan,
    resolve_split,
    resolve_split_and_store,
)
from ligerbench.suites.flce.axes import case as flce_case
from ligerbench.suites.flce.spec import eager_in_dtype, make_problem, reference, run_flce

GRADS = ("grad_hidden", "grad_weight", "grad_bias")


def check(case: Case, device, seed=0, **kernel_opts) -> dict:
    """Assert loss, z-loss and every gradient are within the rule; returns the errors."""
    problem = make_problem(case, seed, torch.device(device))
    ref, eager = reference(problem), eager_in_dtype(problem)
    fn = functools.partial(fused_linear_cross_entropy, return_z_loss=True, **kernel_opts)
    got = run_flce(fn, problem)
    assert not got.input_mutated
    errors = {}
    # the separately reported z-loss is a check only when the case has one (as in verify)
    for q in ("loss", "z_loss", *GRADS) if problem.z_loss_scale else ("loss", *GRADS):
        if q not in ref.values:
            continue
        err = tolerance.rel_error(got.values.get(q), ref.values[q])
        limit = tolerance.limit_for(tolerance.rel_error(eager.values[q], ref.values[q]), DTYPES[case.dtype])
        assert err <= limit, f"{case.id} {q}: error {err:.3g} > limit {limit:.3g}"
        errors[q] = err
    return errors


BASE = flce_case(n=12, v=257, h=17, bias=True, option="all")


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])  # fp16 runs in the GPU preset
# none with a random per-row upstream (docs/bugs.md, bug 1), mean, sum with an upstream scalar != 1
@pytest.mark.parametrize("reduction,upstream", [("none", "random"), ("mean", "ones"), ("sum", "random")])
# one chunk, and 5-token chunks: the last partial, the first entirely ignored (leading_run)
@pytest.mark.parametrize("chunk_tokens", [None, 5])
def test_every_option_with_bias_matches_truth(device, dtype, reduction, upstream, chunk_tokens):
    case = BASE.replace(dtype=dtype, reduction=reduction, upstream=upstream, ignore_pattern="leading_run")
    check(case, device, chunk_tokens=chunk_tokens)


# confident logits: 1 - p_y down to 1e-6, where a sloppy target gradient is 20-100% off (docs/bugs.md, bug 6)
@pytest.mark.parametrize("logits", ["confident", "large"])
def test_extreme_logits_without_bias(device, logits):
    case = flce_case(n=12, v=256, h=32, dtype="bf16", reduction="mean", logits=logits, option="softcap")
    check(case, device, chunk_tokens=5)


# "dtype" (the default): many chunks make the bf16 running sum round often, its worst case;
# "fp32": the exact accumulator must hold the rule too
@pytest.mark.parametrize("accum", ["dtype", "fp32"])
def test_weight_gradient_accumulation_stays_within_rule(device, accum):
    case = BASE.replace(dtype="bf16", reduction="sum", upstream="random", option="plain")
    check(case, device, chunk_tokens=2, grad_weight_accum=accum)


def test_all_ignored_mean_is_nan_with_zero_gradients(device):
    case = BASE.replace(ignore_pattern="all", reduction="mean", option="plain")
    errors = check(case, device, chunk_tokens=5)
    assert errors["grad_hidden"] == 0.0 and errors["grad_weight"] == 0.0


def test_three_dim_hidden_gives_the_same_numbers(device):
    g = torch.Generator().manual_seed(0)
    h = torch.randn(2, 6, 17, generator=g).to(device)
    w = torch.randn(257, 17, generator=g).to(device)
    y = torch.randint(0, 257, (2, 6), generator=g).to(device)
    up = torch.rand(2, 6, generator=g).to(device)
    results = []
    for hidden, target in ((h, y), (h.reshape(12, 17), y.reshape(12))):
        hh, ww = hidden.clone().requires_grad_(), w.clone().requires_grad_()
        loss = fused_linear_cross_entropy(hh, ww, target, reduction="none", chunk_tokens=5)
        assert loss.shape == target.shape
        loss.backward(up.reshape(target.shape))
        assert hh.grad.shape == hidden.shape
        results.append((loss.reshape(-1), hh.grad.reshape(12, 17), ww.grad))
    for a, b in zip(*results, strict=True):
        assert torch.equal(a, b)


def test_frozen_weight_gets_no_gradient(device):
    h = torch.randn(12, 17, device=device, requires_grad=True)
    w = torch.randn(257, 17, device=device)
    y = torch.randint(0, 257, (12,), device=device)
    fused_linear_cross_entropy(h, w, y).backward()
    h64 = h.detach().double().requires_grad_()
    torch.nn.functional.cross_entropy(h64 @ w.double().T, y).backward()
    assert w.grad is None
    assert tolerance.rel_error(h.grad, h64.grad) <= 1e-6


def test_second_backward_is_refused(device):
    h = torch.randn(12, 17, device=device, requires_grad=True)
    w = torch.randn(257, 17, device=device, requires_grad=True)
    loss = fused_linear_cross_entropy(h, w, torch.randint(0, 257, (12,), device=device))
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="backward ran twice"):
        loss.backward()


def test_chunk_size_comes_from_the_budget():
    # the two FLCE target heads (docs/performance.md), bf16, 192 MiB: whole 128-token tiles, not tiny chunks
    assert chunk_size(8192, 128256, 2, DEFAULT_CHUNK_BYTES, None) == 768
    assert chunk_size(8192, 256000, 2, DEFAULT_CHUNK_BYTES, None) == 384
    assert chunk_size(8192, 128256, 2, 2**20, None) == 4  # below a tile: not rounded to zero
    assert chunk_size(10, 128256, 2, DEFAULT_CHUNK_BYTES, None) == 10
    assert chunk_size(8192, 128256, 2, DEFAULT_CHUNK_BYTES, 1000) == 1000  # the override wins
    assert chunk_size(8192, 128256, 2, 1, None) == 1
    with pytest.raises(ValueError, match="chunk_tokens"):
        chunk_size(10, 10, 2, DEFAULT_CHUNK_BYTES, 0)


def test_default_budget_is_a_share_of_the_gradients():
    # the extra memory (gradients + budget) stays under the 1.2x design target at every bench head
    for v, h in ((128256, 4096), (256000, 2304), (152064, 3584), (32768, 4096)):
        grads = (v + 8192) * h * 2
        budget = default_chunk_bytes(8192, v, h, torch.bfloat16)
        assert budget == int(GRADIENT_SHARE * grads) and grads + budget < 1.2 * grads
    fp32, bf16 = (default_chunk_bytes(8192, 32768, 4096, dt) for dt in (torch.float32, torch.bfloat16))
    assert abs(fp32 - 2 * bf16) <= 1  # the gradients' own bytes: twice as many in float32
    assert default_chunk_bytes(256, 4096, 64, torch.float32) == 32 * 2**20  # tiny heads: one whole chunk


def _args(**override):
    args = dict(
        hidden=torch.randn(4, 8),
        weight=torch.randn(10, 8),
        target=torch.randint(0, 10, (4,)),
        bias=None,
    )
    args.update(override)
    return args


@pytest.mark.parametrize(
    "override,error,match",
    [
        ({"weight": torch.randn(10, 7)}, ValueError, "weight must be"),
        ({"hidden": torch.randn(8)}, ValueError, "hidden must be"),
        ({"target": torch.randint(0, 10, (5,))}, ValueError, "target shape"),
        ({"bias": torch.randn(9)}, ValueError, "bias must have shape"),
        ({"weight": torch.randn(10, 8, dtype=torch.float64)}, TypeError, "share one dtype"),
        ({"bias": torch.randn(10).bfloat16()}, TypeError, "share one dtype"),
        ({"target": torch.zeros(4)}, TypeError, "target must be int"),
        ({"weight": torch.randn(10, 8, device="meta")}, ValueError, "weight is on meta"),
        ({"target": torch.tensor([0, 1, 2, 10])}, ValueError, "outside"),
    ],
    ids=[
        "hidden-size",
        "hidden-rank",
        "target-shape",
        "bias-shape",
        "weight-dtype",
        "bias-dtype",
        "target-dtype",
        "device",
        "target-range",
    ],
)
def test_clear_errors(override, error, match):
    args = _args(**override)
    with pytest.raises(error, match=match):
        fused_linear_cross_entropy(args.pop("hidden"), args.pop("weight"), args.pop("target"), **args)


def test_auto_accumulation_switches_to_fp32_for_many_chunks():
    """'auto' keeps the lean bf16 running sum for few chunks and the exact fp32 accumulator
    when the chunks are many enough for the running sum's roundings to add up."""
    from ligerbench.kernels.fused_linear_cross_entropy import AUTO_DTYPE_MAX_CHUNKS, resolve_accum

    assert resolve_accum("auto", 8192, 768) == "dtype"  # the Llama-3 head: 11 chunks
    assert resolve_accum("auto", 4096, 5) == "fp32"  # 820 chunks
    assert resolve_accum("auto", AUTO_DTYPE_MAX_CHUNKS, 1) == "dtype"
    assert resolve_accum("auto", AUTO_DTYPE_MAX_CHUNKS + 1, 1) == "fp32"
    assert resolve_accum("dtype", 4096, 1) == "dtype"  # an explicit choice is kept


MiB = 2**20


def _extra_bytes(n, v, h, elt, budget):
    """Working memory beyond the gradients that plan() commits to: the logits chunk, and the
    fp32 accumulator when it picks one."""
    chunk, accum = plan(n, v, h, elt, budget, None, "auto")
    return chunk * v * elt + (4 * v * h if accum == "fp32" else 0), chunk, accum


@pytest.mark.parametrize("head", [(128256, 4096), (256000, 2304), (152064, 3584), (32768, 4096), (1000, 16)])
def test_smaller_budget_never_costs_more_memory(head):
    """Before 3dfb5d7 a 64 MiB budget at the Gemma-2 head took 64 chunks and an fp32 accumulator
    (2314 MiB extra). Over budgets from 1 KiB to 2 GiB, the memory plan() commits to never
    grows when the budget shrinks, and never exceeds the budget (or one row of logits)."""
    v, h = head
    budgets = [2**k for k in range(10, 32)] + [64 * MiB, 192 * MiB, 100 * MiB + 12345]
    plans = sorted((b, *_extra_bytes(8192, v, h, 2, b)) for b in budgets)
    for (b0, e0, c0, a0), (b1, e1, _, _) in zip(plans, plans[1:], strict=False):
        assert e0 <= max(b0, v * 2), f"budget {b0}: {e0} bytes ({c0} tokens, {a0})"
        assert e0 <= e1, f"budget {b0} costs {e0} > {e1} at budget {b1}"
    if v * h > 2**24:  # a real head: the accumulator never fits a budget of up to 2 GiB
        assert all(p[3] == "dtype" for p in plans)


def test_plan_keeps_the_fp32_accumulator_where_it_fits():
    # many chunks and an accumulator within half the budget: fp32, the logits get the rest
    chunk, accum = plan(8192, 1000, 16, 2, 400 * 1024, None, "auto")
    assert accum == "fp32" and chunk * 1000 * 2 <= 400 * 1024 - 4 * 1000 * 16
    assert -(-8192 // chunk) > AUTO_DTYPE_MAX_CHUNKS
    # the Gemma-2 head at 64 MiB: 64 chunks, but 2.2 GiB of accumulator does not fit
    assert plan(8192, 256000, 2304, 2, 64 * MiB, None, "auto") == (128, "dtype")
    assert plan(8192, 128256, 4096, 2, DEFAULT_CHUNK_BYTES, None, "auto") == (768, "dtype")
    # forced chunks: the chunk count alone decides (the verify suites' 5-token chunks: fp32)
    assert plan(4096, 32000, 1024, 2, DEFAULT_CHUNK_BYTES, 5, "auto") == (5, "fp32")
    assert plan(1001, 128256, 576, 2, DEFAULT_CHUNK_BYTES, 5, "auto") == (5, "fp32")
    # an explicit choice is kept, its logits chunk from the whole budget
    assert plan(8192, 128256, 4096, 2, DEFAULT_CHUNK_BYTES, None, "fp32") == (768, "fp32")


SMALL_BUDGET_CASE = flce_case(n=256, v=257, h=17, dtype="bf16", reduction="sum", upstream="random", bias=True)
SMALL_BUDGET = 4 * 257 * 2  # 4 tokens of bf16 logits: 64 chunks


# The vocabulary way at a budget of one token of the CPU's 2-byte chunk (2 * 257 + 4 * 64 bytes, and
# up to one byte short of two): 64 chunks by tokens, as SMALL_BUDGET_CASE below, with a quarter of
# its tokens. The interpreter runs the vocabulary split's slices row by row (276 s at 256 tokens in
# CI's test run); at the top of the one-token range they are 4 columns wide, not 2 (65 slices, the
# last one partial, instead of 129: 48 s of CI's test run halved).
VOCAB_WAY_CASE = SMALL_BUDGET_CASE.replace(n=64)
VOCAB_WAY_BUDGET = 2 * (2 * 257 + 4 * 64) - 1


@pytest.mark.slow(seconds=30)  # scheduled first (tests/conftest.py)
@pytest.mark.interpreter  # CPU tensors: needs the interpreter
def test_64_budget_chunks_in_bf16_go_the_vocabulary_way_within_rule():
    """The small-budget path: 64 chunks from the budget alone. "auto" sends chunks under
    VOCAB_SPLIT_BELOW tokens to the vocabulary split (exact weight gradient, no running sum),
    which is within the rule where the token split is not (the strict xfail below)."""
    assert plan(256, 257, 17, 2, SMALL_BUDGET, None, "auto") == (4, "dtype")
    assert resolve_split("auto", 256, 4, 0.0, 0.0) == "vocab"
    how = resolve_split_and_store("auto", "auto", 64, 257, torch.bfloat16, torch.device("cpu"), 0.0, None, 0.0,
                                  VOCAB_WAY_BUDGET, None)  # fmt: skip
    assert how == ("vocab", "shifted16", 1)  # 64 chunks of one token by tokens
    check(VOCAB_WAY_CASE, "cpu", chunk_bytes=VOCAB_WAY_BUDGET)


@pytest.mark.slow(seconds=17)
@pytest.mark.interpreter  # CPU tensors: needs the interpreter
@pytest.mark.xfail(strict=True, reason="known gap (kernels/NOTES.md): 64 bf16 running-sum roundings")
def test_64_budget_chunks_in_bf16_split_by_tokens_stay_within_rule():
    """The same budget forced to split="tokens": "auto" accumulation -> "dtype" (the fp32
    accumulator would exceed half the budget). Measured on CPU: grad_weight at 1.18x the rule
    (0.00879 > 0.00745): the token split trades accuracy for memory at a budget this small.
    Strict: if the token path gets exact here, this starts passing and the mark must go."""
    check(SMALL_BUDGET_CASE, "cpu", chunk_bytes=SMALL_BUDGET, split="tokens")


@pytest.mark.interpreter  # CPU tensors: needs the interpreter
def test_device_target_check_on_cpu():
    h, w = torch.randn(4, 8), torch.randn(10, 8)
    bad = torch.tensor([0, 1, 10, 3])
    with pytest.raises(RuntimeError, match=r"outside \[0, 10\)"):
        fused_linear_cross_entropy(h, w, bad, check_targets="device")
    with pytest.raises(ValueError, match="target holds 10"):
        fused_linear_cross_entropy(h, w, bad, check_targets="host")
    loss = fused_linear_cross_entropy(h, w, bad, reduction="none", check_targets=False)
    assert torch.isnan(loss[2]) and torch.isfinite(loss[[0, 1, 3]]).all()


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
def test_no_tokens_backward_as_pytorch(reduction):
    """A step with no tokens (an empty micro-batch) runs backward and answers as PyTorch does:
    an empty loss, 0, or NaN for the mean over nothing, and zero gradients. Scaling the saved
    gradient by the upstream once raised on the empty hidden gradient (no whole rows to group)."""
    hidden = torch.randn(0, 16, requires_grad=True)
    weight = torch.randn(64, 16, requires_grad=True)
    target = torch.zeros(0, dtype=torch.long)
    loss = fused_linear_cross_entropy(hidden, weight, target, reduction=reduction)
    (loss.sum() if reduction == "none" else loss).backward()
    h2, w2 = hidden.detach().clone().requires_grad_(), weight.detach().clone().requires_grad_()
    ref = torch.nn.functional.cross_entropy(h2 @ w2.T, target, reduction=reduction)
    (ref.sum() if reduction == "none" else ref).backward()
    assert loss.shape == ref.shape and torch.equal(loss.isnan(), ref.isnan())
    assert torch.equal(loss.nan_to_num(), ref.nan_to_num().to(loss.dtype))
    assert hidden.grad.shape == (0, 16) and torch.equal(weight.grad, w2.grad)
