"""What `ligerbench.device.prepare` sets beside Triton's mode: on a GPU run, inductor's C++ glue
kernels skip the CPU vector-ISA probe (~40 s a process on the H100 box); a CPU run keeps it, and
a value the user set is kept. inductor's config is set through its own `patch` (pytest's
monkeypatch undoes a config proxy's attribute by deleting it: pytest 9.2)."""

from __future__ import annotations

import torch
import torch._inductor.config as inductor_config

from ligerbench import device as devices


def test_a_gpu_run_skips_the_cpu_isa_probe():
    with inductor_config.patch({"cpp.vec_isa_ok": None}):
        devices._no_cpu_isa_probe()
        assert inductor_config.cpp.vec_isa_ok is False


def test_a_value_the_user_set_is_kept():
    with inductor_config.patch({"cpp.vec_isa_ok": True}):
        devices._no_cpu_isa_probe()
        assert inductor_config.cpp.vec_isa_ok is True


def test_a_cpu_run_keeps_the_probe():
    with inductor_config.patch({"cpp.vec_isa_ok": None}):
        devices.prepare(torch.device("cpu"))
        assert inductor_config.cpp.vec_isa_ok is None


def test_only_a_gpu_run_asks_for_it(monkeypatch):
    asked = []
    monkeypatch.setattr(devices, "_no_cpu_isa_probe", lambda: asked.append(True))
    monkeypatch.setattr(devices.triton_mode, "decide", lambda interpret: "compiled" if not interpret else "interpreter")
    devices.prepare(torch.device("cpu"))
    assert not asked
    devices.prepare(torch.device("cuda"))
    assert asked == [True]
