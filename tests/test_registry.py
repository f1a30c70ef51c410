"""Registration is explicit data; third parties add providers through an entry point."""

import pytest
import torch

from helpers import register_plugin
from ligerbench.builtin import default_registry
from ligerbench.registry import Provider, RegistrationError, Registry


def test_default_registry_has_the_ce_kernel_and_its_providers():
    reg = default_registry(plugins=False)
    assert "ce" in reg.kernels
    names = {p.name for p in reg.providers_for("ce")}
    assert {"ours", "eager", "liger", "torch_compile"} <= names
    assert not any(p.mutant for p in reg.providers_for("ce"))
    assert any(p.mutant for p in reg.providers_for("ce", mutants=True))


def test_duplicate_names_are_refused():
    reg = default_registry(plugins=False)
    p = Provider(name="x", kernel="ce", description="", load=lambda: None)
    reg.add(p)
    with pytest.raises(RegistrationError, match="registered twice"):
        reg.add(p)


def test_providers_are_keyed_by_kernel_and_name():
    reg = default_registry(plugins=False)
    assert reg.provider("ce", "ours") is not reg.provider("flce", "ours")  # one name, two kernels
    assert reg.provider("flce", "ours").kernel == "flce"


def test_a_provider_for_an_unknown_kernel_is_refused_naming_the_known_ones():
    reg = default_registry(plugins=False)
    with pytest.raises(RegistrationError, match="'cee'.*known kernels: ce, flce"):
        reg.add(Provider(name="x", kernel="cee", description="", load=lambda: None))
    assert Registry().kernels == {}


def test_a_plugin_that_raises_is_recorded_and_leaves_the_rest(monkeypatch):
    def broken(reg):
        reg.add(Provider(name="half_registered", kernel="ce", description="", load=lambda: None))
        raise ImportError("No module named 'their_dependency'")

    register_plugin(monkeypatch, broken, name="broken_plugin")
    reg = default_registry()
    assert reg.plugin_errors == [("broken_plugin", "ImportError: No module named 'their_dependency'")]
    assert ("ce", "half_registered") not in reg.providers  # what it added before raising is taken back
    assert ("ce", "ours") in reg.providers


def test_entry_point_plugin_is_called(monkeypatch):
    seen = []

    def register(registry):
        seen.append(registry)
        registry.add(Provider(name="third_party", kernel="ce", description="", load=lambda: None))

    register_plugin(monkeypatch, register)
    reg = default_registry()
    # called once, with a view of the registry that notes what it claims (a plugin that fails
    # half way is still held to its names: tests/test_plugin_shadowing.py); its add lands in reg
    assert len(seen) == 1 and seen[0].kernels is reg.kernels and ("ce", "third_party") in reg.providers


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
