"""How `kd` and `flkd` cases are built and judged, beyond the kernels themselves: inputs moved to
a device keep their layout (issue 35's H200 run), a self-distilled teacher's gradients are judged
against their natural magnitude, the textbook yardstick takes each way users write a divergence,
and the peers' declared limits."""

from __future__ import annotations

import math

import pytest
import torch

from ligerbench.suites.flkd import axes as flkd_axes
from ligerbench.suites.flkd import spec as flkd_spec
from ligerbench.suites.kd import axes as kd_axes
from ligerbench.suites.kd import spec as kd_spec

KERNELS = {"kd": (kd_axes, kd_spec), "flkd": (flkd_axes, flkd_spec)}
SHAPES = {"kd": dict(n=8, v=1000), "flkd": dict(n=12, v=500, h=32)}


def _extent(t: torch.Tensor) -> int:
    """Elements of storage the view reaches: its offset, then its last element."""
    return t.storage_offset() + sum((size - 1) * stride for size, stride in zip(t.shape, t.stride(), strict=True)) + 1


def _tensors(problem) -> dict[str, torch.Tensor]:
    return {k: v for k, v in vars(problem).items() if torch.is_tensor(v) and v.is_floating_point()}


@pytest.mark.parametrize("kernel, layout", [(k, lay) for k, (axes, _) in KERNELS.items()
                                            for lay in axes.LAYOUT.values_for("quick")])  # fmt: skip
# fp32: nothing to convert, the move alone; bf16: a conversion and a move in one
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_inputs_moved_to_a_device_keep_their_layout(kernel, layout, dtype):
    """The meta device is a real move on a CPU-only machine: `.to(device)` of a view that is not
    dense (flkd's kept_slice) makes a dense copy, and the case's strides then point past its end
    (on CUDA: "setStorage ... out of bounds" in every provider's reference)."""
    axes, spec = KERNELS[kernel]
    case = axes.case(**SHAPES[kernel], dtype=dtype, layout=layout)
    here = spec.make_problem(case, 0, torch.device("cpu"))
    there = spec.make_problem(case, 0, torch.device("meta"))
    for name, t in _tensors(there).items():
        src = getattr(here, name)
        assert (t.shape, t.stride(), t.storage_offset()) == (src.shape, src.stride(), src.storage_offset()), name
        assert t.untyped_storage().nbytes() == src.untyped_storage().nbytes(), f"{name}: storage not moved whole"
        assert _extent(t) * t.element_size() <= t.untyped_storage().nbytes(), f"{name} reads past its storage"
