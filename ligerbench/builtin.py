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

from ligerbench.registry import Provider, RegistrationError, Registry
from ligerbench.selftest import converge as converge_campaign
from ligerbench.selftest.kernels import KERNEL_CAMPAIGN
from ligerbench.suites import ce, converge, flce, flkd, flp, grpo, kd, lp, peers, pref, vp_ce, vp_flce, vp_flp
from ligerbench.suites.common.presets import PRESETS

ENTRY_POINT_GROUP = "ligerbench.plugins"
BUILTIN = (
    ce.register, flce.register, vp_ce.register, vp_flce.register, lp.register, flp.register, vp_flp.register,
    grpo.register, pref.register, kd.register, flkd.register,
    peers.register,  # last: a peer library's adapters span kernels
)  # fmt: skip
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


class _Recording:
    """The registry as a plugin sees it: every Provider it tries to add is noted first (the one
    that collides included), so that a plugin that fails half way still says what it claimed."""

    def __init__(self, reg: Registry):
        self._reg = reg
        self.claimed: list[tuple[str, str]] = []

    def add(self, *items) -> None:
        self.claimed += [(i.kernel, i.name) for i in items if isinstance(i, Provider)]
        for item in items:
            key = (getattr(item, "kernel", None), item.name) if isinstance(item, Provider) else None
            if key in self._reg.providers:
                raise RegistrationError(
                    f"provider {item.name!r} of kernel {item.kernel!r} is already registered "
                    f"({self._reg.providers[key].description!r}); a plugin cannot shadow a name: pick another"
                )
        self._reg.add(*items)

    def __getattr__(self, name: str):
        return getattr(self._reg, name)


def load_plugins(reg: Registry, entry_points=None) -> list[str]:
    """Call every `ligerbench.plugins` entry point (or the given ones); returns the names that
    loaded. A plugin that raises leaves the registry as it found it, is named in
    `reg.plugin_errors`, and every provider it tried to add goes to `reg.failed_claims`."""
    loaded = []
    if entry_points is None:
        entry_points = importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
    for ep in entry_points:
        tables = {name: dict(getattr(reg, name)) for name in TABLES}
        view = _Recording(reg)
        try:
            ep.load()(view)
        except Exception as exc:  # noqa: BLE001 -- a broken plugin is reported, never fatal
            for name, table in tables.items():
                setattr(reg, name, table)
            reg.plugin_errors.append((ep.name, f"{type(exc).__name__}: {exc}"))
            for key in view.claimed:
                reg.failed_claims.setdefault(key, ep.name)
            continue
        loaded.append(ep.name)
    return loaded
