"""grpo's eager path (kernels/grpo_loss.py, path="eager": the gradients formed in forward by row
chunks, 6*N*H*V FLOPs) against its recompute path (flp's log-probs, backward recomputes the
logits): the same loss and gradients to float32 summation order for every loss type, KL estimator,
temperature, bias, a fully masked sequence, an upstream gradient other than 1 and several chunks
with a partial last one; 16-bit inputs as close to float64 as the recompute path; what "auto"
picks; no input written; and planted bugs in the eager path change the gradient."""

from __future__ import annotations

import pytest
import torch

from ligerbench.builtin import default_registry
from ligerbench.kernels import grpo_loss as G
from ligerbench.kernels.grpo_loss import grpo_loss, policy_loss
from ligerbench.tolerance import rel_error

pytestmark = pytest.mark.interpreter
B, T, H, V = 4, 7, 16, 61  # N = 28 tokens
CHUNK = 5  # rows a chunk under FIVE_ROWS: 6 chunks, the last of 3
FIVE_ROWS = CHUNK * V * 4  # chunk_bytes: the eager path keeps 4 bytes a logit (float32, gradient in place)


def problem(dtype=torch.float32, bias=True, seed=0, temperature=0.7):
    """Old log-probs near the current ones with stale steps (some ratios clipped on each side),
    advantages of both signs and one 0, ragged masks with one sequence fully masked."""
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(B, T, H, generator=g).to(dtype)
    weight = (torch.randn(V, H, generator=g) * 0.5).to(dtype)
    b = torch.randn(V, generator=g).to(dtype) if bias else None
    ids = torch.randint(0, V, (B, T), generator=g)
    with torch.no_grad():
        z = hidden.double() @ weight.double().T + (0 if b is None else b.double())
        current = torch.log_softmax(z / temperature, -1).gather(-1, ids[..., None]).squeeze(-1).float()
    old = current + 0.3 * torch.randn(B, T, generator=g)
    ref = current + 0.1 * torch.randn(B, T, generator=g)
    adv = torch.randn(B, generator=g)
    adv[0] = 0.0
    mask = (torch.rand(B, T, generator=g) < 0.75).long()
    mask[1] = 0  # a sequence with no completion token
    mask[2, :2] = 1
    return dict(hidden=hidden, weight=weight, bias=b, ids=ids, old=old, ref=ref, adv=adv, mask=mask, current=current)


def run(p, *, upstream=0.7, fn=grpo_loss, **options):
    """Loss and gradients (hidden, weight, bias) of upstream * loss; fresh leaves each call."""
    leaves = [p["hidden"].clone().requires_grad_(True), p["weight"].clone().requires_grad_(True)]
    if p["bias"] is not None:
        leaves.append(p["bias"].clone().requires_grad_(True))
    bias = leaves[2] if p["bias"] is not None else None
    loss = fn(leaves[0], leaves[1], p["ids"], p["old"], p["ref"], p["adv"], p["mask"], bias=bias, **options)
    (loss * upstream).backward()
    return loss.detach(), [leaf.grad for leaf in leaves]


def truth(p, temperature, **options):
    """float64 logits and log-probs, then policy_loss (float64 from there), its gradients."""
    leaves = [p["hidden"].double().requires_grad_(True), p["weight"].double().requires_grad_(True)]
    if p["bias"] is not None:
        leaves.append(p["bias"].double().requires_grad_(True))
    z = leaves[0] @ leaves[1].T + (leaves[2] if p["bias"] is not None else 0)
    logp = torch.log_softmax(z / temperature, -1).gather(-1, p["ids"][..., None]).squeeze(-1)
    loss = policy_loss(logp * p["mask"], p["old"], p["ref"], p["adv"], p["mask"], **options)
    (loss * 0.7).backward()
    return loss.detach(), [leaf.grad for leaf in leaves]


def both(p, **options):
    eager = run(p, path="eager", chunk_bytes=FIVE_ROWS, **options)
    recompute = run(p, path="recompute", **options)
    return eager, recompute


@pytest.mark.parametrize("kl", [None, "k1", "k3"])
@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo", "dapo", "cispo"])
def test_eager_equals_recompute_in_float32(loss_type, kl):
    p = problem()
    options = dict(loss_type=loss_type, beta=0.04 if kl else 0.0, kl_estimator=kl or "k3", temperature=0.7,
                   eps_high=0.28, num_items=30 if loss_type == "dapo" else None)  # fmt: skip
    (loss_e, grads_e), (loss_r, grads_r) = both(p, **options)
    assert rel_error(loss_e, loss_r) < 1e-6
    for got, want in zip(grads_e, grads_r, strict=True):
        assert rel_error(got, want) < 1e-5
    assert grads_e[0][1].abs().max() == 0  # the fully masked sequence gets no gradient
    # the clip binds on some tokens, above and below, and not on others: every branch is checked
    r = torch.exp(p["current"] - p["old"])[p["mask"].bool()]
    assert (r < 0.8).any() and (r > 1.28).any() and ((r > 0.8) & (r < 1.2)).any()


