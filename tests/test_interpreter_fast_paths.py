"""kernels/interpreter_fast_paths.py: Triton's interpreter with the fast paths gives the same
bits, the same types and the same errors as with Triton's own functions (`tritons_own`), on our
kernels and on a kernel made of the operations each fast path takes or refuses."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from ligerbench.kernels import interpreter_fast_paths, triton_mode
from ligerbench.kernels.cross_entropy import cross_entropy
from ligerbench.kernels.distill import distill_loss
from ligerbench.kernels.fused_linear_cross_entropy import fused_linear_cross_entropy
from ligerbench.kernels.log_probs import log_probs

pytestmark = pytest.mark.skipif(triton_mode.current() != "interpreter", reason="the interpreter's own behaviour")

import triton  # noqa: E402
import triton.language as tl  # noqa: E402
import triton.language.core as tlc  # noqa: E402
from triton.runtime import interpreter  # noqa: E402

tritons_own = interpreter_fast_paths.tritons_own


def _bits(*tensors: torch.Tensor) -> list[torch.Tensor]:
    return [t.detach().reshape(-1).contiguous().view(torch.uint8).clone() for t in tensors]


def _both_ways(run) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    ours = _bits(*run())
    with tritons_own():
        own = _bits(*run())
    return ours, own


def _assert_same_bits(run) -> None:
    ours, own = _both_ways(run)
    assert len(ours) == len(own)
    for i, (a, b) in enumerate(zip(ours, own, strict=True)):
        assert torch.equal(a, b), f"output {i} differs from Triton's own interpreter"


def test_every_fast_path_is_installed_on_this_triton():
    replaced = {name for _, name, _ in interpreter_fast_paths.REPLACED}
    assert {"binary_op_sanitize_overflow_impl", "__init__", "broadcast_impl_value",
            "binary_op_type_checking_impl", "_patch_attr", "_patch_builtin"} <= replaced  # fmt: skip
    assert len(interpreter_fast_paths.REPLACED) == 7  # both __init__s; install() again adds none
    interpreter_fast_paths.install()
    assert len(interpreter_fast_paths.REPLACED) == 7


def test_tritons_own_puts_back_every_function_and_then_ours():
    ours = [getattr(owner, name) for owner, name, _ in interpreter_fast_paths.REPLACED]
    with tritons_own():
        for owner, name, _ in interpreter_fast_paths.REPLACED:
            assert not getattr(getattr(owner, name), "_ligerbench", False), name
    assert ours == [getattr(owner, name) for owner, name, _ in interpreter_fast_paths.REPLACED]


@triton.jit
def _mixed_ops(x_ptr, h_ptr, b_ptr, i_ptr, u_ptr, out_f_ptr, out_h_ptr, out_i_ptr, out_j_ptr, n, BLOCK: tl.constexpr):
    rows = tl.arange(0, BLOCK)[:, None]
    cols = tl.arange(0, BLOCK)[None, :]
    offs = rows * BLOCK + cols  # [B, 1] and [1, B]: a real broadcast, to the type's shape too
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    h = tl.load(h_ptr + offs, mask=mask, other=0.0)
    b = tl.load(b_ptr + offs, mask=mask, other=0.0)
    i = tl.load(i_ptr + offs, mask=mask, other=0)
    u = tl.load(u_ptr + offs, mask=mask, other=0)
    wraps = i * 65537 + 2147483000  # int32 arithmetic past its range (wraps: no debug)
    q = i // 7 + i % 7 - (i >> 2) + (i & 5) + (i == 3) + (u // 3).to(tl.int32) + (u % 5).to(tl.int32)
    j = i.to(tl.int64) * 3 + i - offs  # int64 with int32
    f = x * 2.5 - x / (tl.abs(x) + 1.0) + tl.where(x > 0, x, -x) + rows + (x < h.to(tl.float32))
    f = f + tl.sum(x, 0)[None, :] + x * j.to(tl.float32) + x.to(tl.float64).to(tl.float32) % 1.5
    hh = h * h + h / (h + 3.0) + (h * h) % 2.0  # float16: a division computes in float32
    bb = b.to(tl.float32) * 3.0 + (b * b).to(tl.float32)  # bfloat16 arithmetic, as Triton does it here
    tl.store(out_f_ptr + offs, f + bb + offs.shape[0] * 100 + offs.shape[1], mask=mask)
    tl.store(out_h_ptr + offs, hh, mask=mask)
    tl.store(out_i_ptr + offs, wraps + q, mask=mask)
    tl.store(out_j_ptr + offs, j + u, mask=mask)


def test_a_kernel_of_mixed_types_shapes_and_overflows_gives_tritons_bits():
    g = torch.Generator().manual_seed(0)
    n, block = 60, 8
    x = torch.randn(n, generator=g) * 4
    h, b = x.half() * 0.5, x.bfloat16()
    i = torch.randint(-(2**20), 2**20, (n,), generator=g, dtype=torch.int32)
    u = torch.randint(0, 2**31, (n,), generator=g, dtype=torch.int64).to(torch.uint32)

    def run():
        outs = [torch.zeros(n), torch.zeros(n, dtype=torch.float16), torch.zeros(n, dtype=torch.int32),
                torch.zeros(n, dtype=torch.int64)]  # fmt: skip
        _mixed_ops[(1,)](x, h, b, i, u, *outs, n, BLOCK=block)
        return outs

    _assert_same_bits(run)


@triton.jit
def _add_int32(a_ptr, out_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(out_ptr + offs, tl.load(a_ptr + offs) + 2147483000)


def test_the_overflow_check_runs_when_debug_keeps_it(monkeypatch):
    a = torch.tensor([0, 1000], dtype=torch.int32)
    out = torch.zeros(2, dtype=torch.int32)
    _assert_same_bits(lambda: (_add_int32[(1,)](a, out, N=2), out)[1:])  # no debug: wraps, both ways
    assert out[1].item() < 0
    builder = interpreter.interpreter_builder
    monkeypatch.setattr(builder, "options", dataclasses.replace(builder.options, debug=True))
    for way in (tritons_own, lambda: __import__("contextlib").nullcontext()):
        with way(), pytest.raises(Exception, match="int32 overflow detected for operation add"):
            _add_int32[(1,)](a, out, N=2)


def _describe(t) -> tuple:
    ty = t.type
    shape = [d.value for d in t.shape]
    return (type(t.shape), shape, t.numel.value, str(ty), ty.numel if ty.is_block() else None, str(t.dtype),
            list(ty.shape) if ty.is_block() else None, [repr(x) for x in t.shape.type])  # fmt: skip


@pytest.mark.parametrize("shape", [[4], [2, 8], [1, 1], [16, 1, 2], "tuple", "constexprs", [True], "scalar"])
def test_block_types_and_tensors_are_built_as_triton_builds_them(shape):
    def build():
        if shape == "scalar":
            return tl.tensor(None, tl.int64)
        dims = {"tuple": tl.tuple([4, 8]), "constexprs": [tl.constexpr(4), 2]}.get(str(shape), shape)
        block = tl.block_type(tl.pointer_type(tl.float16), dims)
        return tl.tensor(None, block.with_element_ty(tl.float32))

    for _ in range(2):  # the second time from what the first remembered
        ours = _describe(build())
        with tritons_own():
            own = _describe(build())
        assert ours == own


@pytest.mark.parametrize("shape", [[3], [], [4.0], [2, 6]])
def test_a_shape_triton_refuses_raises_the_same(shape):
    errors = []
    for way in (tritons_own, lambda: __import__("contextlib").nullcontext()):
        with way(), pytest.raises((TypeError, ValueError)) as caught:
            tl.block_type(tl.float32, shape)
        errors.append((type(caught.value), str(caught.value)))
    assert errors[0] == errors[1]


def _ce_runs():
    g = torch.Generator().manual_seed(1)
    for dtype, options in [(torch.float32, {}), (torch.bfloat16, {"label_smoothing": 0.1, "z_loss_scale": 1e-3}),
                           (torch.float16, {"softcap": 30.0, "reduction": "sum"})]:  # fmt: skip
        logits = (torch.randn(9, 300, generator=g) * 3).to(dtype).requires_grad_()
        target = torch.randint(0, 300, (9,), generator=g)
        target[::4] = -100
        yield logits, target, options


def test_cross_entropy_gives_tritons_bits():
    def run():
        outs = []
        for logits, target, options in _ce_runs():
            x = logits.detach().clone().requires_grad_()
            loss = cross_entropy(x, target, **options)
            loss.backward()
            outs += [loss, x.grad]
        return outs

    _assert_same_bits(run)


def test_fused_linear_cross_entropy_gives_tritons_bits():
    g = torch.Generator().manual_seed(2)
    hidden = torch.randn(11, 32, generator=g).bfloat16()
    weight = (torch.randn(200, 32, generator=g) * 0.1).bfloat16()
    target = torch.randint(0, 200, (11,), generator=g)

    def run():
        h, w = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
        loss = fused_linear_cross_entropy(h, w, target, chunk_tokens=4)
        loss.backward()
        return [loss, h.grad, w.grad]

    _assert_same_bits(run)


def test_log_probs_and_distillation_give_tritons_bits():
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(2, 3, 150, generator=g)
    target = torch.randint(0, 150, (2, 3, 2), generator=g)
    teacher = torch.randn(6, 150, generator=g).half()

    def run():
        x = logits.clone().requires_grad_()
        logp, entropy = log_probs(x, target, temperature=0.7)
        (logp.sum() + entropy.sum()).backward()
        s = logits.reshape(6, 150).half().requires_grad_()
        loss = distill_loss(s, teacher, divergence="jsd", beta=0.3)
        loss.backward()
        return [logp, entropy, x.grad, loss, s.grad]

    _assert_same_bits(run)


@triton.jit
def _tensor_methods(x_ptr, out_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs)
    y = tl.exp(x.to(tlc.float64)).to(tl.float32) + x * 2.0  # tl.tensor's methods, through tl and tl.core
    tl.store(out_ptr + offs, y.reshape(N) - tl.max(x, 0))


def test_a_namespace_patched_twice_in_a_launch_is_patched_again_in_the_next():
    """A kernel whose module holds both `tl` and `tl.core` has tl.tensor walked twice in each
    launch, the second time patched already (no builtin found): every launch after the first
    must still patch its methods (else they raise 'Did you forget to add @triton.jit'), with
    Triton's bits."""
    assert "tlc" in _tensor_methods.fn.__globals__
    x = torch.randn(16, generator=torch.Generator().manual_seed(1))

    def run():
        out = torch.empty(16)
        _tensor_methods[(1,)](x, out, N=16)
        return [out]

    for _ in range(3):
        _assert_same_bits(run)
