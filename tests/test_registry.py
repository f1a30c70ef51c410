"""Registration is explicit data; third parties add providers through an entry point."""

import importlib.metadata

import pytest
import torch

from ligerbench.registry import Provider, Registry, default_registry


def test_default_registry_has_the_ce_kernel_and_its_providers():
    reg = default_registry(plugins=False)
    assert "ce" in reg.kernels
    names = {p.name for p in reg.providers_for("ce")}
    assert {"ours", "eager", "liger", "torch_compile"} <= names
    assert not any(p.mutant for p in reg.providers_for("ce"))
    assert any(p.mutant for p in reg.providers_for("ce", mutants=True))


def test_duplicate_names_are_refused():
    reg = Registry()
    p = Provider(name="x", kernel="ce", description="", load=lambda: None)
    reg.add(p)
    with pytest.raises(ValueError, match="registered twice"):
        reg.add(p)


def test_entry_point_plugin_is_called(monkeypatch):
    seen = []

    class FakeEntryPoint:
        name = "fake"

        def load(self):
            def register(registry):
                seen.append(registry)
                registry.add(Provider(name="third_party", kernel="ce", description="", load=lambda: None))

            return register

    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: [FakeEntryPoint()])
    reg = default_registry()
    assert seen == [reg] and "third_party" in reg.providers


def test_unavailable_provider_states_a_reason():
    def missing():
        raise ImportError("No module named 'nothing_here'")

    p = Provider(name="ghost", kernel="ce", description="", load=missing)
    assert "not installed" in p.unavailable("cpu")
    gpu_only = Provider(name="g", kernel="ce", description="", load=lambda: 1, devices=("cuda",))
    assert "cuda only" in gpu_only.unavailable("cpu")


def test_env_records_the_commit_it_is_told(monkeypatch):
    from ligerbench import env

    monkeypatch.setenv("LIGERBENCH_COMMIT", "abc1234")
    assert env.capture(torch.device("cpu"), seed=3)["git_commit"] == "abc1234"
    monkeypatch.delenv("LIGERBENCH_COMMIT")
    assert env.capture(torch.device("cpu"), seed=3)["git_commit"] == env.git_commit()
