"""Everything a command can name, by section: kernels, providers (bench-only ones and planted
bugs too), suites, presets, selftest campaigns and their mutants (converge's included),
converge's models and presets. `ligerbench list` (ligerbench/commands/list.py) shows it.

    data = catalog(default_registry(), "cpu")   # {"kernels": [{...}], "providers": [...], ...}
"""

from __future__ import annotations

from ligerbench import axes
from ligerbench import env as environment
from ligerbench.converge.models import MODELS, PRESETS
from ligerbench.registry import Registry
from ligerbench.selftest import engine


def _library(p) -> str:
    """A peer's distribution, installed version and pin ("" for ours and PyTorch's)."""
    if not p.library:
        return ""
    installed = environment.version_of(p.library)
    return f"{p.library} {installed or 'not installed'} (pinned {p.pinned or 'no'})"


def catalog(registry: Registry, device_type: str) -> dict[str, list[dict]]:
    """Every nameable thing, by section; each entry a dict of plain values (the --json output)."""
    providers = []
    for p in registry.providers.values():
        if p.mutant:
            status = "planted bug"
        else:
            status = p.unavailable(device_type) or ("available, bench only" if p.bench_only else "available")
        providers.append(
            {"kernel": p.kernel, "name": p.name, "status": status, "mutates_input": bool(p.mutates_input),
             # the verdict it is judged by without --strict (ligerbench/tolerance.py)
             "verdict": "strict" if p.strict or p.mutant else "default", "library": _library(p),
             "description": p.description}
        )  # fmt: skip
    aliases = {"tiny": "quick", "gpu": "full"}
    return {
        "kernels": [
            {
                "name": k.name,
                "peer": k.peer,
                "bench_sweeps": list(k.bench.sweeps) if k.bench else [],
                "description": k.description,
                # the tolerance yardsticks (ligerbench/tolerance.py): careful alone, or with textbook
                "yardsticks": "careful, textbook" if k.textbook is not None else "careful",
                "signature": k.signature,  # how a provider is called (docs/providers.md)
                "axes": axes.describe(k.axes),  # its case axes: --where AXIS=VALUE names them
            }
            for k in registry.kernels.values()
        ],  # fmt: skip
        "providers": providers,
        "suites": [
            {"kernel": s.kernel, "name": s.name, "checks": list(s.quantities), "description": s.description}
            for s in registry.suites.values()
        ],
        "presets": [{"name": p.name, "description": p.description} for p in registry.presets.values()],
        "campaigns": [{"name": c.name, "description": c.description} for c in registry.campaigns.values()],
        "mutants": [
            {
                "name": m.name,
                "campaign": m.campaign,
                "kernel": m.kernel,
                "suites": list(m.suites),
                "description": m.description,
            }
            for m in engine.collect(registry, device_type)
        ],  # fmt: skip
        "converge_models": [{"name": m} for m in MODELS],
        "converge_presets": [
            {"name": aliases.get(p.name, p.name), "alias": p.name, "device": p.device, "description": p.description}
            for p in PRESETS.values()
        ],
    }


# the columns shown in the terminal per section (descriptions are long: they go last, and a
# narrow terminal gets each row as a block instead of a grid)
COLUMNS = {
    "kernels": ("name", "peer", "bench_sweeps", "yardsticks", "description"),
    "providers": ("kernel", "name", "status", "verdict", "library", "description"),
    "suites": ("kernel", "name", "checks", "description"),
    "presets": ("name", "description"),
    "campaigns": ("name", "description"),
    "mutants": ("name", "campaign", "kernel", "suites", "description"),
    "converge_models": ("name",),
    "converge_presets": ("name", "alias", "device", "description"),
}
