"""A 16-bit gradient laid over its float32 logits' storage (kernels/fp32_products.py,
grad_over_logits): the cross-entropy kernel must give the same bits as with a separate buffer.
That holds only while pass 2 reads each block before storing its gradient and walks the row
from the last block to the first; a kernel that walked it forwards would overwrite logits it
has yet to read, and this test would fail. Its mirror, grad_under_logits (the lower half of each
row's bytes), is for a writer that walks forwards: log_probs' backward, in grpo's eager path."""

from __future__ import annotations

import pytest
import torch

from ligerbench.kernels.cross_entropy import cross_entropy_rows
from ligerbench.kernels.fp32_products import grad_over_logits, grad_under_logits
from ligerbench.kernels.log_probs import log_probs_grad_rows, log_probs_rows

pytestmark = pytest.mark.interpreter


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("v", [3000, 2049])  # several blocks; an odd width
def test_gradient_over_the_logits_equals_a_separate_buffer(dtype, v):
    g = torch.Generator().manual_seed(v)
    logits = 3 * torch.randn(6, v, generator=g)
    logits[2] *= 20  # a confident row
    target = torch.randint(0, v, (6,), generator=g)
    target[4] = -100
    separate = torch.empty(6, v, dtype=dtype)
    want = cross_entropy_rows(logits.clone(), target, grad_out=separate, label_smoothing=0.1, softcap=30.0)
    shared = logits.clone()
    grad = grad_over_logits(shared, dtype)
    assert grad.data_ptr() == shared.data_ptr() + v * grad.element_size()  # the upper half of row 0
    got = cross_entropy_rows(shared, target, grad_out=grad, label_smoothing=0.1, softcap=30.0)
    for a, b in zip(got, want, strict=True):
        assert torch.equal(a, b)
    assert torch.equal(grad, separate)


def test_float32_gradient_is_the_logits_storage():
    logits = torch.randn(3, 10)
    assert grad_over_logits(logits, torch.float32) is logits


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("v", [9000, 8193])  # several of the interpreter's 4096-column blocks; an odd width
def test_gradient_under_the_logits_equals_a_separate_buffer_for_the_log_probs_backward(dtype, v):
    """log_probs' backward walks each row from its first block (grpo's eager path lays its
    gradient under the logits: grad_under_logits); over them (grad_over_logits, a layout for a
    writer walking backwards) it would overwrite logits it has yet to read."""
    g = torch.Generator().manual_seed(v)
    logits = 3 * torch.randn(6, v, generator=g)
    logits[2] *= 20  # a confident row
    target = torch.randint(0, v, (6, 1), generator=g)
    target[4] = -100
    opts = dict(temperature=0.7, softcap=None, logit_scale=1.0, ignore_index=-100)
    _, _, stats = log_probs_rows(logits, target, **opts)
    dlogp = torch.randn(6, 1, generator=g)
    separate = torch.empty(6, v, dtype=dtype)
    log_probs_grad_rows(logits.clone(), target, stats, dlogp, None, separate, **opts)
    shared = logits.clone()
    grad = grad_under_logits(shared, dtype)
    assert grad.data_ptr() == shared.data_ptr()  # the lower half of row 0
    log_probs_grad_rows(shared, target, stats, dlogp, None, grad, **opts)
    assert torch.equal(grad, separate)
    over = logits.clone()
    log_probs_grad_rows(over, target, stats, dlogp, None, grad_over_logits(over, dtype), **opts)
    assert not torch.equal(grad_over_logits(over, dtype), separate)


def test_float32_gradient_under_the_logits_is_the_logits_storage():
    logits = torch.randn(3, 10)
    assert grad_under_logits(logits, torch.float32) is logits
