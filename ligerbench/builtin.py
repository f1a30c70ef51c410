"""What this repository registers, then third-party plugins.

Each built-in kernel has one package in suites/ (suites/<kernel>/) with a `register(registry)`; so does a plugin,
declared under the `ligerbench.plugins` entry-point group in its pyproject.toml:

    [project.entry-points."ligerbench.plugins"]
    mykernels = "mykernels.ligerbench_plugin:register"

Each plugin loads on its own: one that raises (an ImportError in its module, a name registered
twice, a provider for a kernel nobody registered) is recorded in `registry.plugin_errors` with
its name and the error, whatever it registered before raising is taken back, and the rest work.
"""

from __future__ import annotations

import importlib.metadata

from ligerbench.registry import Registry
from ligerbench.selftest import converge as converge_campaign
from ligerbench.selftest.kernels import KERNEL_CAMPAIGN
from ligerbench.suites import ce, converge, flce, vp_ce, vp_flce
from ligerbench.suites.presets import PRESETS

ENTRY_POINT_GROUP = "ligerbench.plugins"
BUILTIN = (ce.register, flce.register, vp_ce.register, vp_flce.register)
TABLES = ("kernels", "providers", "suites", "presets", "campaigns")  # what a failed plugin leaves untouched


def default_registry(*, plugins: bool = True) -> Registry:
    """What this repository ships, plus third-party plugins (each isolated)."""
    reg = Registry()
    reg.add(*PRESETS)
    for register in BUILTIN:
        register(reg)
    reg.add(KERNEL_CAMPAIGN, converge_campaign.campaign(converge.run_case, **converge.SELFTEST))
    if plugins:
        load_plugins(reg)
    return reg


def load_plugins(reg: Registry) -> list[str]:
    """Call every `ligerbench.plugins` entry point; returns the names that loaded."""
    loaded = []
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        tables = {name: dict(getattr(reg, name)) for name in TABLES}
        try:
            ep.load()(reg)
        except Exception as exc:  # noqa: BLE001 -- a broken plugin is reported, never fatal
            for name, table in tables.items():
                setattr(reg, name, table)
            reg.plugin_errors.append((ep.name, f"{type(exc).__name__}: {exc}"))
            continue
        loaded.append(ep.name)
    return loaded
