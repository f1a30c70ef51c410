"""Test setup: without a GPU our Triton kernels run through Triton's interpreter (the kernels
decide that themselves when imported: ligerbench/kernels/triton_mode.py)."""

import pytest
import torch

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def pytest_collection_modifyitems(config, items):
    # One process holds the kernels in one Triton mode: compiled when it sees a GPU, interpreted
    # otherwise. Tests that drive the CPU path (the CLI with --device cpu, --smoke, models on CPU)
    # need the interpreter; on a GPU machine, `CUDA_VISIBLE_DEVICES= pytest` runs them.
    if torch.cuda.is_available():
        marker, reason = "interpreter", "needs Triton's interpreter; run with CUDA_VISIBLE_DEVICES= to include"
    else:
        marker, reason = "gpu", "needs a CUDA device"
    skip = pytest.mark.skip(reason=reason)
    for item in items:
        if marker in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def device() -> str:
    return DEVICE