@pytest.mark.parametrize(
    "options",
    [
        dict(temperature=1.0, bias=False),
        dict(grad_weight_accum="fp32"),
        dict(grad_weight_accum="dtype"),
        dict(one_chunk=True),
        dict(upstream=1.0),
        dict(upstream=-2.5, loss_type="cispo", beta=0.04, kl_estimator="k1"),
    ],
    ids=["temp1-nobias", "fp32-accum", "dtype-accum", "one-chunk", "upstream1", "upstream-2.5"],
)
def test_eager_equals_recompute_in_float32_under_each_setting(options):
    options = dict(options)
    p = problem(bias=options.pop("bias", True), temperature=options.get("temperature", 0.7))
    upstream = options.pop("upstream", 0.7)
    chunk_bytes = G.DEFAULT_CHUNK_BYTES if options.pop("one_chunk", False) else FIVE_ROWS
    options = {"loss_type": "dapo", "temperature": 0.7, **options}
    loss_e, grads_e = run(p, path="eager", chunk_bytes=chunk_bytes, upstream=upstream, **options)
    options.pop("grad_weight_accum", None)
    loss_r, grads_r = run(p, path="recompute", upstream=upstream, **options)
    assert rel_error(loss_e, loss_r) < 1e-6
    for got, want in zip(grads_e, grads_r, strict=True):
        assert rel_error(got, want) < 1e-5


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("loss_type", ["grpo", "cispo"])
def test_16_bit_inputs_are_as_close_to_float64_as_the_recompute_path(dtype, loss_type):
    p = problem(dtype)
    options = dict(loss_type=loss_type, beta=0.04, kl_estimator="k3", temperature=0.7)
    (loss_e, grads_e), (loss_r, grads_r) = both(p, **options)
    loss_t, grads_t = truth(p, **options)
    assert all(g.dtype == dtype for g in grads_e)
    assert rel_error(loss_e, loss_t) <= 2 * rel_error(loss_r, loss_t) + 1e-6
    unit = torch.finfo(dtype).eps / 2  # one rounding more: the stored gradient is rounded again when 0.7 scales it
    for got, want, exact in zip(grads_e, grads_r, grads_t, strict=True):
        assert rel_error(got, exact) <= 2 * rel_error(want, exact) + unit


def test_several_chunks_with_a_partial_last_one_are_run(monkeypatch):
    spans = []

    class Recording(G.ChunkGrads):
        def add(self, start, stop, h_c, grad, w):
            spans.append((start, stop))
            super().add(start, stop, h_c, grad, w)

    monkeypatch.setattr(G, "ChunkGrads", Recording)
    run(problem(), path="eager", chunk_bytes=FIVE_ROWS, loss_type="grpo")
    n = B * T
    assert spans == [(s, min(s + CHUNK, n)) for s in range(0, n, CHUNK)]
    assert len(spans) > 1 and spans[-1][1] - spans[-1][0] < CHUNK


def _count_paths(monkeypatch):
    calls = {"eager": 0, "recompute": 0}

    def counted(name, fn):
        def call(*args, **kwargs):
            calls[name] += 1
            return fn(*args, **kwargs)

        return call

    monkeypatch.setattr(G, "log_probs_rows", counted("eager", G.log_probs_rows))
    monkeypatch.setattr(G, "fused_linear_log_probs", counted("recompute", G.fused_linear_log_probs))
    return calls


@pytest.mark.parametrize(
    ("importance_level", "setting", "path"),
    [
        ("token", "grad", "eager"),
        ("sequence", "grad", "recompute"),
        ("token", "no_grad", "recompute"),
        ("token", "no_leaf_grad", "recompute"),
        ("token", "old_logp_grad", "recompute"),
    ],
)
def test_auto_takes_eager_where_it_applies(monkeypatch, importance_level, setting, path):
    calls = _count_paths(monkeypatch)
    p = problem()
    hidden = p["hidden"].clone().requires_grad_(setting != "no_leaf_grad")
    weight = p["weight"].clone().requires_grad_(setting != "no_leaf_grad")
    old = p["old"].clone().requires_grad_(setting == "old_logp_grad")
    args = (hidden, weight, p["ids"], old, p["ref"], p["adv"], p["mask"])
    with torch.set_grad_enabled(setting != "no_grad"):
        loss = grpo_loss(*args, importance_level=importance_level, loss_type="dapo")
    assert calls[path] >= 1 and calls["eager" if path == "recompute" else "recompute"] == 0
    if setting == "old_logp_grad":  # the data takes part in autograd, as on the recompute path it always did
        loss.backward()
        assert old.grad is not None and old.grad.abs().max() > 0
    assert G.resolve_path("auto", importance_level, setting == "grad", setting == "old_logp_grad") == path


