"""Test setup: without a GPU our Triton kernels run through Triton's interpreter, which has to be
chosen before triton.jit decorates them (kernels/__init__.py does the same)."""

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def device() -> str:
    return DEVICE
