"""A plugin cannot shadow a name, and a run that names a provider of a plugin that failed is
refused: before, a plugin registering a provider named `ours` was dropped whole with a one-line
notice and `verify --provider ours` checked the project's kernel and exited 0 (before 3626426)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from ligerbench.builtin import default_registry, load_plugins
from ligerbench.exits import Refused
from ligerbench.named import require_loadable
from ligerbench.registry import Provider


@dataclass
class FakeEntryPoint:
    name: str
    register: object

    def load(self):
        return self.register


def _provider(name: str) -> Provider:
    return Provider(name=name, kernel="ce", description=f"a plugin's {name}", load=lambda: lambda *a, **k: None)


def _registry_with(*plugins: FakeEntryPoint):
    reg = default_registry(plugins=False)
    loaded = load_plugins(reg, entry_points=list(plugins))
    return reg, loaded


def test_a_plugin_that_shadows_a_name_is_an_error_naming_both():
    reg, loaded = _registry_with(FakeEntryPoint("shadow", lambda r: r.add(_provider("mine"), _provider("ours"))))
    assert loaded == []
    ((name, error),) = reg.plugin_errors
    assert name == "shadow" and "'ours'" in error and "already registered" in error and "cannot shadow" in error
    # what it registered before the collision is taken back; the built-in stays
    assert ("ce", "mine") not in reg.providers and reg.providers[("ce", "ours")].description != "a plugin's ours"
    assert reg.failed_claims == {("ce", "mine"): "shadow", ("ce", "ours"): "shadow"}


@pytest.mark.parametrize("asked", ["ours", "mine"])  # the shadowed built-in name, and the plugin's own
def test_naming_a_provider_of_a_failed_plugin_is_refused(asked):
    reg, _ = _registry_with(FakeEntryPoint("shadow", lambda r: r.add(_provider("mine"), _provider("ours"))))
    if asked == "mine":  # gone with its plugin: the name is unknown, so verify refuses it as a usage error
        assert ("ce", "mine") not in reg.providers
    with pytest.raises(Refused):
        require_loadable(reg, "ce", [asked], "cpu")


def test_a_plugin_with_new_names_loads_and_builtins_still_run():
    reg, loaded = _registry_with(FakeEntryPoint("fine", lambda r: r.add(_provider("mine"))))
    assert loaded == ["fine"] and reg.plugin_errors == [] and reg.failed_claims == {}
    require_loadable(reg, "ce", ["ours", "mine"], "cpu")  # raises nothing
