"""Shared by head_profile.py and gap_probe.py: a bench provider's forward + backward at one point
of a kernel's sweep, on the bench's own inputs (make_inputs)."""

import importlib

import torch

from ligerbench.bench.spec import call
from ligerbench.builtin import default_registry


def point_of(kernel: str, label: str):
    """The sweep point named `label` of the kernel's first sweep (its first point if none is)."""
    spec = importlib.import_module(f"ligerbench.suites.{kernel}.bench").SPEC
    points = next(iter(spec.sweeps.values()))("bf16", None, False)
    return spec, next((p for p in points if p.label == label), points[0])


def step_of(kernel: str, spec, point, name: str, device: torch.device):
    """A function running one forward + backward of provider `name`, its gradients cleared first."""
    inputs = spec.make_inputs(point.case, 0, device)
    fn = default_registry().provider(kernel, name).load()

    def step():
        for t in inputs.leaves:
            t.grad = None
        return call(fn, inputs)

    return step
