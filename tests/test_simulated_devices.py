"""Kernels whose ranks cannot be simulated in one process on a device say so before running.

On a GPU, autograd runs every CUDA backward on one device thread: two simulated ranks whose
backward holds a collective (vp_flce's and vp_flp's hidden-gradient all-reduce) would wait there
for each other until the barrier's timeout, case after case (seen on an H100: 0 of 50 cases in
48 s). verify and selftest refuse with exit 2 and name --nproc instead."""

from __future__ import annotations

import pytest
import torch
from typer.testing import CliRunner

from ligerbench import runs
from ligerbench.builtin import default_registry
from ligerbench.cli import app

runner = CliRunner()


@pytest.mark.parametrize("kernel", ["vp_flce", "vp_flp"])
def test_backward_collective_kernels_refuse_simulated_ranks_on_cuda(kernel):
    spec = default_registry().kernels[kernel]
    runs.check_simulated(spec, "cpu", "--nproc")  # CPU: backward runs in the rank's own thread
    with pytest.raises(runs.UsageError) as err:
        runs.check_simulated(spec, "cuda", "--nproc")
    assert "--nproc" in str(err.value) and "device thread" in str(err.value)


def test_the_other_kernels_simulate_anywhere():
    kernels = default_registry().kernels
    assert all("cuda" in kernels[k].simulated_devices for k in kernels if k not in ("vp_flce", "vp_flp"))


@pytest.mark.parametrize("command", [["verify", "--kernel", "vp_flp"], ["selftest", "--kernel", "vp_flce"]])
def test_commands_exit_2_before_running_on_cuda(monkeypatch, tmp_path, command):
    """The device is faked as CUDA: the refusal comes before anything touches it."""
    monkeypatch.setattr(runs, "resolve_device", lambda choice: (torch.device("cuda"), "compiled"))
    result = runner.invoke(app, [*command, "--preset", "quick", "--out", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert "simulated ranks" in result.output and "--nproc" in result.output
    assert not list(tmp_path.iterdir())  # no run was started
