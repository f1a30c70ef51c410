"""A 16-bit gradient laid over its float32 logits' storage (kernels/fp32_products.py,
grad_over_logits): the cross-entropy kernel must give the same bits as with a separate buffer.
That holds only while pass 2 reads each block before storing its gradient and walks the row
from the last block to the first; a kernel that walked it forwards would overwrite logits it
has yet to read, and this test would fail."""

from __future__ import annotations

import pytest
import torch

from ligerbench.kernels.cross_entropy import cross_entropy_rows
from ligerbench.kernels.fp32_products import grad_over_logits

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