def test_sequence_level_matches_whichever_path_is_asked_for_where_it_can_run():
    p = problem()
    auto = run(p, importance_level="sequence", loss_type="grpo")
    recompute = run(p, importance_level="sequence", loss_type="grpo", path="recompute")
    assert torch.equal(auto[0], recompute[0])
    with pytest.raises(ValueError, match="path='eager' needs importance_level='token'"):
        run(p, importance_level="sequence", path="eager")
    with pytest.raises(ValueError, match="path must be one of"):
        run(p, path="fused")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_no_input_is_written(dtype):
    p = problem(dtype)
    before = {k: v.clone() for k, v in p.items() if v is not None}
    hidden = p["hidden"].requires_grad_(True)
    loss = grpo_loss(hidden, p["weight"], p["ids"], p["old"], p["ref"], p["adv"], p["mask"], bias=p["bias"],
                     loss_type="cispo", beta=0.04, path="eager", chunk_bytes=FIVE_ROWS)  # fmt: skip
    (loss * 3.0).backward()
    for k, v in before.items():
        assert torch.equal(p[k].detach(), v), k


def test_only_the_gradients_asked_for_are_formed_and_non_contiguous_hidden_is_taken():
    p = problem(bias=False)
    wide = torch.zeros(B, T + 1, H)
    wide[:, :-1] = p["hidden"]
    weight = p["weight"].clone()  # no gradient wanted
    grads = {}
    for path in ("eager", "recompute"):
        leaf = wide.clone().requires_grad_(True)
        hidden = leaf[:, :-1]  # a logits_to_keep-style view: its rows are not contiguous
        assert not hidden.is_contiguous()
        loss = grpo_loss(hidden, weight, p["ids"], p["old"], p["ref"], p["adv"], p["mask"], loss_type="bnpo",
                         path=path, chunk_bytes=FIVE_ROWS)  # fmt: skip
        loss.backward()
        grads[path] = leaf.grad
    assert weight.grad is None
    assert grads["eager"][:, -1].abs().max() == 0
    assert rel_error(grads["eager"], grads["recompute"]) < 1e-5


def test_a_second_backward_is_refused():
    p = problem()
    hidden = p["hidden"].requires_grad_(True)
    loss = grpo_loss(hidden, p["weight"], p["ids"], p["old"], p["ref"], p["adv"], p["mask"], path="eager")
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="backward ran twice"):
        loss.backward()


@pytest.mark.parametrize(
    ("mutant", "options", "upstream"),
    [
        ("mutant_grpo_eager_cispo_ratio_kept", dict(loss_type="cispo"), 1.0),
        ("mutant_grpo_eager_upstream_ignored", dict(loss_type="dapo"), 0.5),
    ],
)
def test_a_planted_bug_in_the_eager_path_changes_the_gradient(mutant, options, upstream):
    """The eager path's planted bugs (suites/grpo/mutants.py; selftest kills them): the loss is
    unchanged, the gradient is not, well beyond the two paths' agreement above."""
    buggy = default_registry().providers[("grpo", mutant)].load()
    p = problem(bias=False)
    options = dict(options, importance_level="token", eps_low=0.2, eps_high=0.2, beta=0.0, kl_estimator="k3",
                   temperature=0.7)  # fmt: skip
    loss_b, grads_b = run(p, fn=buggy, upstream=upstream, **options)
    loss_r, grads_r = run(p, path="recompute", upstream=upstream, **options)
    assert rel_error(loss_b, loss_r) < 1e-6
    assert rel_error(grads_b[1], grads_r[1]) > 1e-2


def test_auto_takes_eager_on_a_gpu_only_where_its_chunks_pay():
    """At the Llama-3-8B head (V=128256), N=8192, the default budget holds 384 rows a chunk: eager
    on an H200 (measured faster there), recompute on an H100 (measured faster there); a budget of
    512 rows or one chunk of every row takes eager on both."""
    v, n, h = 128256, 8192, 4096
    assert G.eager_min_rows("NVIDIA H100 80GB HBM3") == 512
    assert G.eager_min_rows("NVIDIA H200") == G.EAGER_MIN_ROWS == 384
    assert G.eager_pays(n, v, h, G.DEFAULT_CHUNK_BYTES, "auto", 384)
    assert not G.eager_pays(n, v, h, G.DEFAULT_CHUNK_BYTES, "auto", 512)
    assert G.eager_pays(n, v, h, 512 * v * 4, "auto", 512)
    assert G.eager_pays(100, v, h, 128 * v * 4, "auto", 512)  # every row in one chunk
    assert G.resolve_path("auto", "token", True, False, eager_fast=False) == "recompute"
    assert G.resolve_path("eager", "token", True, False, eager_fast=False) == "eager"  # asked for: kept
